"""Operations terse composes from its engine's ops, and the native
alltoall and reducescatter.

What each costs on the wire (n ranks, B bytes of input per rank):

  * grouped_allreduce / grouped_allgather / grouped_reducescatter: one
    engine op per tensor, enqueued as one engine group (Engine::GroupStart):
    negotiated in one cycle once every member is ready on every rank,
    fused only among themselves, failing as one on every rank. No extra
    bytes.
  * reducescatter: native, one engine reducescatter (Communicator::
    ReduceScatter): about B(n-1)/n per rank. With a compression other than
    none it stays composed: an allreduce of the whole tensor through the
    engine's compressor, then this rank's rows (Horovod's split rule: of R
    rows, R // n each, the first R % n ranks one more).
  * alltoall: native, one engine alltoall (Communicator::Alltoallv): each
    rank sends the rows meant for the others and receives the rows sent to
    it, about B out and B in per rank.

Native ops move host memory: a CUDA tensor is staged through the CPU.
A composed operation has a negative handle; synchronize() waits for all its
parts, then raises the first error, so nothing stays in flight.
"""

import torch

from terse import basics
from terse import process_sets
from terse.torch import ops
from terse.torch.ops import _Entry, _table

_gp = process_sets.global_process_set


def _composed(parts, finish, keep=()):
    """Registers a composed op: finish(results of parts) is its result."""
    def run():
        return finish(ops.synchronize_all(parts))
    return _table.add_composed(_Entry(keep, run, parts=list(parts)))


def _base_name(op, name, ps_id=0):
    if name is not None and (not isinstance(name, str) or not name):
        raise ValueError(f"{op}: name must be a non-empty string")
    return _table.auto_name(op, ps_id) if name is None else name


class _EngineGroup:
    """The engine ops enqueued inside `with _EngineGroup(name):` form one
    group (Engine::GroupStart/GroupEnd): negotiated in one cycle, fused only
    among themselves, failing as one on every rank."""

    def __init__(self, name):
        self._name = name

    def __enter__(self):
        ops._native.group_start(self._name)
        return self

    def __exit__(self, *exc):
        ops._native.group_end()
        return False


def _check_tensors(op, tensors):
    if not isinstance(tensors, (list, tuple)) or not tensors:
        raise ValueError(f"{op}: tensors must be a non-empty list of tensors")
    for i, t in enumerate(tensors):
        ops._describe(t, f"{op} tensor {i}")


# --- grouped allreduce / allgather --------------------------------------------

def grouped_allreduce_async(tensors, average=None, name=None, op=None,
                            prescale_factor=1.0, postscale_factor=1.0,
                            process_set=_gp, compression=None):
    """Enqueues an allreduce of every tensor of `tensors` in one call (names
    '<name>.<i>'); synchronize() returns the list of results."""
    op = ops._resolve_op(op, average)
    basics.check_initialized("grouped_allreduce()")
    ps_id = process_sets.resolve(process_set, "grouped_allreduce()")
    _check_tensors("grouped_allreduce", tensors)
    base = _base_name("grouped_allreduce", name, ps_id)
    with _EngineGroup(base):
        parts = [ops.allreduce_async(t, name=f"{base}.{i}", op=op,
                                     prescale_factor=prescale_factor,
                                     postscale_factor=postscale_factor,
                                     process_set=process_set,
                                     compression=compression)
                 for i, t in enumerate(tensors)]
    return _composed(parts, lambda results: results)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None,
                             prescale_factor=1.0, postscale_factor=1.0,
                             process_set=_gp, compression=None):
    """In-place grouped_allreduce_async."""
    op = ops._resolve_op(op, average)
    basics.check_initialized("grouped_allreduce_()")
    ps_id = process_sets.resolve(process_set, "grouped_allreduce_()")
    _check_tensors("grouped_allreduce_", tensors)
    base = _base_name("grouped_allreduce", name, ps_id)
    with _EngineGroup(base):
        parts = [ops.allreduce_async_(t, name=f"{base}.{i}", op=op,
                                      prescale_factor=prescale_factor,
                                      postscale_factor=postscale_factor,
                                      process_set=process_set,
                                      compression=compression)
                 for i, t in enumerate(tensors)]
    return _composed(parts, lambda results: results)


