"""Collective operations on torch tensors: allreduce, allgather, broadcast.

Every operation has an asynchronous form returning an integer handle;
synchronize(handle) waits (without holding the GIL) and returns the result,
poll(handle) tells whether it is done. The tensors an operation reads or
writes are kept alive in a handle table until synchronize() returns, so a
caller may drop its own references after enqueueing.

Names identify an operation across ranks: every rank must enqueue the same
names with the same shapes and dtypes. Unnamed operations get
'<op>.noname.<n>' from a per-op counter, which matches across ranks when
they issue the same sequence of calls.

Supported dtypes: float32, float16, bfloat16, float64, int32, int64, uint8,
int8, int16, on the CPU or a CUDA device (int16 on the CPU only: NCCL has no
16-bit integers), and bool for broadcast and allgather (allreduce refuses
it, see docs/torch.md); anything else raises TerseError naming it. Integer
sums wrap around modulo 2^bits, as numpy's and torch's do.
"""

import threading
import warnings

import torch

from terse import basics
from terse._native import lib

TerseError = lib().TerseError

# Reduction ops (the engine's ReduceOp values).
Sum = lib().OP_SUM
Average = lib().OP_AVERAGE
Min = lib().OP_MIN
Max = lib().OP_MAX
_OP_NAMES = {Sum: "Sum", Average: "Average", Min: "Min", Max: "Max"}

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


class _Entry:
    """What an in-flight handle holds: the tensors and how to finish."""

    __slots__ = ("keep", "finish")

    def __init__(self, keep, finish):
        self.keep = keep      # Tensors the engine reads or writes.
        self.finish = finish  # Called after a successful wait; the result.


class _HandleTable:
    """In-flight handles and the per-op counters for unnamed operations."""

    def __init__(self):
        self._lock = threading.Lock()
        self._entries = {}
        self._counters = {}

    def auto_name(self, op):
        with self._lock:
            n = self._counters.get(op, 0)
            self._counters[op] = n + 1
        return f"{op}.noname.{n}"

    def add(self, handle, entry):
        with self._lock:
            self._entries[handle] = entry

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


def _prepare(op, name, tensor):
    """Checks init, the name and the tensor before anything is enqueued."""
    basics.check_initialized(f"{op}()")
    if name is not None and (not isinstance(name, str) or not name):
        raise ValueError(f"{op}: name must be a non-empty string")
    # Validate before an automatic name is drawn, so a refused call does not
    # shift this rank's counter against the other ranks'.
    _describe(tensor, op if name is None else _what(op, name))
    return _table.auto_name(op) if name is None else name


def _what(op, name):
    return f"{op} of '{name}'"


# --- allreduce ---------------------------------------------------------------

def _check_scale(op, prescale_factor, postscale_factor):
    if op not in _OP_NAMES:
        raise ValueError(f"unknown reduce op {op!r}; use terse.torch.Sum, "
                         "Average, Min or Max")
    if op in (Min, Max) and (prescale_factor != 1.0 or
                             postscale_factor != 1.0):
        raise ValueError("prescale/postscale factors apply to Sum and "
                         "Average only")


def _allreduce_into(tensor, output, name, op, prescale_factor,
                    postscale_factor, compression, finish, keep):
    code, device, stream = _describe(tensor, _what("allreduce", name))
    _check_scale(op, prescale_factor, postscale_factor)
    handle = lib().allreduce_async(
        name, tensor.data_ptr(), output.data_ptr(), tensor.numel(), code,
        device, list(tensor.shape), op, float(prescale_factor),
        float(postscale_factor), stream, basics.compression_spec(compression))
    _table.add(handle, _Entry(keep, finish))
    return handle


def _resolve_op(op, average):
    """Horovod 0.28.1's handle_average_backwards_compatibility: `average` is
    deprecated; True means Average, False Sum; passing both is an error."""
    if op is not None:
        if average is not None:
            raise ValueError("The op parameter supersedes average. Please "
                             "provide only one of them.")
        return op
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and "
                      "will be removed in v1.0", DeprecationWarning,
                      stacklevel=3)
        return Average if average else Sum
    return Average


def allreduce_async(tensor, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, compression=None, average=None):
    """Enqueues a reduction of `tensor` across ranks into a new tensor.

    op: Average (default), Sum, Min or Max. prescale/postscale multiply the
    input before and the result after the reduction (Average divides by
    size() as well). compression: None (the engine's policy) or a
    Compressor / name ('fp16', 'topk:100', Compression.gravac): the engine
    compresses this tensor so on the wire, fused only with tensors of the
    same choice; every rank must pass the same. average: deprecated (as in
    Horovod): True = Average, False = Sum; not together with op. Returns a
    handle for synchronize()/poll().
    """
    op = _resolve_op(op, average)
    name = _prepare("allreduce", name, tensor)
    source = tensor.contiguous()
    output = torch.empty_like(source, memory_format=torch.contiguous_format)
    return _allreduce_into(source, output, name, op, prescale_factor,
                           postscale_factor, compression,
                           finish=lambda: output, keep=(source, output))


