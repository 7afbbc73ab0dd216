"""Horovod's wider terse.tensorflow API under mpirun, eagerly and inside
tf.function, against numpy references computed without terse: the *_op
ops, broadcast_, broadcast_variables, broadcast_global_variables (a TF1
graph and session), broadcast_object(_fn), allgather_object,
grouped_allreduce, grouped_allgather, reducescatter (uneven rows),
grouped_reducescatter and alltoall (with and without splits), and the
gradient of each of the composed ops (Horovod's definition: the upstream
gradients of every rank's loss, summed); Horovod's helpers
check_num_rank_power_of_2 and handle_average_backwards_compatibility.
"""

import warnings

import numpy as np
import tensorflow as tf

import terse.tensorflow as terse
from mpi_testlib import expect, expect_raises, run


def modes(fn):
    return [("eager", fn), ("tf.function", tf.function(fn, autograph=False))]


def close(a, b, what):
    a, b = np.asarray(a), np.asarray(b)
    expect(a.shape == b.shape and np.allclose(a, b),
           f"{what}: {a.tolist()} != {b.tolist()}")


def x_of(rank, rows, cols=3, salt=0):
    rng = np.random.RandomState(100 * rank + salt)
    return rng.randint(-5, 6, size=(rows, cols)).astype(np.float32)


def test_process_info_ops(_):
    size, rank = terse.size(), terse.rank()
    for how, fn in modes(lambda: (terse.rank_op(), terse.size_op(),
                                  terse.local_rank_op(),
                                  terse.local_size_op())):
        got = [int(t) for t in fn()]
        want = [rank, size, terse.local_rank(), terse.local_size()]
        expect(got == want, f"{how} *_op: {got} != {want}")
        expect(fn()[0].dtype == tf.int32, "rank_op is int32")


def test_broadcast_in_place_and_variables(_):
    size, rank = terse.size(), terse.rank()
    root = size - 1
    v = tf.Variable(tf.fill([2, 2], float(rank)))
    w = tf.Variable(tf.constant([rank, -rank], tf.int64))
    out = terse.broadcast_([v, w], root, name="inplace")
    expect(out[0] is v, "broadcast_ returns the variables")
    close(v.numpy(), np.full((2, 2), root), "broadcast_ float")
    close(w.numpy(), [root, -root], "broadcast_ int64")
    v.assign(tf.fill([2, 2], float(rank + 7)))

    @tf.function
    def in_graph():
        return terse.broadcast_(v, 0, name="inplace.graph")

    close(in_graph().numpy(), np.full((2, 2), 7.0), "broadcast_ in graph")
    close(v.numpy(), np.full((2, 2), 7.0), "broadcast_ variable in graph")
    v.assign(tf.fill([2, 2], float(rank)))
    terse.broadcast_variables([v], root_rank=root)
    close(v.numpy(), np.full((2, 2), root), "broadcast_variables")


def test_broadcast_global_variables_tf1(_):
    size, rank = terse.size(), terse.rank()
    expect_raises(RuntimeError, ["does not support eager execution"],
                  terse.broadcast_global_variables, 0)
    with tf.Graph().as_default():
        a = tf.compat.v1.get_variable(
            "a", initializer=tf.constant([float(rank), 1.0]))
        b = tf.compat.v1.get_variable(
            "b", initializer=tf.constant(rank + 3, tf.int32))
        sync = terse.broadcast_global_variables(size - 1)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(sync)
            got_a, got_b = session.run([a, b])
    close(got_a, [size - 1, 1.0], "global variable a")
    expect(got_b == size + 2, f"global variable b: {got_b}")


def test_tf1_optimizer_and_hook(_):
    size, rank = terse.size(), terse.rank()
    x = np.arange(1.0, DIM_V1 + 1)
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable(
            "w", initializer=tf.constant([float(rank)] * DIM_V1))
        loss = tf.reduce_sum(w * x) * (rank + 1)
        opt = terse.DistributedOptimizer(
            tf.compat.v1.train.GradientDescentOptimizer(0.5))
        train = opt.minimize(loss)
        hook = terse.BroadcastGlobalVariablesHook(0)
        with tf.compat.v1.train.MonitoredSession(hooks=[hook]) as session:
            session.run(train)
            got = session.run(w)
    # Starts from rank 0's zeros; the gradient is x (rank + 1), averaged.
    mean = sum(r + 1 for r in range(size)) / size
    close(got, -0.5 * x * mean, "TF1 DistributedOptimizer step")
    # backward_passes_per_step with a TF1 optimizer: tf_v1_test.
    v1_opt = terse.DistributedOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(0.5),
        backward_passes_per_step=2)
    expect(isinstance(v1_opt, tf.compat.v1.train.Optimizer),
           "TF1 optimizer wrapped with backward_passes_per_step=2")
    keras_opt = terse.DistributedOptimizer(tf.keras.optimizers.SGD(0.1),
                                           backward_passes_per_step=2)
    expect(hasattr(keras_opt, "terse_reduce"), "keras optimizer wrapped")


