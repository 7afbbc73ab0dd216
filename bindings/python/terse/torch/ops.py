"""Collective operations on torch tensors: allreduce, allgather, broadcast.

Every operation has an asynchronous form returning an integer handle;
synchronize(handle) waits (without holding the GIL) and returns the result,
poll(handle) tells whether it is done. The tensors an operation reads or
writes are kept alive in a handle table until synchronize() returns, so a
caller may drop its own references after enqueueing. Operations terse
composes from several engine operations (grouped ops, a reducescatter
through a compressor; terse/torch/composed.py) get negative handles;
alltoall and reducescatter are engine operations of their own.

Names identify an operation across the ranks of its process set: every
member must enqueue the same names with the same shapes and dtypes; names
are per set. Unnamed operations get '<op>.noname.<n>' from a per-op,
per-set counter, which matches across ranks when they issue the same
sequence of calls on that set.

process_set: every op takes Horovod's process_set= (terse.process_sets):
only its members may call the op, which reduces, gathers or broadcasts among
them (a broadcast's root_rank is a world rank in the set).

Supported dtypes: float32, float16, bfloat16, float64, int32, int64, uint8,
int8, int16, on the CPU or a CUDA device (int16 on the CPU only: NCCL has no
16-bit integers), and bool for broadcast and allgather (allreduce refuses
it, see docs/torch.md); anything else raises TerseError naming it. Integer
sums and products wrap around modulo 2^bits, as numpy's and torch's do.
Integer Average and scale factors on integers follow Horovod: the sum is
multiplied by postscale/size in double precision and truncated toward zero.

allreduce, allgather and broadcast are autograd functions when their input
requires a gradient (Horovod's gradients: allreduce's is the allreduce of
the gradient with the same op and factors; allgather's is this rank's rows
of the summed gradient; broadcast's is the summed gradient on the root and
zero elsewhere).
"""

import threading

import torch

from terse import basics
from terse import process_sets
from terse._native import lib

TerseError = lib().TerseError
HorovodInternalError = TerseError

# Reduction ops: the engine's ReduceOp values. Adasum reduces each tensor
# alone (never fused) with Adasum's pairwise operator in recursive-doubling
# order (collectives/reduce.h).
Sum = lib().OP_SUM
Average = lib().OP_AVERAGE
Min = lib().OP_MIN
Max = lib().OP_MAX
Product = lib().OP_PRODUCT
Adasum = lib().OP_ADASUM
_OP_NAMES = {Sum: "Sum", Average: "Average", Min: "Min", Max: "Max",
             Product: "Product", Adasum: "Adasum"}

_DTYPE_NAMES = {
    torch.float32: "f32",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.float64: "f64",
    torch.int32: "i32",
    torch.int64: "i64",
    torch.uint8: "u8",
    torch.int8: "i8",
    torch.int16: "i16",
    torch.bool: "bool",
}
_DTYPE_CODES = {t: lib().DTYPES[n] for t, n in _DTYPE_NAMES.items()}
_TORCH_DTYPES = {code: t for t, code in _DTYPE_CODES.items()}
# The per-call fast path (allreduce_async_ of a contiguous floating-point
# CPU tensor, Sum or Average, no compression, the global set): the dtypes
# it takes, and the extension module itself (lib() looks it up per call).
_FAST_CODES = {t: _DTYPE_CODES[t] for t in
               (torch.float32, torch.float64, torch.float16, torch.bfloat16)}
_native = lib()


class _Entry:
    """What an in-flight handle holds: the tensors and how to finish.

    parts: for a composed operation, the handles it waits for (poll() is
    True when all are done); None for one engine operation."""

    __slots__ = ("keep", "finish", "parts")

    def __init__(self, keep, finish, parts=None):
        self.keep = keep      # Tensors the engine reads or writes.
        self.finish = finish  # Called after a successful wait; the result.
        self.parts = parts


class _HandleTable:
    """In-flight handles and the per-op counters for unnamed operations."""

    def __init__(self):
        self._lock = threading.Lock()
        self._entries = {}
        self._counters = {}
        self._next_composed = -1

    def auto_name(self, op, process_set_id=0):
        with self._lock:
            key = (op, process_set_id)
            n = self._counters.get(key, 0)
            self._counters[key] = n + 1
        return f"{op}.noname.{n}"

    def add(self, handle, entry):
        with self._lock:
            self._entries[handle] = entry

    def add_composed(self, entry):
        """Registers a composed operation under a new negative handle."""
        with self._lock:
            handle = self._next_composed
            self._next_composed -= 1
            self._entries[handle] = entry
        return handle

    def get(self, handle):
        with self._lock:
            entry = self._entries.get(handle)
        if entry is None:
            raise TerseError(f"unknown or already synchronized handle {handle}")
        return entry

    def pop(self, handle):
        with self._lock:
            entry = self._entries.pop(handle, None)
        if entry is None:
            raise TerseError(f"unknown or already synchronized handle {handle}")
        return entry

    def __contains__(self, handle):
        with self._lock:
            return handle in self._entries


