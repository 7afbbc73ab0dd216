"""Misuse of terse.tensorflow raises an error that names the problem, and
never hangs (mpirun's time limit would fail the test).

Before init(): the ops raise tf.errors.FailedPreconditionError naming
init(), eagerly and inside tf.function; rank() raises TerseError. After:
shapes or dtypes that differ across ranks raise FailedPreconditionError
naming the tensor and the ranks, as Horovod (and the next op works); a root
rank outside [0, size) raises InvalidArgumentError; wrong Python arguments
raise before anything is enqueued. tf_errors_test covers every op.
"""

import numpy as np
import tensorflow as tf

import terse.tensorflow as terse
from mpi_testlib import expect, expect_raises, run


def test_a_before_init(_):
    expect(not terse.is_initialized(), "not initialised yet")
    expect_raises(terse.TerseError, ["call init() first"], terse.rank)
    expect_raises(tf.errors.FailedPreconditionError,
                  ["terse is not initialised; call init() first"],
                  terse.allreduce, tf.ones([3]), name="early")

    @tf.function
    def early_in_graph(x):
        return terse.allgather(x, name="early.graph")

    expect_raises(tf.errors.FailedPreconditionError,
                  ["terse is not initialised; call init() first"],
                  early_in_graph, tf.ones([2, 2]))
    expect_raises(terse.TerseError, ["init()"], terse.broadcast_variables,
                  [tf.Variable(1.0)])
    terse.init()


def test_mismatched_shapes(_):
    rank, size = terse.rank(), terse.size()
    n = 5 if rank == 1 else 4
    expect_raises(tf.errors.FailedPreconditionError,
                  ["tensor 'w'", "shape [4] on", "but [5] on rank 1"],
                  terse.allreduce, tf.ones([n]), name="w")

    @tf.function
    def in_graph(x):
        return terse.allreduce(x, name="w.graph", op=terse.Sum)

    expect_raises(tf.errors.FailedPreconditionError,
                  ["tensor 'w.graph'", "but [5] on rank 1"],
                  in_graph, tf.ones([n]))
    # Not fatal: the engine carries on.
    out = terse.allreduce(tf.ones([3]), name="w", op=terse.Sum)
    expect(np.all(out.numpy() == size), f"after the error: {out.numpy()}")
    expect_raises(tf.errors.FailedPreconditionError,
                  ["tensor 'gather'"], terse.allgather,
                  tf.ones([2, 3 if rank == 1 else 2]), name="gather")


def test_mismatched_dtypes(_):
    rank = terse.rank()
    x = tf.ones([2], tf.float64 if rank == 1 else tf.float32)
    expect_raises(tf.errors.FailedPreconditionError,
                  ["tensor 'dt'", "dtype f32 on", "but f64 on rank 1"],
                  terse.allreduce, x, name="dt")


def test_bad_arguments_the_engine_rejects(_):
    size = terse.size()
    expect_raises(tf.errors.InvalidArgumentError,
                  ["tensor 'root'", f"root rank {size} outside [0, {size})"],
                  terse.broadcast, tf.ones([2]), size, name="root")


def test_bad_arguments_python_rejects(_):
    expect_raises(TypeError, ["does not support dtype complex64",
                              "supported: float16"],
                  terse.allreduce, tf.ones([2], tf.complex64))
    expect_raises(TypeError, ["does not support dtype string"],
                  terse.broadcast, tf.constant(["a"]), 0)
    expect_raises(ValueError, ["rank >= 1", "scalar"], terse.allgather,
                  tf.constant(1.0))
    expect_raises(ValueError, ["op must be"], terse.allreduce, tf.ones([1]),
                  op=7)
    expect_raises(ValueError, ["root_rank"], terse.broadcast, tf.ones([1]),
                  -1)
    expect_raises(ValueError, ["Sum, Average"],
                  terse.DistributedGradientTape, tf.GradientTape(),
                  op=terse.Max)
    expect_raises(TypeError, ["allreduce does not support dtype bool"],
                  terse.allreduce, tf.constant([True]))
    expect_raises(TypeError, ["process_set must be a ProcessSet"],
                  terse.allreduce, tf.ones([1]), process_set="evens")
    terse.allreduce(tf.ones([1]), process_set=terse.global_process_set,
                    name="global.set")
    with tf.GradientTape() as tape:
        x = tf.Variable([1.0])
        y = terse.allreduce(x * 2.0, op=terse.Max, name="max.grad")
    expect_raises(LookupError, ["no gradient", "Max"], tape.gradient, y, x)


def test_z_still_working(_):
    out = terse.allreduce(tf.fill([2], 2.0), name="last", op=terse.Average)
    expect(np.all(out.numpy() == 2.0), f"last op: {out.numpy()}")


def setup():
    return terse


if __name__ == "__main__":
    run(globals(), setup=setup, teardown=lambda _: terse.shutdown())