DIM_V1 = 3


def test_helpers(_):
    powers = {2 ** k for k in range(8)}
    for n in range(130):
        expect(terse.check_num_rank_power_of_2(n) == (n in powers),
               f"check_num_rank_power_of_2({n})")
    h = terse.handle_average_backwards_compatibility
    expect(h(None, None) == terse.Average and h(terse.Max, None) == terse.Max,
           "op by default / given")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        expect(h(None, True) == terse.Average and
               h(None, False) == terse.Sum, "average=True/False")
    expect(len(caught) == 2 and all(issubclass(w.category, DeprecationWarning)
                                    for w in caught), f"warnings: {caught}")
    expect_raises(ValueError, ["supersedes average"], h, terse.Sum, True)


def test_objects(_):
    size, rank = terse.size(), terse.rank()
    obj = {"rank": rank, "list": list(range(rank + 2)), "text": "x" * rank}
    got = terse.broadcast_object(obj, root_rank=size - 1)
    want = {"rank": size - 1, "list": list(range(size + 1)),
            "text": "x" * (size - 1)}
    expect(got == want, f"broadcast_object: {got}")
    fn = terse.broadcast_object_fn(root_rank=0, name="fn")
    expect(fn(("t", rank)) == ("t", 0), "broadcast_object_fn")
    gathered = terse.allgather_object({"r": rank, "pad": [0] * rank})
    expect(gathered == [{"r": r, "pad": [0] * r} for r in range(size)],
           f"allgather_object: {gathered}")


def test_grouped_allreduce_and_allgather(_):
    size, rank = terse.size(), terse.rank()
    xs = [x_of(rank, 2, salt=s) for s in range(3)]
    for how, fn in modes(lambda *t: terse.grouped_allreduce(
            list(t), op=terse.Sum, name="grouped.ar")):
        for i, out in enumerate(fn(*[tf.constant(x) for x in xs])):
            close(out, sum(x_of(r, 2, salt=i) for r in range(size)),
                  f"{how} grouped_allreduce {i}")
    # Mixed dtypes, Average over ints and floats, and factors, in one group
    # (one TerseGroupedAllreduce op), against numpy.
    ints = [np.arange(3, dtype=np.int32) * (rank + 1), x_of(rank, 2, salt=7)]
    for how, fn in modes(lambda a, b: terse.grouped_allreduce(
            [a, b], op=terse.Average, prescale_factor=2.0,
            name="grouped.mixed")):
        got = fn(tf.constant(ints[0]), tf.constant(ints[1]))
        want_int = np.trunc(sum(np.arange(3) * (r + 1) * 2.0
                                for r in range(size)) / size).astype(np.int32)
        expect(got[0].dtype == tf.int32 and
               np.array_equal(got[0].numpy(), want_int),
               f"{how} grouped int Average {got[0].numpy()} vs {want_int}")
        close(got[1], 2.0 * sum(x_of(r, 2, salt=7) for r in range(size)) /
              size, f"{how} grouped float Average")
    for how, fn in modes(lambda *t: terse.grouped_allgather(
            list(t), name="grouped.ag")):
        ins = [x_of(rank, rank + 1 + i, salt=i) for i in range(2)]
        for i, out in enumerate(fn(*[tf.constant(x) for x in ins])):
            close(out, np.concatenate([x_of(r, r + 1 + i, salt=i)
                                       for r in range(size)]),
                  f"{how} grouped_allgather {i}")


def horovod_rows(rows, size, rank):
    """Horovod's reducescatter split: the first rows % size ranks get one
    row more."""
    counts = [rows // size + (1 if r < rows % size else 0)
              for r in range(size)]
    begin = sum(counts[:rank])
    return slice(begin, begin + counts[rank])


