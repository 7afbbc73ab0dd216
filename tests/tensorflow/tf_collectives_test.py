"""terse.tensorflow collectives under mpirun, against numpy references.

Every rank builds every rank's input from a seed (small integers, exact in
every dtype, so sums and halvings are exact too) and checks allreduce (Sum,
Average, Min, Max), allgather (first dimension differing across ranks) and
broadcast for each supported dtype, eagerly and inside tf.function; then
scalars and empty tensors, scale factors, many ops in flight at once, a
constant input in a graph, IndexedSlices, broadcast_variables and the
gradients of the three ops.
"""

import numpy as np
import tensorflow as tf

import terse.tensorflow as terse
from mpi_testlib import expect, run

DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.int8,
          tf.int16, tf.uint16, tf.int32, tf.int64, tf.uint8)
UNSIGNED = (tf.uint8, tf.uint16)
FLOATS = (tf.float16, tf.bfloat16, tf.float32, tf.float64)
OPS = {"sum": terse.Sum, "average": terse.Average, "min": terse.Min,
       "max": terse.Max}


def values(rank, shape, dtype, salt=0):
    """Rank `rank`'s input: small integers (non-negative for unsigned)."""
    rng = np.random.RandomState(1000 * rank + salt)
    low = 0 if dtype in UNSIGNED else -30
    return rng.randint(low, 31, size=shape).astype(np.float64)


def tensor(array, dtype):
    return tf.cast(tf.constant(array, tf.float64), dtype)


def as_f64(t):
    return tf.cast(t, tf.float64).numpy()


def reference(kind, arrays, dtype=tf.float32):
    stacked = np.stack(arrays)
    if kind == "sum":
        return stacked.sum(axis=0)
    if kind == "average":
        if dtype in FLOATS:
            return stacked.sum(axis=0) / len(arrays)
        # Horovod's integer average: sum * (1 / size) in float64, truncated.
        return np.trunc(stacked.sum(axis=0) * (1.0 / len(arrays)))
    if kind == "min":
        return stacked.min(axis=0)
    return stacked.max(axis=0)


def ops_for(dtype):
    return list(OPS)


def expect_equal(got, want, what):
    expect(got.shape == want.shape,
           f"{what}: shape {got.shape}, want {want.shape}")
    expect(np.array_equal(got, want),
           f"{what}: max diff {np.max(np.abs(got - want))}")


def check_allreduce(results, size, salt):
    for (dtype, kind), got in results.items():
        want = reference(kind, [values(r, (3, 5), dtype, salt)
                                for r in range(size)], dtype)
        expect_equal(as_f64(got), want, f"allreduce {kind} {dtype.name}")


def test_allreduce_every_dtype_eager(_):
    size, rank = terse.size(), terse.rank()
    results = {}
    for dtype in DTYPES:
        for kind in ops_for(dtype):
            x = tensor(values(rank, (3, 5), dtype, 1), dtype)
            out = terse.allreduce(x, op=OPS[kind], name=f"e.{dtype.name}.{kind}")
            expect(out.dtype == dtype, f"{dtype.name} came back {out.dtype}")
            results[(dtype, kind)] = out
    check_allreduce(results, size, 1)


def test_allreduce_every_dtype_in_function(_):
    size, rank = terse.size(), terse.rank()
    keys = [(d, k) for d in DTYPES for k in ops_for(d)]
    inputs = [tensor(values(rank, (3, 5), d, 2), d) for d, _ in keys]

    @tf.function
    def reduce_all(inputs):
        # All in flight at once: unnamed, so named after their inputs.
        return [terse.allreduce(x, op=OPS[k]) for x, (_, k) in zip(inputs, keys)]

    for _ in range(2):  # The second call reuses the graph (cached names).
        check_allreduce(dict(zip(keys, reduce_all(inputs))), size, 2)


def test_allgather_every_dtype(_):
    size, rank = terse.size(), terse.rank()

    @tf.function
    def gather(x):
        return terse.allgather(x)

    for dtype in DTYPES:
        mine = tensor(values(rank, (rank + 1, 2, 3), dtype, 3), dtype)
        want = np.concatenate([values(r, (r + 1, 2, 3), dtype, 3)
                               for r in range(size)])
        expect_equal(as_f64(terse.allgather(mine, name=f"g.{dtype.name}")),
                     want, f"eager allgather {dtype.name}")
        expect_equal(as_f64(gather(mine)), want,
                     f"tf.function allgather {dtype.name}")


def test_broadcast_every_dtype(_):
    size, rank = terse.size(), terse.rank()
    root = size - 1

    @tf.function
    def bcast(x):
        return terse.broadcast(x, root)

    for dtype in DTYPES:
        mine = tensor(values(rank, (4, 3), dtype, 4), dtype)
        want = values(root, (4, 3), dtype, 4)
        expect_equal(as_f64(terse.broadcast(mine, root, name=f"b.{dtype.name}")),
                     want, f"eager broadcast {dtype.name}")
        expect_equal(as_f64(bcast(mine)), want,
                     f"tf.function broadcast {dtype.name}")