_table = _HandleTable()


def _describe(tensor, what):
    """(dtype code, device, stream) of a tensor, or TerseError naming it."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{what}: expected a torch.Tensor, got "
                        f"{type(tensor).__name__}")
    code = _DTYPE_CODES.get(tensor.dtype)
    if code is None:
        raise TerseError(
            f"{what}: unsupported dtype {tensor.dtype}; terse moves "
            + ", ".join(str(t) for t in _DTYPE_CODES))
    if tensor.device.type == "cpu":
        return code, -1, 0
    if tensor.device.type == "cuda":
        index = tensor.device.index
        if index is None:
            index = torch.cuda.current_device()
        stream = torch.cuda.current_stream(tensor.device).cuda_stream
        return code, index, stream
    raise TerseError(f"{what}: unsupported device {tensor.device}; terse "
                     "moves CPU and CUDA tensors")


def _prepare(op, name, tensor, process_set=None):
    """Checks init, the name, the process set and the tensor before anything
    is enqueued; returns (name, process set id)."""
    basics.check_initialized(f"{op}()")
    if name is not None and (not isinstance(name, str) or not name):
        raise ValueError(f"{op}: name must be a non-empty string")
    ps_id = process_sets.resolve(process_set, f"{op}()")
    # Validate before an automatic name is drawn, so a refused call does not
    # shift this rank's counter against the other ranks'.
    _describe(tensor, op if name is None else _what(op, name))
    return (_table.auto_name(op, ps_id) if name is None else name), ps_id


def _what(op, name):
    return f"{op} of '{name}'"


def _scaled(tensor, factor):
    """tensor * factor computed in double and cast back (integers truncate
    toward zero), as Horovod's ScaleBuffer does; a new tensor."""
    return (tensor.to(torch.float64) * factor).to(tensor.dtype)


# --- allreduce ---------------------------------------------------------------

def _check_op(op):
    if op not in _OP_NAMES:
        raise ValueError(f"unknown reduce op {op!r}; use terse.torch.Sum, "
                         "Average, Min, Max, Product or Adasum")


def _check_adasum(tensor, name, compression, ps_id=0):
    """op=Adasum: a floating-point tensor, no compression, a power-of-two
    number of ranks (Horovod's CPU rule, and its error)."""
    if compression is not None:
        from terse.compression import Compression
        if Compression.get(compression).name != "none":
            raise ValueError(
                f"allreduce of '{name}': op=Adasum cannot be combined with "
                f"compression={compression!r}; Adasum's dot products need "
                "the exact tensor (pass compression=None)")
    if not tensor.dtype.is_floating_point:
        raise TerseError(f"allreduce of '{name}': Adasum needs a "
                         f"floating-point tensor, not {tensor.dtype}")
    size = process_sets.size_of(ps_id)
    if size & (size - 1):
        raise NotImplementedError(
            "Running Adasum with non-power of 2 ranks is not supported yet "
            f"({size} ranks).")


def _enqueue_allreduce(source, output, name, op, prescale, postscale,
                       compression, ps_id=0):
    """One engine allreduce of `source` into `output` (may be equal) over
    process set `ps_id`."""
    code, device, stream = _describe(source, _what("allreduce", name))
    return _native.allreduce_async(
        name, source.data_ptr(), output.data_ptr(), source.numel(), code,
        device, list(source.shape), op, float(prescale), float(postscale),
        stream, basics.compression_spec(compression), ps_id)


