"""Gradients of terse.tensorflow allgather and broadcast under mpirun.

Issue 21: taken inside a tf.function, these gradients hung every rank
(grappler folded the non-root broadcast gradient into a constant and pruned
its allreduce there; collectives with constant inputs ran while the graph
was optimized). Each case runs eagerly, in a tf.function traced for the
exact shapes (constant shapes and constant upstream gradients: what grappler
folds) and in one traced for an unknown first dimension, and is checked
against a numpy reference. The test's mpirun has a time limit, so a hang
fails it.

Every rank r has a loss over the collective's output y; the gradient of
rank r's input is that of the sum of all ranks' losses (Horovod's
definition: the upstream gradients are summed over ranks).
"""

import numpy as np
import tensorflow as tf

import terse.tensorflow as terse
from mpi_testlib import expect, run

COLS = 3


def rows_of(rank):
    """Rank `rank`'s first dimension: different on every rank."""
    return rank + 1


def x_of(rank):
    rng = np.random.RandomState(100 + rank)
    return rng.randint(-5, 6, size=(rows_of(rank), COLS)).astype(np.float32)


def w_of(rank, rows):
    """Rank `rank`'s loss weights over a `rows`-row output."""
    rng = np.random.RandomState(200 + rank)
    return rng.randint(-5, 6, size=(rows, COLS)).astype(np.float32)


def loss(kind, y, w):
    # linear: the upstream gradient is the constant w (grappler folds the
    # collectives fed by it); square: it depends on y at run time.
    if kind == "linear":
        return tf.reduce_sum(w * y)
    return tf.reduce_sum(w * y * y)


def upstream(kind, y, w):
    """d loss / d y, in numpy."""
    return w if kind == "linear" else 2.0 * w * y


def ways_to_run(fn, x):
    """(how, fn) for eager, exact-shape tf.function, unknown-rows one."""
    exact = tf.function(fn)
    unknown = tf.function(
        fn, input_signature=[tf.TensorSpec([None, COLS], tf.float32)])
    return [("eager", fn), ("tf.function", exact),
            ("tf.function [None, 3]", unknown)]


def check(how, kind, got, want):
    expect(got.shape == want.shape,
           f"{how} {kind}: gradient shape {got.shape}, want {want.shape}")
    expect(np.allclose(got, want),
           f"{how} {kind}: gradient {got.tolist()} != {want.tolist()}")


def test_allgather_gradient(_):
    size, rank = terse.size(), terse.rank()
    xs = [x_of(r) for r in range(size)]
    y = np.concatenate(xs)                          # every rank's output
    begin = sum(rows_of(r) for r in range(rank))
    mine = slice(begin, begin + rows_of(rank))
    for kind in ("linear", "square"):
        w = w_of(rank, len(y))

        def grad(x, kind=kind, w=w):
            with tf.GradientTape() as tape:
                tape.watch(x)
                out = terse.allgather(x, name=f"test.allgather.{kind}")
                value = loss(kind, out, w)
            return tape.gradient(value, x)

        # Summed over ranks, then this rank's rows of the output.
        want = sum(upstream(kind, y, w_of(r, len(y)))
                   for r in range(size))[mine]
        for how, fn in ways_to_run(grad, xs[rank]):
            for _ in range(2):                      # traced, then cached
                check(how, kind, fn(tf.constant(xs[rank])).numpy(), want)


def test_broadcast_gradient(_):
    size, rank = terse.size(), terse.rank()
    x = x_of(0)[:1].repeat(2, axis=0) + rank        # same shape everywhere
    for root in sorted({0, size - 1}):
        y = x_of(0)[:1].repeat(2, axis=0) + root    # the root's x
        for kind in ("linear", "square"):
            w = w_of(rank, len(y))

            def grad(x, kind=kind, w=w, root=root):
                with tf.GradientTape() as tape:
                    tape.watch(x)
                    out = terse.broadcast(x, root,
                                          name=f"test.broadcast.{kind}.{root}")
                    value = loss(kind, out, w)
                return tape.gradient(value, x)

            # Only the root's input reaches any output: the summed upstream
            # gradient there, zero elsewhere.
            summed = sum(upstream(kind, y, w_of(r, len(y)))
                         for r in range(size))
            want = summed if rank == root else np.zeros_like(summed)
            for how, fn in ways_to_run(grad, x):
                for _ in range(2):
                    check(f"{how} root {root}", kind,
                          fn(tf.constant(x)).numpy(), want)


def setup():
    terse.init()
    return terse


if __name__ == "__main__":
    run(globals(), setup=setup, teardown=lambda _: terse.shutdown())
