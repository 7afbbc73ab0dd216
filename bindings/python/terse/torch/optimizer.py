"""DistributedOptimizer: wraps a torch optimizer so step() uses gradients
reduced across every rank.

Each gradient is handed to the engine from its accumulation hook as soon as
backward() has produced it, so communication overlaps the rest of the
backward pass; step() waits for all of them (synchronize()) and then runs the
wrapped optimizer's step.

    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt = terse.DistributedOptimizer(opt, model.named_parameters())
    for x, y in data:
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()

Semantics (as Horovod's and DDP's):
  * op=Average: the gradient is averaged over ranks; op=Sum: summed.
  * backward_passes_per_step=k: gradients accumulate locally (summed, as
    autograd does) over k backward passes and are reduced once; scale the
    loss by 1/k for the mean over the passes.
  * A parameter that got no gradient on this rank by step() is reduced as
    zeros (its .grad becomes a zero tensor), so the ranks that did produce one
    never wait for it.
  * gradient_predivide_factor f: with op=Average, gradients are multiplied by
    1/f before the reduction and by f/size after it.
  * A learning rate that falls by 10% or more between steps is reported to
    the engine (notify_learning_rate_drop: Accordion's signal).

Checkpoints: state_dict()['terse'] carries the engine's compression state
(error-feedback residuals differ per rank). Save with
state_dict(all_ranks=True) on every rank and write rank 0's; restore by
loading on rank 0 and broadcast_optimizer_state() (or by loading the file on
every rank): each rank gets its own residuals back, so training continues
exactly as if never interrupted.
"""

import contextlib
import warnings

import torch

from terse import basics
from terse import process_sets
from terse.compression import Compression
from terse.torch import composed
from terse.torch import ops

_STATE_KEY = "terse"
_STATE_VERSION = 1
# A learning rate below this fraction of the previous step's is a "drop".
LR_DROP_FACTOR = 0.9


def check_momentum_correction(param_groups, momentum):
    """With TERSE_MOMENTUM_CORRECTION = momentum > 0 the engine applies the
    momentum to the gradients (DGC's momentum correction); the optimizer
    applying it again would square it. Raises ValueError naming the group."""
    if momentum <= 0:
        return
    for i, group in enumerate(param_groups):
        if group.get("momentum", 0):
            raise ValueError(
                f"TERSE_MOMENTUM_CORRECTION={momentum:g} applies momentum in "
                f"terse; the optimizer's param group {i} has momentum="
                f"{group['momentum']:g}: use momentum=0 (plain SGD), or set "
                "TERSE_MOMENTUM_CORRECTION=0")


