"""Cross-rank mismatches raise tf.errors.FailedPreconditionError on every
rank, as Horovod's ops do (issue 21), eagerly and inside tf.function, for
every collective: a shape, a dtype or a root rank that differs across
ranks, and an op (Sum on some ranks, Max on others). Rank 1 differs; every
other rank is in the same state, and every rank must raise, naming the
tensor. After each error the engine carries on (the next op's result is
checked against its closed form). The composed alltoall checks every rank's
splits before moving data, so bad splits on one rank raise
InvalidArgumentError on all of them instead of hanging the others.
mpirun's time limit turns a hang into a failure.
"""

import numpy as np
import tensorflow as tf

import terse.tensorflow as terse
from mpi_testlib import expect, expect_raises, run

FPE = tf.errors.FailedPreconditionError


def odd_one(rank, usual, other):
    return other if rank == 1 else usual


def modes(fn):
    """(how, callable) eagerly and in a tf.function (traced per call)."""
    return [("eager", fn), ("tf.function", tf.function(fn, autograph=False))]


def still_working(tag):
    size = terse.size()
    out = terse.allreduce(tf.ones([3]), op=terse.Sum, name=f"after.{tag}")
    expect(np.all(out.numpy() == size), f"after {tag}: {out.numpy()}")


def check(tag, fragments, fn, *args):
    for how, f in modes(fn):
        expect_raises(FPE, [f"'{tag}.{how}"] + fragments, f, how, *args)
        still_working(f"{tag}.{how}")


def test_allreduce_shape(_):
    rank = terse.rank()
    x = tf.ones([odd_one(rank, 4, 5)])
    check("ar.shape", ["shape", "[5] on rank 1"],
          lambda how, x: terse.allreduce(x, name=f"ar.shape.{how}"), x)


def test_allreduce_dtype(_):
    rank = terse.rank()
    x = tf.ones([4], odd_one(rank, tf.float32, tf.float64))
    check("ar.dtype", ["dtype", "f64 on rank 1"],
          lambda how, x: terse.allreduce(x, name=f"ar.dtype.{how}"), x)


def test_allreduce_op(_):
    rank = terse.rank()
    op = odd_one(rank, terse.Sum, terse.Max)
    check("ar.op", ["reduce op"],
          lambda how, x: terse.allreduce(x, op=op, name=f"ar.op.{how}"),
          tf.ones([2]))


def test_allgather_trailing_shape(_):
    rank = terse.rank()
    x = tf.ones([2, odd_one(rank, 3, 4)])
    check("ag.shape", ["dimensions after the first"],
          lambda how, x: terse.allgather(x, name=f"ag.shape.{how}"), x)


def test_allgather_dtype(_):
    rank = terse.rank()
    x = tf.ones([2], odd_one(rank, tf.int32, tf.int64))
    check("ag.dtype", ["dtype"],
          lambda how, x: terse.allgather(x, name=f"ag.dtype.{how}"), x)


def test_broadcast_shape(_):
    rank = terse.rank()
    x = tf.ones([odd_one(rank, 2, 3)])
    check("bc.shape", ["shape"],
          lambda how, x: terse.broadcast(x, 0, name=f"bc.shape.{how}"), x)


def test_broadcast_dtype(_):
    rank = terse.rank()
    x = tf.ones([2], odd_one(rank, tf.float32, tf.float16))
    check("bc.dtype", ["dtype"],
          lambda how, x: terse.broadcast(x, 0, name=f"bc.dtype.{how}"), x)


def test_broadcast_root_rank(_):
    rank = terse.rank()
    root = odd_one(rank, 0, 1)
    check("bc.root", ["root rank", "1 on rank 1"],
          lambda how, x: terse.broadcast(x, root, name=f"bc.root.{how}"),
          tf.ones([2]))


def test_composed_ops_mismatch(_):
    rank = terse.rank()
    x = tf.ones([4, odd_one(rank, 2, 3)])
    check("rs.shape", ["shape"],
          lambda how, x: terse.reducescatter(x, name=f"rs.shape.{how}"), x)
    check("grouped.dtype", ["dtype"],
          lambda how, x: terse.grouped_allreduce(
              [x, tf.cast(x, odd_one(rank, tf.float32, tf.float64))],
              name=f"grouped.dtype.{how}")[1], tf.ones([2]))
    # The group fails as one: its first member, alike everywhere, fails too,
    # with the mismatch of the second.
    check("grouped.one", ["its group", "'grouped.one", "dtype",
                          "f64 on rank 1"],
          lambda how, x: terse.grouped_allreduce(
              [x, tf.cast(x, odd_one(rank, tf.float32, tf.float64))],
              name=f"grouped.one.{how}")[0], tf.ones([2]))
    check("grouped.ag", ["its group", "dimensions after the first"],
          lambda how, x: terse.grouped_allgather(
              [x, tf.ones([2, odd_one(rank, 3, 4)])],
              name=f"grouped.ag.{how}")[0], tf.ones([2, 2]))
    check("grouped.rs", ["its group", "shape"],
          lambda how, x: terse.grouped_reducescatter(
              [x, tf.ones([odd_one(rank, 4, 6)])], op=terse.Sum,
              name=f"grouped.rs.{how}")[0], tf.ones([4]))


def test_alltoall_bad_splits_fail_everywhere(_):
    size, rank = terse.size(), terse.rank()
    splits = [1] * size
    if rank == 1:
        splits[0] = 2                           # sums to size + 1 rows
    for how, f in modes(lambda x, s: terse.alltoall(x, splits=s,
                                                    name="a2a.bad")):
        expect_raises(tf.errors.InvalidArgumentError,
                      ["terse alltoall a2a.bad", "splits"], f,
                      tf.ones([size, 2]), tf.constant(splits))
        still_working(f"a2a.{how}")
    uneven = tf.ones([size + 1, 2])             # not divisible without splits
    expect_raises(tf.errors.InvalidArgumentError, ["must divide"],
                  terse.alltoall, uneven, name="a2a.uneven")
    still_working("a2a.uneven")


def setup():
    terse.init()
    return terse


if __name__ == "__main__":
    run(globals(), setup=setup, teardown=lambda _: terse.shutdown())