def grouped_allreduce(tensors, average=None, name=None, compression=None,
                      op=None, prescale_factor=1.0, postscale_factor=1.0,
                      process_set=_gp):
    """The reductions of every tensor of `tensors` (a list). With tensors
    that require a gradient, each is reduced through the differentiable
    allreduce (one after another)."""
    op = ops._resolve_op(op, average)
    if any(ops._wants_grad(t) for t in tensors):
        ps_id = process_sets.resolve(process_set, "grouped_allreduce()")
        base = _base_name("grouped_allreduce", name, ps_id)
        return [ops.allreduce(t, name=f"{base}.{i}", op=op,
                              compression=compression,
                              prescale_factor=prescale_factor,
                              postscale_factor=postscale_factor,
                              process_set=process_set)
                for i, t in enumerate(tensors)]
    return ops.synchronize(grouped_allreduce_async(
        tensors, name=name, op=op, prescale_factor=prescale_factor,
        postscale_factor=postscale_factor, process_set=process_set,
        compression=compression))


def grouped_allreduce_(tensors, average=None, name=None, op=None,
                       prescale_factor=1.0, postscale_factor=1.0,
                       process_set=_gp, compression=None):
    """Reduces every tensor of `tensors` in place; returns them."""
    op = ops._resolve_op(op, average)
    return ops.synchronize(grouped_allreduce_async_(
        tensors, name=name, op=op, prescale_factor=prescale_factor,
        postscale_factor=postscale_factor, process_set=process_set,
        compression=compression))


def grouped_allgather_async(tensors, name=None, process_set=_gp):
    """Enqueues an allgather of every tensor of `tensors` in one call."""
    basics.check_initialized("grouped_allgather()")
    ps_id = process_sets.resolve(process_set, "grouped_allgather()")
    _check_tensors("grouped_allgather", tensors)
    base = _base_name("grouped_allgather", name, ps_id)
    with _EngineGroup(base):
        parts = [ops.allgather_async(t, name=f"{base}.{i}",
                                     process_set=process_set)
                 for i, t in enumerate(tensors)]
    return _composed(parts, lambda results: results)


def grouped_allgather(tensors, name=None, process_set=_gp):
    """The allgather of every tensor of `tensors` (a list)."""
    return ops.synchronize(grouped_allgather_async(tensors, name,
                                                   process_set))


# --- reducescatter -------------------------------------------------------------

def _rows_of(rank, size, rows):
    """(offset, count) of `rank`'s rows: Horovod's split of dimension 0."""
    base, extra = divmod(rows, size)
    count = base + (1 if rank < extra else 0)
    offset = rank * base + min(rank, extra)
    return offset, count


def _check_reducescatter(tensor, name, op):
    if op not in (ops.Sum, ops.Average):
        raise ops.TerseError(
            f"reducescatter of '{name}': op {ops._OP_NAMES.get(op, op)} is "
            "not supported; reducescatter takes Sum or Average")
    if tensor.dim() == 0:
        raise ops.TerseError(
            f"reducescatter of '{name}': a 0-dim tensor cannot be scattered; "
            "give it at least one dimension")


def _compressed(compression):
    """True when `compression` asks for a compressor other than none."""
    if compression is None:
        return False
    from terse.compression import Compression
    return Compression.get(compression).name != "none"


def _host(tensor):
    """`tensor` contiguous in host memory (native ops move host memory)."""
    source = tensor.contiguous()
    return source if source.device.type == "cpu" else source.cpu()


def _take(take, handle, device):
    """The native result of `handle` as a tensor on `device`, and the
    result's first_dims."""
    result = take(handle)
    output = torch.empty(result.shape, dtype=ops._TORCH_DTYPES[result.dtype])
    result.copy_to(output.data_ptr(), result.nbytes)
    if device.type != "cpu":
        output = output.to(device)
    return output, result.first_dims


def _native_reducescatter(tensor, name, op, prescale_factor, postscale_factor,
                          ps_id):
    """One engine reducescatter of `tensor`; its handle's result is this
    rank's rows. Integer Average and factors on integers are applied here
    around an engine Sum, with Horovod's double-precision scaling (as
    allreduce does)."""
    device = tensor.device
    source = _host(tensor)
    pre, post, after = float(prescale_factor), float(postscale_factor), 1.0
    engine_op = op
    if not source.dtype.is_floating_point and source.dtype != torch.bool:
        if op == ops.Average:
            engine_op = ops.Sum
            post /= process_sets.size_of(ps_id)
        if pre != 1.0:
            source = ops._scaled(source, pre)
        pre, post, after = 1.0, 1.0, post
    code, _, _ = ops._describe(source, ops._what("reducescatter", name))
    handle = ops._native.reducescatter_async(
        name, source.data_ptr(), source.numel(), code, -1, list(source.shape),
        engine_op, pre, post, ps_id)

    def finish():
        output, _ = _take(ops._native.take_reducescatter, handle, device)
        return ops._scaled(output, after) if after != 1.0 else output
    ops._table.add(handle, _Entry((source,), finish))
    return handle


