"""Horovod's process sets in terse.tensorflow, under mpirun (2 and 4 ranks).

Static sets even = ranks 0, 2, ... and odd = ranks 1, 3, ... at init, and a
dynamic one (TERSE_DYNAMIC_PROCESS_SETS=1). Every rank builds every
member's input from a seed and checks each result against numpy: allreduce
(eager and tf.function, float and integer Average), allgather, broadcast
(root a world rank), reducescatter, alltoall, objects, broadcast_variables,
the gradients of the three ops in tf.function, DistributedGradientTape,
size_op / process_set_included_op, and the errors of a rank outside a set.
"""

import os

import numpy as np
import tensorflow as tf

import terse.tensorflow as hvd
from mpi_testlib import expect, expect_raises, run


def floats(rank, n, case):
    return np.random.RandomState(100 * case + rank).randint(-30, 31, n) \
        .astype(np.float64)


class Sets:
    def __init__(self):
        size = int(os.environ["OMPI_COMM_WORLD_SIZE"])
        rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
        self.even = hvd.ProcessSet(list(range(0, size, 2)))
        self.odd = hvd.ProcessSet(list(range(1, size, 2)))
        hvd.init(process_sets=[self.even, self.odd],
                 config={"TERSE_DYNAMIC_PROCESS_SETS": "1"})
        self.mine = self.even if rank % 2 == 0 else self.odd
        self.other = self.odd if rank % 2 == 0 else self.even


def test_allreduce(s):
    members = s.mine.ranks
    x = tf.constant(floats(hvd.rank(), 6, 1))
    want = sum(floats(r, 6, 1) for r in members)
    got = hvd.allreduce(x, op=hvd.Sum, name="sum", process_set=s.mine)
    expect(np.array_equal(got.numpy(), want), f"eager sum {got}")

    @tf.function
    def graph(t):
        return hvd.allreduce(t, op=hvd.Average, name="avg",
                             process_set=s.mine)
    got = graph(x)
    expect(np.allclose(got.numpy(), want / len(members)), "graph average")
    ints = tf.constant(floats(hvd.rank(), 5, 2).astype(np.int32))
    got = hvd.allreduce(ints, op=hvd.Average, name="iavg", process_set=s.mine)
    total = sum(floats(r, 5, 2).astype(np.int64) for r in members)
    expect(np.array_equal(got.numpy(),
                          np.trunc(total / len(members)).astype(np.int32)),
           f"integer average {got}")
    # The same name on the global set, at the same time.
    g = hvd.allreduce(tf.ones([2]), op=hvd.Sum, name="sum")
    expect(np.array_equal(g.numpy(), [hvd.size()] * 2), "global")
    grouped = hvd.grouped_allreduce([x, 2 * x], op=hvd.Sum, name="grp",
                                    process_set=s.mine)
    expect(np.array_equal(grouped[1].numpy(), 2 * want), "grouped")


def test_allgather_broadcast_objects(s):
    members = s.mine.ranks
    x = tf.fill([hvd.rank() + 1, 2], float(hvd.rank()))
    got = hvd.allgather(x, name="gather", process_set=s.mine)
    want = np.concatenate([np.full((r + 1, 2), float(r)) for r in members])
    expect(np.array_equal(got.numpy(), want), "allgather")
    root = members[-1]
    got = hvd.broadcast(tf.fill([3], float(hvd.rank())), root, name="bcast",
                        process_set=s.mine)
    expect(np.array_equal(got.numpy(), [float(root)] * 3), "broadcast")
    v = tf.Variable([float(hvd.rank())] * 2)
    hvd.broadcast_variables([v], root_rank=root, process_set=s.mine)
    expect(np.array_equal(v.numpy(), [float(root)] * 2), "variables")
    obj = hvd.broadcast_object({"r": hvd.rank()}, root_rank=root,
                               process_set=s.mine)
    expect(obj == {"r": root}, f"broadcast_object {obj}")
    objs = hvd.allgather_object(hvd.rank(), process_set=s.mine)
    expect(objs == members, f"allgather_object {objs}")


