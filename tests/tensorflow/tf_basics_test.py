"""Horovod's introspection functions and the Product and Adasum
reductions through terse.tensorflow and terse.keras, under mpirun.

The functions are framework-neutral terse.basics ones (terse.tensorflow
re-exports them by name); Product and Adasum are the engine's ReduceOps 4
and 5. References: the mpirun layout (every rank on this host), numpy's
product, the Adasum paper's pairwise operator in float64 applied in
recursive-doubling order, a timeline file that names the op run while it
was recording.
"""

import os
import tempfile

import numpy as np
import tensorflow as tf

import terse.keras
import terse.tensorflow as terse
from mpi_testlib import expect, run

BOOLEANS = ("is_homogeneous", "mpi_threads_supported", "mpi_enabled",
            "mpi_built", "gloo_enabled", "gloo_built", "cuda_built",
            "rocm_built", "ddl_built", "ccl_built")


def test_introspection_is_reexported(_):
    for name in terse.BASICS_FORWARDED:
        fn = getattr(terse, name)
        expect(fn is getattr(terse.keras, name), f"terse.keras.{name}")
        expect(callable(fn), f"terse.tensorflow.{name} is callable")
    for name in BOOLEANS:
        value = getattr(terse, name)()
        expect(isinstance(value, bool), f"{name}() -> {value!r}")
    # Horovod's nccl_built(): NCCL's version code, or 0 without NCCL.
    nccl = terse.nccl_built()
    expect(isinstance(nccl, int) and not isinstance(nccl, bool)
           and (nccl == 0 or nccl >= 1000), f"nccl_built() -> {nccl!r}")
    expect(terse.mpi_built(), "this build runs under mpirun: mpi_built()")
    expect(terse.is_homogeneous(), "one host: homogeneous")
    # mpirun starts every rank on this host: one node.
    expect(terse.cross_size() == 1, f"cross_size {terse.cross_size()}")
    expect(terse.cross_rank() == 0, f"cross_rank {terse.cross_rank()}")


def test_timeline(_):
    # "{rank}": every rank writes its own (else rank 0 only).
    path = os.path.join(tempfile.mkdtemp(), "timeline.{rank}.json")
    terse.start_timeline(path)
    terse.allreduce(tf.ones([4]), op=terse.Sum, name="timeline.op")
    terse.stop_timeline()
    written = [p for p in os.listdir(os.path.dirname(path))]
    expect(written, "start_timeline wrote nothing")
    text = "".join(open(os.path.join(os.path.dirname(path), p)).read()
                   for p in written)
    expect("timeline.op" in text, "the timeline names the op")


def test_product(_):
    size, rank = terse.size(), terse.rank()

    def values(r):
        return np.array([r + 1, -1, 2, 0.5], np.float64)

    want = np.prod([values(r) for r in range(size)], axis=0)
    for how, fn in (("eager", terse.allreduce),
                    ("tf.function", tf.function(terse.allreduce))):
        out = fn(tf.constant(values(rank)), op=terse.Product,
                 name=f"product.{how}")
        expect(np.allclose(out.numpy(), want), f"{how} Product {out.numpy()}")
    ints = terse.allreduce(tf.constant([rank + 2, -1], tf.int32),
                           op=terse.Product, name="product.int")
    want = np.prod([[r + 2, -1] for r in range(size)], axis=0)
    expect(np.array_equal(ints.numpy(), want), f"int Product {ints.numpy()}")


def adasum_pair(a, b):
    """The Adasum paper's operator, in float64."""
    dot = float(np.dot(a, b))
    return ((1 - dot / (2 * np.dot(a, a))) * a
            + (1 - dot / (2 * np.dot(b, b))) * b)


def test_adasum(_):
    size, rank = terse.size(), terse.rank()

    def values(r):
        return np.random.RandomState(7 + r).uniform(-1, 1, 6)

    # Recursive doubling: ranks (0,1), (2,3), ..., then pairs of pairs.
    level = [values(r) for r in range(size)]
    while len(level) > 1:
        level = [adasum_pair(level[i], level[i + 1])
                 for i in range(0, len(level), 2)]
    for dtype in (np.float64, np.float32):
        for how, fn in (("eager", terse.allreduce),
                        ("tf.function", tf.function(terse.allreduce))):
            out = fn(tf.constant(values(rank).astype(dtype)),
                     op=terse.Adasum, name=f"adasum.{how}.{dtype.__name__}")
            tol = 1e-12 if dtype == np.float64 else 1e-5
            expect(np.allclose(out.numpy(), level[0], rtol=tol, atol=tol),
                   f"{how} {dtype.__name__} Adasum {out.numpy()} != "
                   f"{level[0]}")


def setup():
    terse.init()
    return terse


if __name__ == "__main__":
    run(globals(), setup=setup, teardown=lambda _: terse.shutdown())