def test_reducescatter(_):
    size, rank = terse.size(), terse.rank()
    for rows in (2 * size, 2 * size + 1, size - 1):
        mine = tf.constant(x_of(rank, rows, salt=rows))
        total = sum(x_of(r, rows, salt=rows) for r in range(size))
        part = horovod_rows(rows, size, rank)
        for how, fn in modes(lambda x, rows=rows: (
                terse.reducescatter(x, op=terse.Sum, name=f"rs.sum.{rows}"),
                terse.reducescatter(x, name=f"rs.avg.{rows}"))):
            summed, averaged = fn(mine)
            close(summed, total[part], f"{how} reducescatter sum {rows}")
            close(averaged, total[part] / size,
                  f"{how} reducescatter average {rows}")
    for how, fn in modes(lambda a, b: terse.grouped_reducescatter(
            [a, b], op=terse.Sum, name="grs")):
        a, b = x_of(rank, size + 1, salt=1), x_of(rank, 3 * size, salt=2)
        outs = fn(tf.constant(a), tf.constant(b))
        close(outs[0], sum(x_of(r, size + 1, salt=1) for r in range(size))[
            horovod_rows(size + 1, size, rank)], f"{how} grouped rs 0")
        close(outs[1], sum(x_of(r, 3 * size, salt=2) for r in range(size))[
            horovod_rows(3 * size, size, rank)], f"{how} grouped rs 1")
    # Native path: integer Average truncates the sum / size (computed in
    # double, as Horovod's); float factors; fp16 compression casts around.
    rows = 2 * size + 1
    ints = [np.arange(rows * 2, dtype=np.int32).reshape(rows, 2) * (r + 1)
            for r in range(size)]
    total = sum(i.astype(np.float64) for i in ints)
    part = horovod_rows(rows, size, rank)
    got = terse.reducescatter(tf.constant(ints[rank]), name="rs.int.avg")
    expect(got.dtype == tf.int32 and np.array_equal(
        got.numpy(), (total[part] / size).astype(np.int32)),
        f"integer Average reducescatter {got.numpy()}")
    got = terse.reducescatter(tf.constant(total * 0 + ints[rank]),
                              op=terse.Average, prescale_factor=3.0,
                              postscale_factor=0.25, name="rs.f64.scaled")
    close(got, total[part] * 0.75 / size, "scaled float64 reducescatter")
    got = terse.reducescatter(tf.constant(ints[rank] / 8, tf.float32),
                              op=terse.Sum, compression=terse.Compression.fp16,
                              name="rs.fp16")
    expect(got.dtype == tf.float32 and np.allclose(
        got.numpy(), total[part] / 8, rtol=1e-2), f"fp16 reducescatter {got}")
    expect_raises(NotImplementedError, ["Sum and Average"],
                  terse.reducescatter, tf.ones([2]), op=terse.Max)


def splits_of(sender, size):
    """Rows rank `sender` sends to each rank (some zero)."""
    return [(sender + dest) % 3 for dest in range(size)]


def test_alltoall(_):
    size, rank = terse.size(), terse.rank()
    sent = {r: x_of(r, sum(splits_of(r, size)), salt=5) for r in range(size)}

    def rows_for(sender, dest):
        s = splits_of(sender, size)
        begin = sum(s[:dest])
        return sent[sender][begin:begin + s[dest]]

    want = np.concatenate([rows_for(s, rank) for s in range(size)])
    want_splits = [splits_of(s, size)[rank] for s in range(size)]
    for how, fn in modes(lambda x, s: terse.alltoall(x, splits=s,
                                                     name="a2a")):
        out, got_splits = fn(tf.constant(sent[rank]),
                             tf.constant(splits_of(rank, size)))
        close(out, want, f"{how} alltoall")
        expect(got_splits.dtype == tf.int32 and
               got_splits.numpy().tolist() == want_splits,
               f"{how} received splits {got_splits.numpy()}")
    even = x_of(rank, 2 * size, salt=6)
    out, got_splits = terse.alltoall(tf.constant(even), name="a2a.even")
    want = np.concatenate([x_of(s, 2 * size, salt=6)[2 * rank:2 * rank + 2]
                           for s in range(size)])
    close(out, want, "alltoall without splits")
    expect(got_splits.numpy().tolist() == [2] * size, "even splits")
    flags = tf.constant([[rank % 2 == 0]] * size)
    out, _ = terse.alltoall(flags, name="a2a.bool")
    expect(out.numpy().ravel().tolist() == [r % 2 == 0 for r in range(size)],
           "alltoall bool")


