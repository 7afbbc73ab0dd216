"""TF1 (tf.compat.v1 graph and session) paths of terse.tensorflow under
mpirun, against numpy references computed without terse:
  - DistributedOptimizer over a tf.compat.v1.train.Optimizer with
    backward_passes_per_step=N: N runs' gradients summed (or averaged)
    locally, reduced and applied on every N-th run, nothing applied in
    between (momentum shows it), global_step advanced on every run;
  - op=Adasum: Horovod's Adasum optimizer (each rank steps; the updates
    combined by the paper's operator in recursive-doubling order);
  - sparse gradients (tf.IndexedSlices of an embedding) gathered, or made
    dense with sparse_as_dense;
  - broadcast_object, broadcast_object_fn and allgather_object run through
    a session (given, or the default one);
  - elastic.TensorFlowState over a session: the graph's global variables
    synced from rank 0, a commit restored after a failure on every rank;
  - the errors: eager aggregation with a TF1 optimizer, a graph without a
    session, backward_passes_per_step=0.
"""

import numpy as np
import tensorflow as tf

import terse.tensorflow as terse
from mpi_testlib import expect, expect_raises, run

DIM = 3
LR = 0.1


def close(a, b, what):
    a, b = np.asarray(a), np.asarray(b)
    expect(a.shape == b.shape and np.allclose(a, b, rtol=1e-5, atol=1e-6),
           f"{what}: {a.tolist()} != {b.tolist()}")


def x_of(rank, step):
    return np.random.RandomState(10 * rank + step).randint(
        -4, 5, DIM).astype(np.float32)


def aggregated_run(size, rank, passes, average, momentum, runs):
    """Runs the training op `runs` times; returns w and global_step after
    each run."""
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable("w", initializer=tf.ones([DIM]))
        x = tf.compat.v1.placeholder(tf.float32, [DIM])
        loss = tf.reduce_sum(w * x)
        step = tf.compat.v1.train.get_or_create_global_step()
        inner = (tf.compat.v1.train.MomentumOptimizer(LR, 0.9) if momentum
                 else tf.compat.v1.train.GradientDescentOptimizer(LR))
        opt = terse.DistributedOptimizer(
            inner, backward_passes_per_step=passes,
            average_aggregated_gradients=average)
        train = opt.minimize(loss, global_step=step)
        out = []
        with tf.compat.v1.Session() as session:
            session.run([tf.compat.v1.global_variables_initializer(),
                         tf.compat.v1.local_variables_initializer()])
            for k in range(runs):
                session.run(train, {x: x_of(rank, k)})
                out.append(session.run([w, step]))
    return out


def reference(size, passes, average, momentum, runs):
    w, v, out = np.ones(DIM), np.zeros(DIM), []
    acc = np.zeros(DIM)
    for k in range(runs):
        # The gradient of sum(w * x) is x; the ranks' average of the sum.
        acc += np.mean([x_of(r, k) for r in range(size)], axis=0)
        if (k + 1) % passes == 0:
            g = acc / passes if average else acc
            if momentum:
                v = 0.9 * v + g
                w = w - LR * v
            else:
                w = w - LR * g
            acc = np.zeros(DIM)
        out.append((w.copy(), k + 1))
    return out


def test_backward_passes_per_step(_):
    size, rank = terse.size(), terse.rank()
    for passes, average, momentum in [(2, False, False), (3, True, True),
                                      (1, False, True)]:
        got = aggregated_run(size, rank, passes, average, momentum, 6)
        want = reference(size, passes, average, momentum, 6)
        for k, ((gw, gs), (ww, ws)) in enumerate(zip(got, want)):
            what = (f"passes={passes} average={average} momentum="
                    f"{momentum} run {k}")
            close(gw, ww, what)
            expect(gs == ws, f"{what}: global_step {gs} != {ws}")


def adasum_pair(a, b):
    """The Adasum paper's operator, in float64."""
    dot = float(np.dot(a, b))
    return ((1 - dot / (2 * np.dot(a, a))) * a
            + (1 - dot / (2 * np.dot(b, b))) * b)


def adasum_tree(parts):
    """Recursive doubling: ranks (0,1), (2,3), ..., then pairs of pairs."""
    while len(parts) > 1:
        parts = [adasum_pair(parts[i], parts[i + 1])
                 for i in range(0, len(parts), 2)]
    return parts[0]


def adasum_run(rank, passes, runs):
    """w and global_step after each run of the TF1 Adasum optimizer."""
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable("w", initializer=tf.ones([DIM],
                                                               tf.float64))
        x = tf.compat.v1.placeholder(tf.float64, [DIM])
        step = tf.compat.v1.train.get_or_create_global_step()
        opt = terse.DistributedOptimizer(
            tf.compat.v1.train.GradientDescentOptimizer(LR), op=terse.Adasum,
            backward_passes_per_step=passes,
            name_prefix=f"adasum{passes}")
        train = opt.minimize(tf.reduce_sum(w * w * x), global_step=step)
        got = []
        with tf.compat.v1.Session() as session:
            session.run([tf.compat.v1.global_variables_initializer(),
                         tf.compat.v1.local_variables_initializer()])
            for k in range(runs):
                session.run(train, {x: x_of(rank, k)})
                got.append(session.run([w, step]))
    return got


