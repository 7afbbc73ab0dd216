"""Horovod's elastic training API on a fixed set of ranks.

    import terse.torch as hvd
    state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            ...                       # steps; any collective may fail
            state.commit()            # a point to come back to

    train(state)

What terse does: `run` syncs the state from rank 0, then calls the function.
When a collective fails with HorovodInternalError (terse's TerseError: a
mismatch across ranks, a stalled tensor, ...), terse raises it on every
rank (docs/torch.md), so every rank restores its last commit, runs the
reset callbacks, syncs from rank 0 again and calls the function anew. The
engine keeps running: the ranks are the same ones.

What it does not: add or remove hosts. terse has no elastic launcher (no
host discovery, no re-forming of the MPI job), so a rank that dies ends the
job as with plain mpirun; HostsUpdatedInterrupt exists for Horovod code but
is never raised. After TERSE_ELASTIC_MAX_RESTORES (default 5) consecutive
failures without a commit in between, run re-raises the error instead of
looping.
"""

import copy
import functools
import math
import os
import random

import torch

from terse import basics
from terse.torch import functions
from terse.torch import ops


class HostsUpdatedInterrupt(RuntimeError):
    """Horovod's signal that hosts were added or removed; terse never raises
    it (fixed ranks)."""

    def __init__(self, skip_sync=False):
        super().__init__("hosts updated")
        self.skip_sync = skip_sync


class State:
    """Horovod's elastic State: commit() / restore() / sync() plus reset
    callbacks. Subclasses implement save(), restore() and sync()."""

    def __init__(self, bcast_object=None, get_rank=None):
        self._bcast_object = bcast_object or functions.broadcast_object
        self._rank = get_rank or basics.rank
        self._reset_callbacks = []
        self._commits = 0

    def register_reset_callbacks(self, callbacks):
        """Functions called (no arguments) after every restore, before the
        state is synced again."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp, update_res):
        """Horovod's listener hook; hosts never change in terse."""

    def commit(self):
        """Saves the state in memory as the point restore() returns to."""
        self.save()
        self._commits += 1
        self.check_host_updates()

    def check_host_updates(self):
        """Horovod raises HostsUpdatedInterrupt here when hosts changed; on
        terse's fixed ranks nothing changes."""

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()


class ObjectState(State):
    """Picklable attributes (the keyword arguments) as elastic state."""

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        super().__init__(bcast_object, get_rank)
        self._saved_state = kwargs
        self._set_attrs()

    def _set_attrs(self):
        for name, value in self._saved_state.items():
            setattr(self, name, value)

    def save(self):
        self._saved_state = {name: copy.deepcopy(getattr(self, name))
                             for name in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(
                self._saved_state, root_rank=0,
                name=ops._table.auto_name("elastic.sync"))
            self._set_attrs()


class TorchState(ObjectState):
    """A model's and an optimizer's state plus picklable attributes.

    commit() keeps deep copies of model.state_dict() and
    optimizer.state_dict() in memory; restore() loads them back; sync()
    broadcasts rank 0's parameters, optimizer state and attributes.
    Keyword arguments that are ElasticSamplers are kept by their
    state_dict() (epoch and samples processed), not copied whole."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        self.model = model
        self.optimizer = optimizer
        self._saved_model = self._saved_optimizer = None
        self._samplers = {k: v for k, v in kwargs.items()
                          if isinstance(v, ElasticSampler)}
        self._saved_samplers = {}
        for name, sampler in self._samplers.items():
            setattr(self, name, sampler)
        super().__init__(**{k: v for k, v in kwargs.items()
                            if k not in self._samplers})
        self._save_torch()

    def _save_torch(self):
        if self.model is not None:
            self._saved_model = copy.deepcopy(self.model.state_dict())
        if self.optimizer is not None:
            state = self.optimizer.state_dict()
            # A terse DistributedOptimizer's engine state stays in the
            # engine (error-feedback residuals are not rolled back).
            state.pop("terse", None)
            self._saved_optimizer = copy.deepcopy(state)
        self._saved_samplers = {k: s.state_dict()
                                for k, s in self._samplers.items()}

    def save(self):
        self._save_torch()
        super().save()

    def restore(self):
        if self.model is not None:
            self.model.load_state_dict(self._saved_model)
        if self.optimizer is not None:
            self.optimizer.load_state_dict(self._saved_optimizer)
        for name, sampler in self._samplers.items():
            sampler.load_state_dict(self._saved_samplers[name])
        super().restore()

    def sync(self):
        if self.model is not None:
            functions.broadcast_parameters(
                self.model.state_dict(), root_rank=0,
                prefix=ops._table.auto_name("elastic.model"))
        if self.optimizer is not None:
            functions.broadcast_optimizer_state(self.optimizer, root_rank=0)
        if self._samplers:
            states = self._bcast_object(
                {k: s.state_dict() for k, s in self._samplers.items()},
                root_rank=0, name=ops._table.auto_name("elastic.samplers"))
            for name, sampler in self._samplers.items():
                sampler.load_state_dict(states[name])
        super().sync()


class ElasticSampler(torch.utils.data.Sampler):
    """Horovod's ElasticSampler: this rank's share of the samples of an
    epoch not processed yet.

    Each epoch the indices are shuffled with seed + epoch (when shuffle),
    the first processed_num are skipped, the rest padded by repetition to a
    multiple of size() and dealt out round-robin (rank r takes positions r,
    r + size, ...). record_batch(batch_idx, batch_size) counts a global
    batch (batch_size on every rank) as processed; state_dict() /
    load_state_dict() carry (epoch, processed_num), so TorchState restores
    it with the last commit and a restart resumes mid-epoch."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0
        self.reset()

    def set_epoch(self, epoch):
        """Starts epoch `epoch` from its first sample."""
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """One batch of batch_size per rank has been processed."""
        self.processed_num += batch_size * self.num_replicas

    def record_indices(self, indices):
        """`indices` (this rank's, as a list) have been processed."""
        self.processed_num += len(indices) * self.num_replicas

    def state_dict(self):
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_num = state_dict["processed_num"]
        self.reset()

    def reset(self):
        """Re-deals the remaining indices over the current ranks."""
        self.num_replicas = basics.size()
        self.rank = basics.rank()
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        self.remaining_indices = order[self.processed_num:]
        self.num_samples = int(math.ceil(len(self.remaining_indices) /
                                         self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        indices = list(self.remaining_indices)
        while indices and len(indices) < self.total_size:
            indices += indices[:self.total_size - len(indices)]
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self.num_samples


def _max_restores():
    try:
        return max(0, int(os.environ.get("TERSE_ELASTIC_MAX_RESTORES", "5")))
    except ValueError:
        raise ops.TerseError(
            "TERSE_ELASTIC_MAX_RESTORES must be an integer, got "
            f"{os.environ['TERSE_ELASTIC_MAX_RESTORES']!r}") from None


def run(func):
    """Horovod's elastic.run: func(state, ...) is retried from the last
    commit whenever a collective fails (see the module docstring)."""
    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        basics.check_initialized("elastic.run()")
        limit = _max_restores()
        failures, commits_at_failure = 0, None
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except ops.HorovodInternalError:
                if commits_at_failure != state._commits:
                    failures = 0
                failures += 1
                commits_at_failure = state._commits
                if failures > limit:
                    raise
                state.restore()
                skip_sync = False
            except HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
            state.on_reset()
    return wrapper


__all__ = ["run", "State", "ObjectState", "TorchState", "ElasticSampler",
           "HostsUpdatedInterrupt"]