def _reducescatter_part(tensor, name, op, prescale_factor, postscale_factor,
                        compression, process_set=_gp):
    """Enqueues one reducescatter; returns its handle. Native unless a
    compressor is asked for (then an allreduce through it, cut here)."""
    _check_reducescatter(tensor, name, op)
    ps_id = process_sets.resolve(process_set, "reducescatter()")
    if not _compressed(compression):
        return _native_reducescatter(tensor, name, op, prescale_factor,
                                     postscale_factor, ps_id)
    offset, count = _rows_of(process_sets.rank_in(ps_id),
                             process_sets.size_of(ps_id), tensor.shape[0])
    handle = ops.allreduce_async(tensor, name=name, op=op,
                                 prescale_factor=prescale_factor,
                                 postscale_factor=postscale_factor,
                                 process_set=process_set,
                                 compression=compression)
    return _composed([handle], lambda results: results[0].narrow(
        0, offset, count).clone())


def reducescatter_async(tensor, name=None, compression=None, op=None,
                        process_set=_gp, prescale_factor=1.0,
                        postscale_factor=1.0):
    """Enqueues a reduction of `tensor` whose result is scattered along dim
    0: this rank receives rows [offset, offset + count) of the reduction
    (n // size rows each, the first n % size ranks one more). op: Average
    (default) or Sum. Native: see the module docstring."""
    op = ops.Average if op is None else op
    name, _ = ops._prepare("reducescatter", name, tensor, process_set)
    return _reducescatter_part(tensor, name, op, prescale_factor,
                               postscale_factor, compression, process_set)


class _ReducescatterFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, compression, op, prescale_factor,
                postscale_factor, process_set):
        ctx.op = op
        ctx.process_set = process_set
        return ops.synchronize(reducescatter_async(
            tensor, name, compression, op, process_set, prescale_factor,
            postscale_factor))

    @staticmethod
    def backward(ctx, grad_output):
        ps = ctx.process_set
        grad = ops.allgather(grad_output, process_set=ps)
        if ctx.op == ops.Average:
            grad = grad / process_sets.size_of(
                process_sets.resolve(ps, "reducescatter()"))
        return grad, None, None, None, None, None, None


def reducescatter(tensor, name=None, compression=None, op=None,
                  process_set=_gp, prescale_factor=1.0, postscale_factor=1.0):
    """This rank's rows of the reduction of `tensor` (see
    reducescatter_async); differentiable when `tensor` requires a gradient
    (the gradient is the allgather of the output's, divided by size() for
    Average)."""
    op = ops.Average if op is None else op
    if ops._wants_grad(tensor):
        process_sets.resolve(process_set, "reducescatter()")
        return _ReducescatterFunction.apply(tensor, name, compression, op,
                                            prescale_factor, postscale_factor,
                                            process_set)
    return ops.synchronize(reducescatter_async(
        tensor, name, compression, op, process_set, prescale_factor,
        postscale_factor))


def grouped_reducescatter_async(tensors, name=None, compression=None,
                                op=None, process_set=_gp,
                                prescale_factor=1.0, postscale_factor=1.0):
    """Enqueues a reducescatter of every tensor of `tensors` in one call."""
    op = ops.Average if op is None else op
    basics.check_initialized("grouped_reducescatter()")
    ps_id = process_sets.resolve(process_set, "grouped_reducescatter()")
    _check_tensors("grouped_reducescatter", tensors)
    base = _base_name("grouped_reducescatter", name, ps_id)
    with _EngineGroup(base):
        parts = [_reducescatter_part(t, f"{base}.{i}", op, prescale_factor,
                                     postscale_factor, compression,
                                     process_set)
                 for i, t in enumerate(tensors)]
    return _composed(parts, lambda results: results)


def grouped_reducescatter(tensors, name=None, compression=None, op=None,
                          process_set=_gp, prescale_factor=1.0,
                          postscale_factor=1.0):
    """The reducescatter of every tensor of `tensors` (a list)."""
    return ops.synchronize(grouped_reducescatter_async(
        tensors, name, compression, op, process_set, prescale_factor,
        postscale_factor))


# --- alltoall --------------------------------------------------------------------