def weights(rank, shape, salt):
    return np.random.RandomState(1000 + 10 * rank + salt).randint(
        -3, 4, size=shape).astype(np.float32)


def test_gradients_of_composed_ops(_):
    size, rank = terse.size(), terse.rank()
    rows = 2 * size + 1
    x = tf.constant(x_of(rank, rows, salt=7))
    part = horovod_rows(rows, size, rank)

    def reducescatter_grad(x, op):
        with tf.GradientTape() as tape:
            tape.watch(x)
            out = terse.reducescatter(x, op=op, name=f"rs.grad.{op}")
            w = tf.constant(weights(rank, (part.stop - part.start, 3), 0))
            loss = tf.reduce_sum(w * out)
        return tape.gradient(loss, x)

    # Every rank's input reaches every rank's block: the gradient is every
    # rank's weights, stacked in rank order (divided by size for Average).
    stacked = np.concatenate([
        weights(r, (horovod_rows(rows, size, r).stop
                    - horovod_rows(rows, size, r).start, 3), 0)
        for r in range(size)])
    for how, fn in modes(reducescatter_grad):
        close(fn(x, terse.Sum), stacked, f"{how} reducescatter Sum gradient")
        close(fn(x, terse.Average), stacked / size,
              f"{how} reducescatter Average gradient")

    mine = splits_of(rank, size)
    y = tf.constant(x_of(rank, sum(mine), salt=8))

    def alltoall_grad(y, splits):
        with tf.GradientTape() as tape:
            tape.watch(y)
            out, _ = terse.alltoall(y, splits=splits, name="a2a.grad")
            loss = tf.reduce_sum(out * out)
        return tape.gradient(loss, y)

    for how, fn in modes(alltoall_grad):
        close(fn(y, tf.constant(mine)), 2.0 * y.numpy(),
              f"{how} alltoall gradient")

    def grouped_grad(a, b):
        with tf.GradientTape() as tape:
            tape.watch([a, b])
            s, g = terse.grouped_allreduce([a * a, b], op=terse.Sum,
                                           name="gar.grad")
            gathered = terse.grouped_allgather([b], name="gag.grad")[0]
            loss = tf.reduce_sum(s) + tf.reduce_sum(g) + \
                tf.reduce_sum(gathered * gathered)
        return tape.gradient(loss, [a, b])

    a, b = tf.constant([1.0, 2.0]) * (rank + 1), tf.constant([[3.0]]) + rank
    for how, fn in modes(grouped_grad):
        ga, gb = fn(a, b)
        close(ga, 2.0 * a.numpy() * size, f"{how} grouped_allreduce grad")
        close(gb, (1.0 + 2.0 * b.numpy()) * size,
              f"{how} grouped grads through allreduce and allgather")

    # Grouped reducescatter and allgather (one output unused: its gradient
    # is zeros, and its collective still runs on every rank). Each rank's
    # loss is sum(r0) + 3 sum(r1) + sum(g0): the reducescatter gradients
    # gather every rank's ones (1, and 3 * 2 through r1's input 2a), the
    # allgather's sums every rank's ones over this rank's rows (size).
    def grouped_exchange_grad(c):
        with tf.GradientTape() as tape:
            tape.watch(c)
            r0, r1 = terse.grouped_reducescatter([c, 2.0 * c], op=terse.Sum,
                                                 name="grs.grad")
            g0, _ = terse.grouped_allgather([c, c], name="gag2.grad")
            loss = (tf.reduce_sum(r0) + 3.0 * tf.reduce_sum(r1) +
                    tf.reduce_sum(g0))
        return tape.gradient(loss, c)

    c = tf.constant(np.arange(2 * size, dtype=np.float32) + rank)
    for how, fn in modes(grouped_exchange_grad):
        close(fn(c), np.full(2 * size, 1.0 + 6.0 + size),
              f"{how} grouped reducescatter and allgather grads")


def setup():
    terse.init()
    return terse


if __name__ == "__main__":
    run(globals(), setup=setup, teardown=lambda _: terse.shutdown())