def test_scalars_empty_tensors_and_scale_factors(_):
    size, rank = terse.size(), terse.rank()
    scalar = terse.allreduce(tf.constant(float(rank + 1)), op=terse.Sum)
    expect(scalar.shape == () and scalar.numpy() == size * (size + 1) / 2,
           f"scalar sum {scalar}")
    empty = terse.allreduce(tf.zeros([0, 4]), op=terse.Sum, name="empty")
    expect(empty.shape == (0, 4), f"empty allreduce shape {empty.shape}")
    gathered = terse.allgather(tf.zeros([rank % 2, 3]), name="some.empty")
    expect(gathered.shape == (sum(r % 2 for r in range(size)), 3),
           f"allgather with empty parts: {gathered.shape}")
    scaled = terse.allreduce(tf.fill([5], 2.0), op=terse.Sum,
                             prescale_factor=0.5, postscale_factor=3.0)
    expect(np.all(scaled.numpy() == 3.0 * size), f"scaled {scaled.numpy()}")
    tf_dtype = terse.allreduce(tf.ones([2], tf.float64), average=True)
    expect(np.all(tf_dtype.numpy() == 1.0), "average=True spelling")


def test_many_ops_in_flight_in_one_function(_):
    size, rank = terse.size(), terse.rank()
    inputs = [tf.fill([i + 1, 7], float(rank + i)) for i in range(40)]

    @tf.function
    def reduce_all(inputs):
        return [terse.allreduce(x, op=terse.Sum) for x in inputs]

    for i, out in enumerate(reduce_all(inputs)):
        want = sum(r + i for r in range(size))
        expect(out.shape == (i + 1, 7) and np.all(out.numpy() == want),
               f"tensor {i}: {out.numpy()[0, 0]} != {want}")


def test_constant_input_in_a_graph(_):
    size = terse.size()

    @tf.function
    def reduce_constant():
        return terse.allreduce(tf.constant([1.0, 2.0]), op=terse.Sum)

    for _ in range(2):
        out = reduce_constant().numpy()
        expect(np.array_equal(out, [size, 2.0 * size]), f"constant: {out}")


def test_indexed_slices(_):
    size, rank = terse.size(), terse.rank()
    slices = tf.IndexedSlices(tf.fill([2, 3], float(rank + 1)),
                              tf.constant([rank, rank + 1], tf.int64),
                              dense_shape=tf.constant([size + 1, 3], tf.int64))
    out = terse.allreduce(slices, op=terse.Average, name="slices")
    expect(isinstance(out, tf.IndexedSlices), f"got {type(out)}")
    dense = tf.convert_to_tensor(out).numpy()
    want = np.zeros((size + 1, 3))
    for r in range(size):
        want[r:r + 2] += (r + 1) / size
    expect(np.allclose(dense, want), f"IndexedSlices average {dense}")


def test_broadcast_variables_eager_and_in_function(_):
    size, rank = terse.size(), terse.rank()
    a = tf.Variable(tf.fill([3], float(rank)))
    b = tf.Variable(tf.fill([2, 2], tf.constant(rank, tf.int64)))
    terse.broadcast_variables([a, b], root_rank=size - 1)
    expect(np.all(a.numpy() == size - 1) and np.all(b.numpy() == size - 1),
           f"eager broadcast_variables: {a.numpy()} {b.numpy()}")
    a.assign(tf.fill([3], float(rank + 10)))

    @tf.function
    def sync():
        terse.broadcast_variables([a], root_rank=0, prefix="fn.broadcast")

    sync()
    expect(np.all(a.numpy() == 10.0), f"tf.function broadcast: {a.numpy()}")


def gradient_cases(x, rank, size):
    """(value, d value / d x) of each op's differentiable use."""
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        summed = terse.allreduce(x * x, op=terse.Sum, name="grad.sum")
        averaged = terse.allreduce(3.0 * x, op=terse.Average, name="grad.avg")
        gathered = terse.allgather(x, name="grad.gather")
        gathered_loss = tf.reduce_sum(gathered * gathered)
        root_loss = tf.reduce_sum(terse.broadcast(x, 0, name="grad.bcast"))
    return [tape.gradient(summed, x), tape.gradient(averaged, x),
            tape.gradient(gathered_loss, x), tape.gradient(root_loss, x)]


def test_gradients_eager_and_in_function(_):
    size, rank = terse.size(), terse.rank()
    x = tf.constant([1.0, -2.0]) * (rank + 1)
    # Every rank's loss depends on every rank's x: the gradient is the sum
    # over ranks of the local upstream gradients.
    want = [2.0 * x.numpy() * size,              # d sum(x_r^2)
            np.full(2, 3.0),                     # d avg(3 x_r), summed / size
            2.0 * x.numpy() * size,              # d sum over the gather
            np.full(2, float(size) if rank == 0 else 0.0)]
    for how, grads in (("eager", gradient_cases(x, rank, size)),
                       ("tf.function",
                        tf.function(gradient_cases)(x, rank, size))):
        for i, (g, w) in enumerate(zip(grads, want)):
            expect(np.allclose(g.numpy(), w),
                   f"{how} gradient {i}: {g.numpy()} != {w}")


def setup():
    terse.init()
    return terse


if __name__ == "__main__":
    run(globals(), setup=setup, teardown=lambda _: terse.shutdown())