def test_adasum_optimizer(_):
    size, rank = terse.size(), terse.rank()
    # Each rank's SGD update of sum(w * w * x) is -LR * 2 w x. Every N
    # runs, w becomes its value N runs ago plus the Adasum of the ranks'
    # N-step updates; in between each rank holds its own steps.
    for passes in (1, 2, 3):
        runs = 2 * passes
        got = adasum_run(rank, passes, runs)
        synced = np.ones(DIM)
        own = [synced.copy() for _ in range(size)]
        for k, (gw, gs) in enumerate(got):
            own = [w - LR * 2 * w * x_of(r, k) for r, w in enumerate(own)]
            if (k + 1) % passes == 0:
                synced = synced + adasum_tree([w - synced for w in own])
                own = [synced.copy() for _ in range(size)]
            close(gw, own[rank], f"Adasum passes={passes} run {k}")
            expect(gs == k + 1, f"global_step {gs}")


def test_aggregation_errors(_):
    expect_raises(ValueError, ["backward_passes_per_step must be > 0"],
                  terse.DistributedOptimizer,
                  tf.compat.v1.train.GradientDescentOptimizer(LR),
                  backward_passes_per_step=0)
    v = tf.Variable([1.0, 2.0])
    opt = terse.DistributedOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(LR),
        backward_passes_per_step=2)
    expect_raises(NotImplementedError, ["runs in a TF1 graph",
                                        "tf.keras optimizer"],
                  opt.minimize, lambda: tf.reduce_sum(v * v), var_list=[v])


def test_sparse_gradients(_):
    size, rank = terse.size(), terse.rank()
    rows = 5
    ids_of = [np.array([r % rows, (2 * r + 1) % rows, r % rows])
              for r in range(size)]
    for sparse_as_dense in (False, True):
        with tf.Graph().as_default():
            emb = tf.compat.v1.get_variable(
                "emb", initializer=tf.zeros([rows, 2]))
            loss = tf.reduce_sum(tf.gather(emb, ids_of[rank]))
            opt = terse.DistributedOptimizer(
                tf.compat.v1.train.GradientDescentOptimizer(LR),
                sparse_as_dense=sparse_as_dense)
            (grad, _), = opt.compute_gradients(loss, var_list=[emb])
            expect(isinstance(grad, tf.IndexedSlices) != sparse_as_dense,
                   f"sparse_as_dense={sparse_as_dense}: {type(grad)}")
            train = opt.apply_gradients([(grad, emb)])
            with tf.compat.v1.Session() as session:
                session.run(tf.compat.v1.global_variables_initializer())
                session.run(train)
                got = session.run(emb)
        counts = np.zeros([rows, 2])
        for ids in ids_of:
            for i in ids:
                counts[i] += 1.0
        close(got, -LR * counts / size,
              f"embedding step, sparse_as_dense={sparse_as_dense}")


def test_objects_through_a_session(_):
    size, rank = terse.size(), terse.rank()
    obj = {"rank": rank, "data": list(range(rank + 1))}
    with tf.Graph().as_default():
        expect_raises(ValueError, ["session=", "as_default"],
                      terse.broadcast_object, obj)
        with tf.compat.v1.Session() as session:
            got = terse.broadcast_object(obj, root_rank=size - 1,
                                         session=session, name="v1.obj")
            expect(got == {"rank": size - 1, "data": list(range(size))},
                   f"broadcast_object: {got}")
            fn = terse.broadcast_object_fn(root_rank=0, session=session)
            expect(fn(("x", rank)) == ("x", 0), "broadcast_object_fn")
            with session.as_default():
                gathered = terse.allgather_object(obj)
            want = [{"rank": r, "data": list(range(r + 1))}
                    for r in range(size)]
            expect(gathered == want, f"allgather_object: {gathered}")
    # A TF1 session over a graph, called from eager code (TensorFlow 2).
    graph = tf.Graph()
    with tf.compat.v1.Session(graph=graph) as session:
        got = terse.allgather_object(rank * 10, session=session)
    expect(got == [10 * r for r in range(size)], f"from eager: {got}")


def test_elastic_state_in_session(_):
    rank = terse.rank()
    with tf.Graph().as_default():
        a = tf.compat.v1.get_variable(
            "a", initializer=tf.constant([float(rank), 2.0 * rank]))
        b = tf.compat.v1.get_variable(
            "b", initializer=tf.constant(rank + 1, tf.int64))
        bump = [a.assign_add([1.0, 1.0]), b.assign_add(10)]
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            with session.as_default():
                state = terse.elastic.TensorFlowState(epoch=rank)
            expect(state.variables == [a, b], "the graph's global variables")
            calls = []

            @terse.elastic.run
            def train(state):
                # Synced from rank 0 before each call.
                got = session.run([a, b])
                calls.append((got[0].tolist(), int(got[1]), state.epoch))
                session.run(bump)
                state.epoch += 1
                if len(calls) == 1:
                    state.commit()
                    session.run(bump)
                    state.epoch += 1
                    raise tf.errors.FailedPreconditionError(
                        None, None, "a collective failed on every rank")
                return session.run([a, b])

            final = train(state)
    # Call 1 starts from rank 0's values, commits after one bump; the
    # failure restores that commit (not the second bump), syncs, calls 2.
    want = [([0.0, 0.0], 1, 0), ([1.0, 1.0], 11, 1)]
    expect(calls == want, f"elastic calls: {calls} != {want}")
    close(final[0], [2.0, 2.0], "final a")
    expect(int(final[1]) == 21 and state.epoch == 2,
           f"final b {final[1]}, epoch {state.epoch}")


def setup():
    terse.init()
    return terse


if __name__ == "__main__":
    run(globals(), setup=setup, teardown=lambda _: terse.shutdown())