def _allreduce_into(tensor, output, name, op, prescale_factor,
                    postscale_factor, compression, finish, keep, ps_id=0):
    """Enqueues the reduction of `tensor` (contiguous) into `output`
    (contiguous, may be `tensor`); `finish(result)` gives the op's result.

    Float Sum/Average go to the engine with their factors. Integer Average,
    factors on integers and factors with Min/Max/Product/Adasum are applied
    here,
    around an engine Sum (or the op), with Horovod's double-precision
    scaling. The tensor was described (checked) by _prepare, and
    _enqueue_allreduce describes what it enqueues."""
    pre, post = float(prescale_factor), float(postscale_factor)
    floating = tensor.dtype.is_floating_point
    if tensor.dtype == torch.bool:
        engine_op = op  # The engine refuses bool, naming the tensor.
    elif floating and op in (Sum, Average):
        handle = _enqueue_allreduce(tensor, output, name, op, pre, post,
                                    compression, ps_id)
        _table.add(handle, _Entry(keep, lambda: finish(output)))
        return handle
    else:
        engine_op = Sum if op == Average else op
        if op == Average:
            post /= process_sets.size_of(ps_id)
        if pre != 1.0:
            scaled = _scaled(tensor, pre)
            keep = keep + (scaled,)
            tensor = scaled
    handle = _enqueue_allreduce(tensor, output, name, engine_op, 1.0, 1.0,
                                compression, ps_id)

    def finish_scaled():
        if post != 1.0:
            with torch.no_grad():
                output.copy_(_scaled(output, post))
        return finish(output)
    _table.add(handle, _Entry(keep, finish_scaled))
    return handle


def _resolve_op(op, average):
    """Horovod's (op, average) pair (terse.basics.resolve_average); the
    warning names the caller of the public op."""
    return basics.resolve_average(op, average, stacklevel=3)


def allreduce_async(tensor, average=None, name=None, op=None,
                    prescale_factor=1.0, postscale_factor=1.0,
                    process_set=process_sets.global_process_set,
                    compression=None):
    """Enqueues a reduction of `tensor` across ranks into a new tensor.

    op: Average (default), Sum, Min, Max, Product or Adasum. prescale/
    postscale multiply the input before and the result after the reduction
    (Average divides by size() as well). compression: None (the engine's
    policy) or a Compressor / name ('fp16', 'topk:100', Compression.gravac):
    the engine compresses this tensor so on the wire, fused only with
    tensors of the same choice; every rank must pass the same. average:
    deprecated (as in Horovod): True = Average, False = Sum; not together
    with op. process_set: the ranks to reduce over (terse.process_sets;
    Average divides by its size). Returns a handle for synchronize()/poll().
    """
    op = _resolve_op(op, average)
    _check_op(op)
    name, ps_id = _prepare("allreduce", name, tensor, process_set)
    if op == Adasum:
        _check_adasum(tensor, name, compression, ps_id)
    source = tensor.contiguous()
    output = torch.empty_like(source, memory_format=torch.contiguous_format)
    return _allreduce_into(source, output, name, op, prescale_factor,
                           postscale_factor, compression,
                           finish=lambda result: result, keep=(source, output),
                           ps_id=ps_id)


def allreduce_async_(tensor, average=None, name=None, op=None,
                     prescale_factor=1.0, postscale_factor=1.0,
                     process_set=process_sets.global_process_set,
                     compression=None):
    """In-place allreduce_async: the result overwrites `tensor`."""
    # Fast path (issue 19): a training loop's call. What it enqueues and how
    # it finishes are those of the general path below for the same call.
    if (average is None and compression is None and type(name) is str
            and name and (op is None or op == Average or op == Sum)
            and (process_set is process_sets.global_process_set
                 or process_set is None)
            and isinstance(tensor, torch.Tensor)):
        code = _FAST_CODES.get(tensor.dtype)
        # is_cpu, and the shape passed as the torch.Size (a tuple), cost a
        # fifth of tensor.device.type and list(shape) (300 and 120 ns).
        if (code is not None and tensor.is_cpu
                and tensor.is_contiguous() and _native.is_initialized()):
            ptr = tensor.data_ptr()
            handle = _native.allreduce_async(
                name, ptr, ptr, tensor.numel(), code, -1, tensor.shape,
                Average if op is None else op, float(prescale_factor),
                float(postscale_factor), 0, "", 0)
            _table.add(handle, _Entry((tensor,), lambda: tensor))
            return handle
    op = _resolve_op(op, average)
    _check_op(op)
    name, ps_id = _prepare("allreduce", name, tensor, process_set)
    if op == Adasum:
        _check_adasum(tensor, name, compression, ps_id)
    buffer = tensor if tensor.is_contiguous() else tensor.contiguous()

    def finish(result):
        if result is not tensor:
            with torch.no_grad():
                tensor.copy_(result)
        return tensor
    return _allreduce_into(buffer, buffer, name, op, prescale_factor,
                           postscale_factor, compression, finish,
                           keep=(tensor, buffer), ps_id=ps_id)