class _DistributedOptimizer:
    """Mixed into a subclass of the wrapped optimizer's class."""

    def _terse_setup(self, named_parameters, compression,
                     backward_passes_per_step, op, gradient_predivide_factor,
                     num_groups=0, groups=None, sparse_as_dense=False,
                     process_set=process_sets.global_process_set):
        if backward_passes_per_step < 1:
            raise ValueError("backward_passes_per_step must be >= 1, got "
                             f"{backward_passes_per_step}")
        if op not in (ops.Average, ops.Sum, ops.Adasum):
            raise ValueError("op must be terse.torch.Average, Sum or Adasum")
        if op == ops.Adasum and compression is not None and \
                Compression.get(compression).name != "none":
            raise ValueError("DistributedOptimizer: op=Adasum cannot be "
                             f"combined with compression={compression!r}")
        if gradient_predivide_factor <= 0:
            raise ValueError("gradient_predivide_factor must be > 0")
        if op != ops.Average and gradient_predivide_factor != 1.0:
            raise ValueError("gradient_predivide_factor applies to "
                             "op=Average only")
        self._terse_compression = (None if compression is None else
                                   Compression.get(compression))
        check_momentum_correction(self.param_groups,
                                  basics.momentum_correction())
        self._terse_passes = backward_passes_per_step
        self._terse_process_set = process_set
        self._terse_op = op
        self._terse_predivide = float(gradient_predivide_factor)
        self._terse_names = self._terse_name_parameters(named_parameters)
        self._terse_params = [p for group in self.param_groups
                              for p in group["params"] if p.requires_grad]
        self._terse_passes_left = {p: backward_passes_per_step
                                   for p in self._terse_params}
        self._terse_handles = {}      # parameter -> handle
        self._terse_synchronized = False
        self._terse_skip_synchronize = False
        self._terse_steps = 0
        self._terse_bytes = 0
        self._terse_last_rates = None
        self._terse_lr_drops = 0
        # Every rank's engine state from the last load_state_dict(), until
        # the next step changes this rank's (see _terse_broadcast_state).
        self._terse_restored_engine = None
        self._terse_grad_accs = []
        self._terse_sparse_as_dense = bool(sparse_as_dense)
        self._terse_group_of, self._terse_groups = self._terse_make_groups(
            num_groups, groups)
        self._terse_ready = set()     # Parameters whose group is not full.
        self._terse_register_hooks()

    def _terse_make_groups(self, num_groups, groups):
        """Horovod's num_groups / groups: gradients of one group are
        enqueued together once all of them are ready. Returns (parameter ->
        group index, list of groups); no grouping: ({}, [])."""
        if groups is not None and num_groups:
            raise ValueError("pass num_groups or groups, not both")
        if groups is not None:
            if not isinstance(groups, (list, tuple)) or not all(
                    isinstance(g, (list, tuple)) for g in groups):
                raise ValueError("groups must be a list of lists of "
                                 "parameters")
            member = {p for g in groups for p in g}
            unknown = [p for p in member if p not in self._terse_names]
            if unknown:
                raise ValueError(f"groups holds {len(unknown)} tensor(s) that "
                                 "are not parameters of this optimizer")
            result = [[p for p in g if p.requires_grad] for g in groups]
            # Parameters in no group form groups of one (as Horovod).
            result += [[p] for p in self._terse_params if p not in member]
        elif num_groups:
            if not isinstance(num_groups, int) or num_groups < 0:
                raise ValueError(f"num_groups must be an int >= 0, got "
                                 f"{num_groups!r}")
            params = self._terse_params
            k = min(num_groups, len(params)) or 1
            base, extra = divmod(len(params), k)
            result, start = [], 0
            for i in range(k):
                n = base + (1 if i < extra else 0)
                result.append(params[start:start + n])
                start += n
        else:
            return {}, []
        result = [g for g in result if g]
        return ({p: i for i, g in enumerate(result) for p in g}, result)

    def _terse_name_parameters(self, named_parameters):
        all_params = [p for group in self.param_groups
                      for p in group["params"]]
        if named_parameters is None:
            return {p: f"param.{i}" for i, p in enumerate(all_params)}
        named = list(named_parameters)
        if any(not (isinstance(item, tuple) and len(item) == 2)
               for item in named):
            raise ValueError("named_parameters must be (name, parameter) "
                             "pairs, e.g. model.named_parameters()")
        names = [name for name, _ in named]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError("named_parameters holds these names more than "
                             f"once: {duplicates}")
        by_param = {p: name for name, p in named}
        unnamed = [i for i, p in enumerate(all_params) if p not in by_param]
        if unnamed:
            raise ValueError(
                f"{len(unnamed)} parameter(s) of the optimizer are not in "
                "named_parameters (positions "
                f"{unnamed[:5]}); pass the model's named_parameters()")
        return {p: by_param[p] for p in all_params}

    def _terse_register_hooks(self):
        for p in self._terse_params:
            # Runs before autograd adds the new gradient into p.grad: refuse
            # while p.grad is being reduced, or the sum would race with it.
            p.register_hook(self._terse_make_guard(p))
            # The AccumulateGrad node of p: its hooks run once p.grad holds
            # this backward pass's gradient.
            accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
            accumulator.register_hook(self._terse_make_hook(p))
            self._terse_grad_accs.append(accumulator)

    def _terse_make_guard(self, p):
        def guard(grad):
            if p in self._terse_handles:
                raise RuntimeError(
                    f"the gradient of '{self._terse_names[p]}' was computed "
                    "more than backward_passes_per_step="
                    f"{self._terse_passes} times before step(); raise "
                    "backward_passes_per_step to accumulate locally")
            return grad
        return guard

    def _terse_make_hook(self, p):
        def hook(*unused):
            self._terse_passes_left[p] -= 1
            if self._terse_passes_left[p] == 0:
                self._terse_ready_to_reduce(p)
        return hook

    def _terse_ready_to_reduce(self, p):
        if self._terse_op == ops.Adasum:
            return  # Adasum reduces parameter deltas in step().
        group = self._terse_group_of.get(p)
        if group is None:
            self._terse_handles[p] = self._terse_reduce_async(p)
            return
        self._terse_ready.add(p)
        members = self._terse_groups[group]
        if all(q in self._terse_ready for q in members):
            # One engine group (as Horovod's grouped_allreduce): negotiated
            # in one cycle, fused only among themselves.
            with composed._EngineGroup(f"grad.group.{group}"):
                for q in members:
                    self._terse_ready.discard(q)
                    self._terse_handles[q] = self._terse_reduce_async(q)

    def _terse_check_learning_rate(self):
        """Tells the engine when a group's learning rate fell by >= 10%.

        Runs before the first gradient of a step is enqueued: every rank
        then notifies before any bucket of that step can run (a bucket waits
        for every rank's tensors), so all ranks' policies see the drop at
        the same step.
        """
        rates = [group.get("lr") for group in self.param_groups]
        last = self._terse_last_rates
        self._terse_last_rates = rates
        if last is None or len(last) != len(rates):
            return
        if any(isinstance(now, (int, float)) and isinstance(was, (int, float))
               and now < LR_DROP_FACTOR * was
               for now, was in zip(rates, last)):
            basics.notify_learning_rate_drop()
            self._terse_lr_drops += 1

    def _terse_reduce_async(self, p):
        if not self._terse_handles:
            self._terse_check_learning_rate()
        if p.grad is None:
            p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
        name = f"grad.{self._terse_names[p]}"
        if p.grad.is_sparse:
            if self._terse_sparse_as_dense:
                p.grad = p.grad.to_dense()
            else:
                self._terse_bytes += (p.grad._values().numel() *
                                      p.grad.element_size())
                return composed.sparse_allreduce_async(
                    p.grad, name, self._terse_op,
                    process_set=self._terse_process_set)
        prescale, postscale = 1.0, 1.0
        if self._terse_op == ops.Average:
            prescale = 1.0 / self._terse_predivide
            postscale = self._terse_predivide
        self._terse_bytes += p.grad.numel() * p.grad.element_size()
        return ops.allreduce_async_(
            p.grad, name=name, op=self._terse_op,
            prescale_factor=prescale, postscale_factor=postscale,
            process_set=self._terse_process_set,
            compression=self._terse_compression)

    def synchronize(self):
        """Reduces every gradient not yet handed over and waits for all.

        After it, each parameter's .grad holds the reduced gradient. step()
        calls it unless inside skip_synchronize().
        """
        if self._terse_op == ops.Adasum:
            self._terse_synchronized = True
            return
        self._terse_ready.clear()
        for p in self._terse_params:
            if p not in self._terse_handles:
                self._terse_handles[p] = self._terse_reduce_async(p)
        pending = list(self._terse_handles.items())
        self._terse_handles.clear()
        for p in self._terse_params:
            self._terse_passes_left[p] = self._terse_passes
        first_error = None
        for p, handle in pending:
            try:
                result = ops.synchronize(handle)
                if callable(handle):  # Sparse: a new tensor.
                    p.grad = result
            except Exception as e:  # noqa: BLE001 - re-raised below.
                if first_error is None:
                    first_error = e
        if first_error is not None:
            raise first_error
        self._terse_synchronized = True

    def _terse_adasum_step(self, closure):
        """Horovod's Adasum optimizer: each rank takes its own step, then
        the parameter deltas are combined with Adasum and applied to the
        parameters as they were before the step."""
        start = [p.detach().clone() for p in self._terse_params]
        for p in self._terse_params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            self._terse_passes_left[p] = self._terse_passes
        loss = super().step(closure)
        with torch.no_grad():
            deltas = [p.detach() - s
                      for p, s in zip(self._terse_params, start)]
            handles = [ops.allreduce_async(
                d, name=f"delta.{self._terse_names[p]}", op=ops.Adasum,
                process_set=self._terse_process_set)
                for p, d in zip(self._terse_params, deltas)]
            for p, s, combined in zip(self._terse_params, start,
                                      ops.synchronize_all(handles)):
                p.copy_(s + combined)
        return loss

    @contextlib.contextmanager
    def skip_synchronize(self):
        """step() inside this block does not synchronize (call it first):

            optimizer.synchronize()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            with optimizer.skip_synchronize():
                optimizer.step()
        """
        self._terse_skip_synchronize = True
        try:
            yield
        finally:
            self._terse_skip_synchronize = False

    def step(self, closure=None):
        if not self._terse_skip_synchronize:
            if self._terse_synchronized and not self._terse_handles:
                warnings.warn(
                    "optimizer.step() after optimizer.synchronize() without "
                    "skip_synchronize(): the gradients are reduced again")
            self.synchronize()
        elif not self._terse_synchronized:
            raise RuntimeError("step() inside skip_synchronize() needs "
                               "synchronize() to have run first")
        self._terse_synchronized = False
        self._terse_steps += 1
        self._terse_restored_engine = None
        if self._terse_op == ops.Adasum:
            return self._terse_adasum_step(closure)
        return super().step(closure)

    def zero_grad(self, *args, **kwargs):
        if self._terse_handles:
            raise RuntimeError(
                "zero_grad() while gradients are being reduced: call "
                "step() or synchronize() after backward() first")
        return super().zero_grad(*args, **kwargs)

    def state_dict(self, all_ranks=False):
        """The wrapped optimizer's state_dict plus terse's under 'terse'.

        state['terse'] holds the compression choice, the settings that shape
        the reduction, the step count, and 'engine': {'size': ranks,
        'states': {rank: bytes}}, the engine's compression state (policy
        state and error-feedback residuals, which differ between ranks).

        all_ranks=False (default): only this rank's engine state; call it on
        any subset of ranks. all_ranks=True: collective, every rank must call
        it; the result holds every rank's engine state, so one file written
        by rank 0 restores every rank exactly.
        """
        state = super().state_dict()
        choice = self._terse_compression
        own = basics.save_compression_state()
        if all_ranks:
            from terse.torch.functions import allgather_object
            gathered = allgather_object(own, name="terse.state_dict")
            states = dict(enumerate(gathered))
        else:
            states = {basics.rank(): own}
        state[_STATE_KEY] = {
            "version": _STATE_VERSION,
            "compression": None if choice is None else choice.name,
            "cf": None if choice is None else choice.cf,
            "engine_compression": basics.engine_compression().spec(),
            "backward_passes_per_step": self._terse_passes,
            "op": ops._OP_NAMES[self._terse_op],
            "gradient_predivide_factor": self._terse_predivide,
            "steps": self._terse_steps,
            "engine": {"size": basics.size(), "states": states},
        }
        return state

    def load_state_dict(self, state_dict):
        """Loads the wrapped optimizer's state and, from 'terse', the step
        count and this rank's engine state (warning when the checkpoint has
        none for this rank: its residuals then start from zero)."""
        state_dict = dict(state_dict)
        terse_state = state_dict.pop(_STATE_KEY, None)
        super().load_state_dict(state_dict)
        if terse_state is None:
            return
        if terse_state.get("version") != _STATE_VERSION:
            raise ValueError("checkpoint holds terse state version "
                             f"{terse_state.get('version')}, this terse "
                             f"reads {_STATE_VERSION}")
        saved = terse_state.get("engine_compression")
        now = basics.engine_compression().spec()
        if saved != now:
            warnings.warn(f"checkpoint was written with compression {saved}, "
                          f"this run uses {now}")
        self._terse_steps = int(terse_state.get("steps", 0))
        engine = terse_state.get("engine")
        if engine is None:  # Sent by broadcast_optimizer_state without it.
            return
        rank, size = basics.rank(), basics.size()
        states = engine.get("states", {})
        if engine.get("size") != size:
            warnings.warn(
                f"checkpoint's compression state is from {engine.get('size')}"
                f" ranks, this run has {size}: residuals start from zero")
        elif rank not in states:
            warnings.warn(
                f"checkpoint has no compression state for rank {rank} (saved "
                f"ranks {sorted(states)}; save with state_dict(all_ranks="
                "True)): its residuals start from zero")
        else:
            basics.load_compression_state(states[rank])
            self._terse_restored_engine = engine

    def _terse_broadcast_state(self):
        """The state broadcast_optimizer_state sends from the root: every
        rank's engine state if one was just loaded, else none (each rank's
        is its own)."""
        state = self.state_dict()
        state[_STATE_KEY]["engine"] = self._terse_restored_engine
        return state

    @property
    def terse_bytes_reduced(self):
        """Gradient bytes this rank handed to the engine so far (before any
        compression: what was reduced, not what crossed the wire)."""
        return self._terse_bytes

    @property
    def terse_steps(self):
        """Steps taken through this wrapper (restored by load_state_dict)."""
        return self._terse_steps


