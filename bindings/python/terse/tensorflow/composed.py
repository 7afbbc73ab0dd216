"""reducescatter, grouped_reducescatter and alltoall, composed from the
engine's allreduce and allgather.

terse's engine has no native reduce-scatter or all-to-all yet. These give
Horovod 0.28.1's results exactly, at a higher wire cost: reducescatter is an
allreduce of the whole tensor of which each rank keeps its rows (size times
the bytes a native reduce-scatter receives); alltoall allgathers every
rank's splits and rows and keeps the rows sent to this rank (every rank
receives every rank's tensor). Their gradients follow from those of
allreduce and allgather and equal Horovod's (reducescatter: the gathered
upstream gradient, divided by size for Average; alltoall: the upstream
gradient sent back along the received splits).
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
    name = name or ops._names.default("reducescatter", tensor)
    reduced = ops.allreduce(tensor, op=op, name=name, compression=compression,
                            prescale_factor=prescale_factor,
                            postscale_factor=postscale_factor,
                            process_set=process_set)
    rows = tf.shape(tensor, out_type=tf.int64)[0]
    begins, counts = _rows_of_rank(rows, ops._set_size(ps_id))
    me = tf.cast(ops._rank_tensor(ps_id), tf.int64)
    begin = tf.gather(begins, me)
    return reduced[begin:begin + tf.gather(counts, me)]


def grouped_reducescatter(tensors, device_dense="", compression=None,
                          op=ops.Average, process_set=None,
                          prescale_factor=1.0, postscale_factor=1.0,
                          name=None):
    """reducescatter of every tensor of `tensors`; returns the list."""
    tensors = list(tensors)
    base = name or ops._names.default("grouped_reducescatter", None)
    return [reducescatter(t, compression=compression, op=op,
                          name=f"{base}.{i}", process_set=process_set,
                          prescale_factor=prescale_factor,
                          postscale_factor=postscale_factor)
            for i, t in enumerate(tensors)]


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
        data = ops.allgather(tensor, name=f"{name}.data",
                             process_set=process_set)
    me = tf.cast(ops._rank_tensor(ps_id), tf.int64)
    received = tf.gather(all_splits, me, axis=1)         # from each rank
    block = tf.cumsum(all_rows, exclusive=True)          # rank s's first row
    within = tf.gather(tf.cumsum(all_splits, axis=1, exclusive=True), me,
                       axis=1)
    begins = block + within
    indices = tf.ragged.range(begins, begins + received).flat_values
    return tf.gather(data, indices), tf.cast(received, tf.int32)
