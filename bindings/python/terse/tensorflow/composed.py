"""reducescatter, grouped_reducescatter and alltoall on the engine's native
ops (TerseReducescatter, TerseAlltoall), with Horovod 0.28.1's results.

What moves (n ranks, B bytes of input per rank):

  * reducescatter: one engine reduce-scatter, about B(n-1)/n per rank.
    Compression fp16/bf16 casts around it, as Horovod's does; any other
    terse compressor (topk, powersgd, ...) runs inside the engine's
    allreduce, so such a reducescatter stays composed: an allreduce of the
    whole tensor through the compressor, of which each rank keeps its rows.
  * alltoall: first an allgather of every rank's splits and row count (n + 1
    int64 per rank), which every rank checks before any data moves (bad
    splits on one rank raise InvalidArgumentError on all of them instead of
    hanging the others); then one engine alltoall, about B out and B in per
    rank.

Gradients equal Horovod's: reducescatter's is the allgather of the upstream
gradient (times the scale factors, divided by size for Average); alltoall's
is the upstream gradient sent back along the received splits.
"""

import tensorflow as tf

from terse.tensorflow import ops


def _rows_of_rank(rows, size):
    """Horovod's split of `rows` over `size` ranks: (begin, count) tensors
    for every rank; the first rows % size ranks get one row more."""
    base = rows // size
    extra = rows % size
    ranks = tf.range(size, dtype=rows.dtype)
    counts = base + tf.cast(ranks < extra, rows.dtype)
    begins = tf.cumsum(counts, exclusive=True)
    return begins, counts


def _reducescatter_raw(tensor, op, name, prescale, postscale, ps_id):
    dtype = tensor.dtype
    out = ops._ops().terse_reducescatter(
        ops._opaque(ops._to_engine(tensor)), tensor_name=name, reduce_op=op,
        prescale_factor=prescale, postscale_factor=postscale,
        process_set=ps_id)
    return ops._from_engine(out, dtype)


def _reducescatter_native(tensor, op, name, prescale, postscale, ps_id):
    """Floating point: the engine scales. Integers: Horovod's scaling here
    (Average is the sum times postscale / size), as allreduce does."""
    prescale, postscale = float(prescale), float(postscale)
    if tensor.dtype in ops.FLOAT_DTYPES or (op != ops.Average and
                                            prescale == 1.0 and
                                            postscale == 1.0):
        return _reducescatter_raw(tensor, op, name, prescale, postscale,
                                  ps_id)
    if op == ops.Average:
        op = ops.Sum
        postscale /= ops._set_size(ps_id)
    if prescale != 1.0:
        tensor = ops._scale_int(tensor, prescale)
    out = _reducescatter_raw(tensor, op, name, 1.0, 1.0, ps_id)
    if postscale != 1.0:
        out = ops._scale_int(out, postscale)
    return out


def _reducescatter_composed(tensor, op, name, compression, prescale,
                            postscale, process_set, ps_id):
    """An allreduce through the engine's compressor, this rank's rows."""
    reduced = ops.allreduce(tensor, op=op, name=name, compression=compression,
                            prescale_factor=prescale,
                            postscale_factor=postscale,
                            process_set=process_set)
    rows = tf.shape(tensor, out_type=tf.int64)[0]
    begins, counts = _rows_of_rank(rows, ops._set_size(ps_id))
    me = tf.cast(ops._rank_tensor(ps_id), tf.int64)
    begin = tf.gather(begins, me)
    return reduced[begin:begin + tf.gather(counts, me)]


def reducescatter(tensor, device_dense="", compression=None, op=ops.Average,
                  name=None, process_set=None, ignore_name_scope=False,
                  prescale_factor=1.0, postscale_factor=1.0):
    """This rank's block of rows of the reduction of `tensor` over ranks.

    Rows are split along dimension 0 as Horovod does: size blocks, the first
    (rows % size) of them one row longer. op: Sum or Average (Horovod
    refuses the others). Every rank must pass the same shape and dtype.
    """
    ps_id = ops.check_process_set(process_set, "reducescatter()")
    if op not in (ops.Sum, ops.Average):
        raise NotImplementedError(
            "reducescatter supports Sum and Average only, not "
            f"{ops._OP_NAMES.get(op, op)}")
    tensor = tf.convert_to_tensor(tensor)
    if tensor.shape.rank == 0:
        raise ValueError("terse reducescatter needs a tensor of rank >= 1, "
                         "got a scalar")
    ops._check_dtype(tensor, "reducescatter")
    wire, spec = ops._compression_plan(compression)
    if spec:
        return _reducescatter_composed(
            tensor, op, name or ops._names.default("reducescatter", tensor),
            compression, prescale_factor, postscale_factor, process_set,
            ps_id)
    name = ops._op_name("reducescatter", tensor, name)
    if wire is not None and tensor.dtype in ops.FLOAT_DTYPES:
        dtype = tensor.dtype
        out = _reducescatter_native(tf.cast(tensor, wire), op, name,
                                    prescale_factor, postscale_factor, ps_id)
        return tf.cast(out, dtype)
    return _reducescatter_native(tensor, op, name, prescale_factor,
                                 postscale_factor, ps_id)