class _AllreduceFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor,
                compression, process_set):
        ctx.op = op
        ctx.factors = (prescale_factor, postscale_factor)
        ctx.process_set = process_set
        return synchronize(allreduce_async(
            tensor, name=name, op=op, prescale_factor=prescale_factor,
            postscale_factor=postscale_factor, compression=compression,
            process_set=process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, op=ctx.op,
                         prescale_factor=ctx.factors[0],
                         postscale_factor=ctx.factors[1],
                         process_set=ctx.process_set)
        return grad, None, None, None, None, None, None


def _wants_grad(tensor):
    return (isinstance(tensor, torch.Tensor) and tensor.requires_grad
            and torch.is_grad_enabled())


def allreduce(tensor, average=None, name=None, compression=None, op=None,
              prescale_factor=1.0, postscale_factor=1.0,
              process_set=process_sets.global_process_set):
    """The reduction of `tensor` across ranks (a new tensor); differentiable
    when `tensor` requires a gradient."""
    op = _resolve_op(op, average)
    if _wants_grad(tensor):
        process_sets.resolve(process_set, "allreduce()")
        return _AllreduceFunction.apply(tensor, name, op, prescale_factor,
                                        postscale_factor, compression,
                                        process_set)
    return synchronize(allreduce_async(
        tensor, name=name, op=op, prescale_factor=prescale_factor,
        postscale_factor=postscale_factor, process_set=process_set,
        compression=compression))


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0,
               process_set=process_sets.global_process_set,
               compression=None):
    """Reduces `tensor` across ranks in place; returns it."""
    op = _resolve_op(op, average)
    return synchronize(allreduce_async_(
        tensor, name=name, op=op, prescale_factor=prescale_factor,
        postscale_factor=postscale_factor, process_set=process_set,
        compression=compression))


# --- allgather ---------------------------------------------------------------

def _enqueue_allgather(source, name, finish_result, ps_id=0):
    """One engine allgather of `source` (contiguous, ndim >= 1) over process
    set `ps_id`; finish_result(tensor) gives the op's result from the
    gathered tensor."""
    code, device, stream = _describe(source, _what("allgather", name))
    handle = lib().allgather_async(name, source.data_ptr(), source.numel(),
                                   code, device, list(source.shape), stream,
                                   ps_id)

    def finish():
        result = lib().take_allgather(handle)
        output = torch.empty(result.shape, dtype=_TORCH_DTYPES[result.dtype])
        result.copy_to(output.data_ptr(), result.nbytes)
        if source.device.type != "cpu":
            output = output.to(source.device)
        return finish_result(output)

    _table.add(handle, _Entry((source,), finish))
    return handle


def allgather_async(tensor, name=None,
                    process_set=process_sets.global_process_set):
    """Enqueues the concatenation of every rank's `tensor` along dim 0.

    First dimensions may differ across ranks; the others must agree. A 0-dim
    tensor is gathered as shape [1].
    """
    name, ps_id = _prepare("allgather", name, tensor, process_set)
    source = tensor.contiguous()
    if source.dim() == 0:
        source = source.reshape(1)
    return _enqueue_allgather(source, name, lambda output: output, ps_id)


class _AllgatherFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.dim = tensor.shape[0] if tensor.dim() > 0 else 1
        ctx.process_set = process_set
        return synchronize(allgather_async(tensor, name=name,
                                           process_set=process_set))

    @staticmethod
    def backward(ctx, grad_output):
        ps = ctx.process_set
        summed = allreduce(grad_output, op=Sum, process_set=ps)
        dims = allgather(torch.tensor([ctx.dim], dtype=torch.int64),
                         process_set=ps)
        me = process_sets.rank_in(process_sets.resolve(ps, "allgather()"))
        offset = int(dims[:me].sum())
        return summed.narrow(0, offset, ctx.dim), None, None


def allgather(tensor, name=None, process_set=process_sets.global_process_set):
    """Every rank's `tensor` concatenated along dimension 0, rank-major;
    differentiable when `tensor` requires a gradient."""
    if _wants_grad(tensor):
        process_sets.resolve(process_set, "allgather()")
        return _AllgatherFunction.apply(tensor, name, process_set)
    return synchronize(allgather_async(tensor, name, process_set))


# --- broadcast ---------------------------------------------------------------