def test_reducescatter_alltoall(s):
    members = s.mine.ranks
    n, me = len(members), s.mine.rank()
    rows = 2 * n + 1
    x = tf.constant(floats(hvd.rank(), rows, 3).reshape(rows, 1))
    got = hvd.reducescatter(x, op=hvd.Sum, name="rs", process_set=s.mine)
    total = sum(floats(r, rows, 3) for r in members).reshape(rows, 1)
    base, extra = divmod(rows, n)
    begin = me * base + min(me, extra)
    count = base + (1 if me < extra else 0)
    expect(np.array_equal(got.numpy(), total[begin:begin + count]),
           "reducescatter")
    splits = [j + 1 for j in range(n)]
    data = tf.concat([tf.fill([j + 1], float(10 * me + j))
                      for j in range(n)], 0)
    out, received = hvd.alltoall(data, splits=splits, name="a2a",
                                 process_set=s.mine)
    want = np.concatenate([np.full(me + 1, 10.0 * k + me) for k in range(n)])
    expect(np.array_equal(out.numpy(), want), f"alltoall {out}")
    expect(received.numpy().tolist() == [me + 1] * n, "received splits")


def test_gradients_and_tape(s):
    members = s.mine.ranks

    @tf.function
    def grads(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = hvd.allreduce(x * float(hvd.rank() + 1), op=hvd.Sum,
                              name="gr", process_set=s.mine)
            z = hvd.allgather(x, name="gg", process_set=s.mine)
            w = hvd.broadcast(x, s.mine.ranks[0], name="gb",
                              process_set=s.mine)
            loss = tf.reduce_sum(y) + tf.reduce_sum(z) + tf.reduce_sum(w)
        return tape.gradient(loss, x)
    g = grads(tf.ones([3], tf.float64))
    n = len(members)
    # allreduce: (rank + 1) n; allgather: n (this rank's rows of the summed
    # gradient); broadcast: n on the set's root, 0 elsewhere.
    want = (hvd.rank() + 1) * n + n + (n if hvd.rank() == members[0] else 0)
    expect(np.allclose(g.numpy(), [want] * 3), f"gradients {g} != {want}")
    v = tf.Variable([1.0, 2.0], dtype=tf.float64)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(v * float(hvd.rank()))
    tape = hvd.DistributedGradientTape(tape, process_set=s.mine)
    (grad,) = tape.gradient(loss, [v])
    mean = sum(members) / len(members)
    expect(np.allclose(grad.numpy(), [mean, mean]), f"tape {grad}")


def test_introspection_ops(s):
    expect(int(hvd.size_op(s.mine.process_set_id)) == len(s.mine.ranks),
           "size_op")
    expect(int(hvd.process_set_included_op(s.mine.process_set_id)) == 1,
           "included")
    expect(int(hvd.process_set_included_op(s.other.process_set_id)) == 0,
           "not included")
    expect(int(hvd.size_op()) == hvd.size(), "global size_op")


def test_not_a_member(s):
    expect_raises(ValueError, ["is not in process set"], hvd.allreduce,
                  tf.ones([1]), process_set=s.other)
    expect_raises(TypeError, ["ProcessSet"], hvd.allreduce, tf.ones([1]),
                  process_set="evens")


def test_z_dynamic(s):
    size = hvd.size()
    first = list(range(size // 2 + 1))
    if len(first) < size:
        ps = hvd.add_process_set(first)
        if ps.included():
            got = hvd.allreduce(tf.ones([2]), op=hvd.Sum, name="dyn",
                                process_set=ps)
            expect(np.array_equal(got.numpy(), [len(first)] * 2), "dynamic")
        expect(hvd.remove_process_set(ps) is True, "removed")
    else:
        expect_raises(ValueError, ["exists"], hvd.add_process_set, first)
    hvd.barrier()


if __name__ == "__main__":
    run(globals(), setup=Sets, teardown=lambda _: hvd.shutdown())