def _splits_list(splits, name):
    """`splits` as a list of ints for the engine ([] for None: equal parts).
    Only the type is checked here: counts that do not fit the tensor are
    refused in negotiation, so the alltoall fails on every rank (naming
    this one) instead of leaving the others waiting."""
    if splits is None:
        return []
    if isinstance(splits, torch.Tensor):
        if splits.is_floating_point() or splits.dim() > 1:
            raise ops.TerseError(
                f"alltoall of '{name}': splits must be a 1-d integer tensor "
                f"or list, got {splits.dtype} of shape {tuple(splits.shape)}")
        splits = splits.tolist()
    return [int(s) for s in splits]


def alltoall_async(tensor, splits=None, name=None, process_set=_gp):
    """Enqueues an alltoall: rank r sends rows [sum(splits[:k]),
    sum(splits[:k+1])) of `tensor` to rank k (splits=None: equal parts) and
    receives the rows every rank sent it, in rank order. synchronize()
    returns (output, received_splits) with received_splits an int32 tensor
    of the rows from each rank. Native: see the module docstring."""
    name, ps_id = ops._prepare("alltoall", name, tensor, process_set)
    if tensor.dim() == 0:
        raise ops.TerseError(
            f"alltoall of '{name}': a 0-dim tensor cannot be split; give it "
            "at least one dimension")
    mine = _splits_list(splits, name)
    device = tensor.device
    source = _host(tensor)
    code, _, _ = ops._describe(source, ops._what("alltoall", name))
    handle = ops._native.alltoall_async(
        name, source.data_ptr(), source.numel(), code, -1, list(source.shape),
        mine, ps_id)

    def finish():
        output, received = _take(ops._native.take_alltoall, handle, device)
        return output, torch.tensor(received, dtype=torch.int32)
    ops._table.add(handle, _Entry((source,), finish))
    return handle


class _AlltoallFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received = ops.synchronize(alltoall_async(
            tensor, splits, name, process_set))
        ctx.received = received
        ctx.process_set = process_set
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx, grad_output, unused_grad_splits):
        grad, _ = ops.synchronize(alltoall_async(
            grad_output.contiguous(), ctx.received,
            process_set=ctx.process_set))
        return grad, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=_gp):
    """Horovod's alltoall: the rows every rank sent this rank. Returns the
    output tensor, or (output, received_splits) when `splits` is given (as
    Horovod 0.28.1). Differentiable when `tensor` requires a gradient (the
    gradient is the alltoall of the output's gradient, split as received)."""
    if ops._wants_grad(tensor):
        process_sets.resolve(process_set, "alltoall()")
        output, received = _AlltoallFunction.apply(tensor, splits, name,
                                                   process_set)
    else:
        output, received = ops.synchronize(
            alltoall_async(tensor, splits, name, process_set))
    return output if splits is None else (output, received)


# --- sparse ---------------------------------------------------------------------

def sparse_allreduce_async(tensor, name, op, process_set=_gp):
    """Horovod's sparse allreduce: allgathers the indices (transposed, so
    rows concatenate) and values of a sparse COO tensor; the handle is a
    function, and synchronize(handle) builds the summed sparse tensor
    (values divided by size() for Average; duplicate indices stay
    uncoalesced, as in Horovod)."""
    ps_id = process_sets.resolve(process_set, "sparse_allreduce_async()")
    if not isinstance(tensor, torch.Tensor) or not tensor.is_sparse:
        raise TypeError("sparse_allreduce_async takes a sparse COO tensor")
    if op not in (ops.Sum, ops.Average):
        raise ValueError("sparse_allreduce_async: op must be Sum or Average")
    t = tensor.coalesce() if not tensor.is_coalesced() else tensor
    indices = ops.allgather_async(t._indices().t().contiguous(),
                                  name=f"{name}.indices",
                                  process_set=process_set)
    values = ops.allgather_async(t._values().contiguous(),
                                 name=f"{name}.values",
                                 process_set=process_set)

    def handle():
        vals, idx = ops.synchronize_all([values, indices])
        if op == ops.Average:
            vals = vals / process_sets.size_of(ps_id)
        return torch.sparse_coo_tensor(idx.t(), vals, t.size())
    return handle


__all__ = ["grouped_allreduce", "grouped_allreduce_",
           "grouped_allreduce_async", "grouped_allreduce_async_",
           "grouped_allgather", "grouped_allgather_async", "reducescatter",
           "reducescatter_async", "grouped_reducescatter",
           "grouped_reducescatter_async", "alltoall", "alltoall_async",
           "sparse_allreduce_async"]