def _broadcast_into(buffer, root_rank, name, finish, keep, ps_id=0):
    code, device, stream = _describe(buffer, _what("broadcast", name))
    if not isinstance(root_rank, int) or isinstance(root_rank, bool):
        raise TypeError(f"root_rank must be an int, got {root_rank!r}")
    handle = lib().broadcast_async(name, buffer.data_ptr(), buffer.numel(),
                                   code, device, list(buffer.shape),
                                   root_rank, stream, ps_id)
    _table.add(handle, _Entry(keep, finish))
    return handle


def broadcast_async_(tensor, root_rank, name=None,
                     process_set=process_sets.global_process_set):
    """Enqueues an in-place broadcast of `tensor` from `root_rank` (a world
    rank; in the process set)."""
    name, ps_id = _prepare("broadcast", name, tensor, process_set)
    if tensor.is_contiguous():
        return _broadcast_into(tensor, root_rank, name, lambda: tensor,
                               (tensor,), ps_id)
    buffer = tensor.contiguous()

    def finish():
        with torch.no_grad():
            tensor.copy_(buffer)
        return tensor
    return _broadcast_into(buffer, root_rank, name, finish, (tensor, buffer),
                           ps_id)


def broadcast_async(tensor, root_rank, name=None,
                    process_set=process_sets.global_process_set):
    """Enqueues a broadcast from `root_rank` into a new tensor."""
    name, ps_id = _prepare("broadcast", name, tensor, process_set)
    output = tensor.detach().clone(memory_format=torch.contiguous_format)
    return _broadcast_into(output, root_rank, name, lambda: output,
                           (output,), ps_id)


class _BroadcastFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return synchronize(broadcast_async(tensor, root_rank, name=name,
                                           process_set=process_set))

    @staticmethod
    def backward(ctx, grad_output):
        summed = allreduce(grad_output, op=Sum, process_set=ctx.process_set)
        if basics.rank() != ctx.root_rank:
            summed = summed * 0
        return summed, None, None, None


def broadcast(tensor, root_rank, name=None,
              process_set=process_sets.global_process_set):
    """`root_rank`'s `tensor` (a new tensor on every rank); differentiable
    when `tensor` requires a gradient."""
    if _wants_grad(tensor):
        process_sets.resolve(process_set, "broadcast()")
        return _BroadcastFunction.apply(tensor, root_rank, name, process_set)
    return synchronize(broadcast_async(tensor, root_rank, name, process_set))


def broadcast_(tensor, root_rank, name=None,
               process_set=process_sets.global_process_set):
    """Overwrites `tensor` with `root_rank`'s; returns it."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# --- handles -----------------------------------------------------------------

def poll(handle):
    """True when the operation of `handle` has completed (or failed)."""
    if callable(handle):  # sparse_allreduce_async's handle.
        return True
    entry = _table.get(handle)
    if entry.parts is not None:
        return all(poll(part) for part in entry.parts if part in _table)
    return lib().poll(handle)


def synchronize(handle):
    """Waits for `handle` (GIL released) and returns the operation's result.

    Raises TerseError with the engine's message if the operation failed.
    A composed operation waits for all its parts before raising the first
    error, so nothing is left in flight.
    """
    if callable(handle):  # sparse_allreduce_async returns a function.
        return handle()
    entry = _table.pop(handle)
    if entry.parts is None:
        _native.wait(handle)
    return entry.finish()


def synchronize_all(handles):
    """The results of every handle; waits for all, then raises the first
    error if any failed."""
    results, first_error = [], None
    for handle in handles:
        try:
            results.append(synchronize(handle))
        except Exception as e:  # noqa: BLE001 - re-raised below.
            results.append(None)
            if first_error is None:
                first_error = e
    if first_error is not None:
        raise first_error
    return results


def join(device=-1):
    """This rank has no more data; returns the last rank to join (Horovod's
    signature: `device` is accepted for compatibility, terse joins on the
    engine whatever the device)."""
    if not isinstance(device, int):
        raise TypeError(f"join(device=...) takes an int, got {device!r}")
    return basics.join()


def barrier(process_set=process_sets.global_process_set):
    """Blocks until every rank of the process set has called barrier()."""
    basics.check_initialized("barrier()")
    lib().barrier(process_sets.resolve(process_set, "barrier()"))


__all__ = ["Sum", "Average", "Min", "Max", "Product", "Adasum", "TerseError",
           "HorovodInternalError", "allreduce",
           "allreduce_", "allreduce_async", "allreduce_async_", "allgather",
           "allgather_async", "broadcast", "broadcast_", "broadcast_async",
           "broadcast_async_", "poll", "synchronize", "join", "barrier"]