def DistributedOptimizer(optimizer, named_parameters=None, compression=None,
                         backward_passes_per_step=1, op=ops.Average,
                         gradient_predivide_factor=1.0, num_groups=0,
                         groups=None, sparse_as_dense=False,
                         process_set=process_sets.global_process_set):
    """Wraps `optimizer` so that step() applies rank-reduced gradients.

    optimizer: any torch.optim.Optimizer; the wrapper shares its parameter
        groups and state (the same objects) and is an instance of its class.
    named_parameters: model.named_parameters(); names identify gradients
        across ranks (without it, names follow the optimizer's order).
    compression: None = the process-wide policy (TERSE_COMPRESSION or
        init(compression=...), per tensor TERSE_COMPRESSION_RULES on the
        names 'grad.<parameter name>'). A terse.Compression member / name
        ('fp16', 'topk:100', Compression.gravac) is passed with every
        gradient's allreduce and wins over those rules; every rank must pass
        the same choice.
    backward_passes_per_step, op, gradient_predivide_factor: see the module
        docstring. op=Adasum: Horovod's Adasum optimizer (each rank steps,
        the parameter deltas are combined with Adasum).
    num_groups / groups: Horovod's gradient groups: the gradients of a
        group are enqueued together once all are ready (num_groups splits
        the parameters, in order, into that many groups).
    sparse_as_dense: sparse gradients are densified and allreduced; without
        it they go through sparse_allreduce_async (allgather).
    process_set: the ranks whose gradients are averaged (terse.process_sets;
        the default: every rank); every member wraps its optimizer with it.
    """
    basics.check_initialized("DistributedOptimizer()")
    process_sets.resolve(process_set, "DistributedOptimizer()")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError("DistributedOptimizer wraps a torch.optim.Optimizer, "
                        f"not {type(optimizer).__name__}")
    base = type(optimizer)
    cls = type(base.__name__, (_DistributedOptimizer, base),
               {"__module__": __name__})
    wrapped = cls.__new__(cls)
    wrapped.__dict__.update(optimizer.__dict__)
    wrapped._terse_setup(named_parameters, compression,
                         backward_passes_per_step, op,
                         gradient_predivide_factor, num_groups, groups,
                         sparse_as_dense, process_set)
    return wrapped


__all__ = ["DistributedOptimizer"]