def allreduce_async_(tensor, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, compression=None, average=None):
    """In-place allreduce_async: the result overwrites `tensor`."""
    op = _resolve_op(op, average)
    name = _prepare("allreduce", name, tensor)
    if tensor.is_contiguous():
        buffer = tensor
        finish = lambda: tensor  # noqa: E731
    else:
        buffer = tensor.contiguous()

        def finish():
            with torch.no_grad():
                tensor.copy_(buffer)
            return tensor
    return _allreduce_into(buffer, buffer, name, op, prescale_factor,
                           postscale_factor, compression, finish,
                           keep=(tensor, buffer))


def allreduce(tensor, name=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0, compression=None, average=None):
    """The reduction of `tensor` across ranks (a new tensor)."""
    op = _resolve_op(op, average)
    return synchronize(allreduce_async(tensor, name, op, prescale_factor,
                                       postscale_factor, compression))


def allreduce_(tensor, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, compression=None, average=None):
    """Reduces `tensor` across ranks in place; returns it."""
    op = _resolve_op(op, average)
    return synchronize(allreduce_async_(tensor, name, op, prescale_factor,
                                        postscale_factor, compression))


# --- allgather ---------------------------------------------------------------

def allgather_async(tensor, name=None):
    """Enqueues the concatenation of every rank's `tensor` along dim 0.

    First dimensions may differ across ranks; the others must agree. A 0-dim
    tensor is gathered as shape [1].
    """
    name = _prepare("allgather", name, tensor)
    source = tensor.contiguous()
    if source.dim() == 0:
        source = source.reshape(1)
    code, device, stream = _describe(source, _what("allgather", name))
    handle = lib().allgather_async(name, source.data_ptr(), source.numel(),
                                   code, device, list(source.shape), stream)

    def finish():
        result = lib().take_allgather(handle)
        output = torch.empty(result.shape, dtype=_TORCH_DTYPES[result.dtype])
        result.copy_to(output.data_ptr(), result.nbytes)
        if source.device.type != "cpu":
            output = output.to(source.device)
        return output

    _table.add(handle, _Entry((source,), finish))
    return handle


def allgather(tensor, name=None):
    """Every rank's `tensor` concatenated along dimension 0, rank-major."""
    return synchronize(allgather_async(tensor, name))


# --- broadcast ---------------------------------------------------------------

def _broadcast_into(buffer, root_rank, name, finish, keep):
    code, device, stream = _describe(buffer, _what("broadcast", name))
    if not isinstance(root_rank, int) or isinstance(root_rank, bool):
        raise TypeError(f"root_rank must be an int, got {root_rank!r}")
    handle = lib().broadcast_async(name, buffer.data_ptr(), buffer.numel(),
                                   code, device, list(buffer.shape),
                                   root_rank, stream)
    _table.add(handle, _Entry(keep, finish))
    return handle


def broadcast_async_(tensor, root_rank, name=None):
    """Enqueues an in-place broadcast of `tensor` from `root_rank`."""
    name = _prepare("broadcast", name, tensor)
    if tensor.is_contiguous():
        return _broadcast_into(tensor, root_rank, name, lambda: tensor,
                               (tensor,))
    buffer = tensor.contiguous()

    def finish():
        with torch.no_grad():
            tensor.copy_(buffer)
        return tensor
    return _broadcast_into(buffer, root_rank, name, finish, (tensor, buffer))


def broadcast_async(tensor, root_rank, name=None):
    """Enqueues a broadcast from `root_rank` into a new tensor."""
    name = _prepare("broadcast", name, tensor)
    output = tensor.detach().clone(memory_format=torch.contiguous_format)
    return _broadcast_into(output, root_rank, name, lambda: output,
                           (output,))


def broadcast(tensor, root_rank, name=None):
    """`root_rank`'s `tensor` (a new tensor on every rank)."""
    return synchronize(broadcast_async(tensor, root_rank, name))


def broadcast_(tensor, root_rank, name=None):
    """Overwrites `tensor` with `root_rank`'s; returns it."""
    return synchronize(broadcast_async_(tensor, root_rank, name))


# --- handles -----------------------------------------------------------------

def poll(handle):
    """True when the operation of `handle` has completed (or failed)."""
    if handle not in _table:
        raise TerseError(f"unknown or already synchronized handle {handle}")
    return lib().poll(handle)


def synchronize(handle):
    """Waits for `handle` (GIL released) and returns the operation's result.

    Raises TerseError with the engine's message if the operation failed.
    """
    entry = _table.pop(handle)
    lib().wait(handle)
    return entry.finish()


__all__ = ["Sum", "Average", "Min", "Max", "TerseError", "allreduce",
           "allreduce_", "allreduce_async", "allreduce_async_", "allgather",
           "allgather_async", "broadcast", "broadcast_", "broadcast_async",
           "broadcast_async_", "poll", "synchronize"]