def grouped_reducescatter(tensors, device_dense="", compression=None,
                          op=ops.Average, process_set=None,
                          prescale_factor=1.0, postscale_factor=1.0,
                          name=None):
    """reducescatter of every tensor of `tensors`; returns the list. Without
    an engine compressor: one TerseGroupedReducescatter op, one engine group
    (negotiated in one cycle, failing as one on every rank), with
    reducescatter()'s casts and integer scaling for each tensor. With one:
    each tensor's composed reducescatter."""
    tensors = list(tensors)
    base = name or ops._names.default("grouped_reducescatter", None)
    wire, spec = ops._compression_plan(compression)
    if spec or not tensors:
        return [reducescatter(t, compression=compression, op=op,
                              name=f"{base}.{i}", process_set=process_set,
                              prescale_factor=prescale_factor,
                              postscale_factor=postscale_factor)
                for i, t in enumerate(tensors)]
    ps_id = ops.check_process_set(process_set, "grouped_reducescatter()")
    if op not in (ops.Sum, ops.Average):
        raise NotImplementedError(
            "reducescatter supports Sum and Average only, not "
            f"{ops._OP_NAMES.get(op, op)}")
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    for t in tensors:
        if t.shape.rank == 0:
            raise ValueError("terse reducescatter needs a tensor of rank >= "
                             "1, got a scalar")
        ops._check_dtype(t, "reducescatter")
    group = ops._names.unique_in_graph(base)
    plans = [ops._AllreducePlan(t, op, prescale_factor, postscale_factor,
                                wire, ps_id) for t in tensors]
    out = ops._ops().terse_grouped_reducescatter(
        [ops._opaque(p.wire) for p in plans], group_name=group,
        tensor_names=[f"{group}.{i}" for i in range(len(plans))],
        reduce_ops=[p.op for p in plans],
        prescale_factors=[p.prescale for p in plans],
        postscale_factors=[p.postscale for p in plans], process_set=ps_id)
    return [p.finish(o) for p, o in zip(plans, out)]


def alltoall(tensor, splits=None, name=None, ignore_name_scope=False,
             process_set=None):
    """Sends splits[r] consecutive rows of `tensor` to rank r, for every r.

    splits: a vector of size() non-negative integers summing to the first
    dimension; None: equal blocks (the first dimension must then divide by
    size()). Returns (received, received_splits): the rows every rank sent
    here, in rank order, and how many came from each rank (int32).
    Before any data moves, every rank checks every rank's splits: a bad one
    raises InvalidArgumentError on every rank, naming the rank.
    """
    ps_id = ops.check_process_set(process_set, "alltoall()")
    tensor = tf.convert_to_tensor(tensor)
    ops._check_dtype(tensor, "alltoall", ops.MOVED_DTYPES)
    if tensor.shape.rank == 0:
        raise ValueError("terse alltoall needs a tensor of rank >= 1, got a "
                         "scalar")
    size = ops._set_size(ps_id)
    name = name or ops._names.default("alltoall", tensor)
    rows = tf.shape(tensor, out_type=tf.int64)[:1]
    if splits is None:
        even = rows // size
        splits = tf.fill([size], even[0])  # Sums short of rows if uneven.
    else:
        splits = tf.cast(tf.convert_to_tensor(splits), tf.int64)
        if splits.shape.rank != 1 or (splits.shape[0] is not None
                                      and splits.shape[0] != size):
            raise ValueError(f"alltoall '{name}': splits must be a vector of "
                             f"{size} entries (one per rank), got shape "
                             f"{splits.shape}")
    meta = ops.allgather(tf.reshape(tf.concat([splits, rows], 0),
                                    [1, size + 1]), name=f"{name}.splits",
                         process_set=process_set)
    all_splits, all_rows = meta[:, :size], meta[:, size]
    valid = tf.logical_and(
        tf.reduce_all(all_splits >= 0),
        tf.reduce_all(tf.reduce_sum(all_splits, axis=1) == all_rows))
    check = tf.debugging.Assert(valid, [
        f"terse alltoall {name}: the splits of every rank must be {size} "
        "non-negative counts summing to its first dimension (without "
        "splits, the first dimension must divide by the number of ranks); "
        "splits then first dimension, by rank:", meta], summarize=1000)
    with tf.control_dependencies([check]):
        checked = tf.identity(splits)
    dtype = tensor.dtype
    received, received_splits = ops._ops().terse_alltoall(
        ops._opaque(ops._to_engine(tensor)), ops._opaque(checked),
        tensor_name=ops._op_name("alltoall", tensor, f"{name}.data"),
        process_set=ps_id)
    return ops._from_engine(received, dtype), received_splits


@tf.RegisterGradient("TerseReducescatter")
def _reducescatter_grad(op, grad):
    """Every rank's input reaches every rank's block: the upstream
    gradients of all ranks, gathered in rank order, times the factors
    (divided by size for Average)."""
    name = op.get_attr("tensor_name").decode()
    ps_id = op.get_attr("process_set")
    grad = ops.allgather(ops._dense(grad), name=f"{name}.grad",
                         process_set=ops._by_id(ps_id))
    scale = op.get_attr("prescale_factor") * op.get_attr("postscale_factor")
    if op.get_attr("reduce_op") == ops.Average:
        scale /= ops._set_size(ps_id)
    if scale != 1.0:
        grad = grad * tf.cast(scale, grad.dtype)
    return grad


@tf.RegisterGradient("TerseGroupedReducescatter")
def _grouped_reducescatter_grad(op, *grads):
    """Each member's gradient, as a single reducescatter's."""
    return [_reducescatter_grad(ops._Member(op, i),
                                ops._grad_or_zeros(op, i, g))
            for i, g in enumerate(grads)]


@tf.RegisterGradient("TerseAlltoall")
def _alltoall_grad(op, grad, unused_splits_grad):
    """The upstream gradient sent back along the received splits."""
    name = op.get_attr("tensor_name").decode()
    back, _ = ops._ops().terse_alltoall(
        ops._opaque(ops._dense(grad)),
        ops._opaque(tf.cast(op.outputs[1], tf.int64)),
        tensor_name=ops._names.unique_in_graph(f"{name}.grad"),
        process_set=op.get_attr("process_set"))
    return back, None
