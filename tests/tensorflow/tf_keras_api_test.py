"""Horovod's Keras and tape API in terse under mpirun, against references
computed without terse (numpy, or plain tf.keras on this rank's own data):

DistributedOptimizer with backward_passes_per_step (with and without
average_aggregated_gradients) in Model.fit; PartialDistributedOptimizer
and PartialDistributedGradientTape (local layers not reduced, divided by
size); the learning-rate callbacks against Horovod's closed forms;
BroadcastGlobalVariablesCallback with local_variables and
MetricAverageCallback; load_model restoring a DistributedOptimizer;
SyncBatchNormalization against batch normalization of the concatenated
global batch (ranks with different batch sizes); Compression.fp16; and
IndexedSlices gradients gathered or reduced densely (sparse_as_dense).
"""

import os
import tempfile

import numpy as np
import tensorflow as tf

import terse.keras
import terse.tensorflow as terse
import terse.tensorflow.keras as hk
from mpi_testlib import expect, expect_raises, run

DIM = 3
BATCH = 4


def data(rank, rows, salt=0):
    rng = np.random.RandomState(50 + 10 * rank + salt)
    x = rng.randint(-3, 4, size=(rows, DIM)).astype(np.float64)
    y = rng.randint(-3, 4, size=(rows, 1)).astype(np.float64)
    return x, y


def close(a, b, what, tol=1e-5):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    expect(a.shape == b.shape and np.allclose(a, b, rtol=tol, atol=tol),
           f"{what}: {a.tolist()} != {b.tolist()}")


def linear_model(w0):
    model = tf.keras.Sequential([tf.keras.layers.Dense(
        1, use_bias=False, input_shape=(DIM,),
        kernel_initializer=tf.keras.initializers.Constant(w0))])
    return model


def mse_grad(w, x, y):
    return 2.0 / len(x) * x.T @ (x @ w - y)


def test_backward_passes_per_step_in_fit(_):
    size, rank = terse.size(), terse.rank()
    lr, steps, passes = 0.05, 6, 3
    w0 = np.full((DIM, 1), 0.1)
    for average in (False, True):
        model = linear_model(w0)
        opt = hk.DistributedOptimizer(
            tf.keras.optimizers.SGD(lr), backward_passes_per_step=passes,
            average_aggregated_gradients=average,
            name_prefix=f"bpps.{average}")
        model.compile(optimizer=opt, loss="mse")
        x, y = data(rank, BATCH * steps)
        model.fit(x.astype(np.float32), y.astype(np.float32),
                  batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
        # numpy: every rank's gradients summed over `passes` batches (at the
        # weights of the last update), averaged over ranks, applied.
        w, acc = w0.copy(), [np.zeros_like(w0) for _ in range(size)]
        for step in range(steps):
            for r in range(size):
                xr, yr = data(r, BATCH * steps)
                part = slice(step * BATCH, (step + 1) * BATCH)
                acc[r] += mse_grad(w, xr[part], yr[part])
            if (step + 1) % passes == 0:
                g = sum(acc) / size / (passes if average else 1)
                w -= lr * g
                acc = [np.zeros_like(w0) for _ in range(size)]
        close(model.layers[0].kernel.numpy(), w,
              f"weights after fit, average_aggregated={average}", 1e-4)
        expect(int(opt.iterations.numpy()) == steps,
               f"iterations {opt.iterations.numpy()} != {steps}")


def two_heads(rank):
    """x -> shared(x) + local(x): two bias-free Dense heads."""
    inputs = tf.keras.Input((DIM,))
    shared = tf.keras.layers.Dense(1, use_bias=False, name="shared",
                                   kernel_initializer="ones")
    local = tf.keras.layers.Dense(
        1, use_bias=False, name="local",
        kernel_initializer=tf.keras.initializers.Constant(0.1 * rank))
    model = tf.keras.Model(inputs, shared(inputs) + local(inputs))
    return model, shared, local


def local_reference(rank, size):
    """(shared gradient, local gradient) Horovod gives: the ranks' average,
    and this rank's own divided by size."""
    grads = []
    for r in range(size):
        x, y = data(r, BATCH, salt=1)
        w = np.ones((DIM, 1)) + np.full((DIM, 1), 0.1 * r)
        grads.append(mse_grad(w, x, y))
    return sum(grads) / size, grads[rank] / size


def test_partial_distributed_tape_and_optimizer(_):
    size, rank = terse.size(), terse.rank()
    want_shared, want_local = local_reference(rank, size)
    x, y = (t.astype(np.float32) for t in data(rank, BATCH, salt=1))

    def tape_grads(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        tape = terse.PartialDistributedGradientTape(
            tape, local_layers=[local], name_prefix="partial.tape")
        return tape.gradient(loss, [shared.kernel, local.kernel])

    for how in ("eager", "tf.function"):
        model, shared, local = two_heads(rank)
        fn = tape_grads if how == "eager" else tf.function(tape_grads)
        g_shared, g_local = fn(x, y)
        close(g_shared, want_shared, f"{how} partial tape shared gradient")
        close(g_local, want_local, f"{how} partial tape local gradient")

    model, shared, local = two_heads(rank)
    opt = hk.PartialDistributedOptimizer(tf.keras.optimizers.SGD(1.0),
                                         local_layers=local,
                                         name_prefix="partial.opt")
    model.compile(optimizer=opt, loss="mse")
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)
    close(shared.kernel.numpy(), np.ones((DIM, 1)) - want_shared,
          "partial optimizer shared weights")
    close(local.kernel.numpy(), np.full((DIM, 1), 0.1 * rank) - want_local,
          "partial optimizer local weights")


class RecordLR(tf.keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.seen = []

    def on_train_batch_begin(self, batch, logs=None):
        self.seen.append(float(self.model.optimizer.learning_rate.numpy()))


def fit_recording(callbacks, epochs, steps, lr=0.0):
    model = linear_model(np.zeros((DIM, 1)))
    model.compile(optimizer=hk.DistributedOptimizer(
        tf.keras.optimizers.SGD(lr), name_prefix="lr.cb"), loss="mse")
    record = RecordLR()
    x, y = data(terse.rank(), BATCH * steps, salt=2)
    history = model.fit(x, y, batch_size=BATCH, epochs=epochs,
                        callbacks=callbacks + [record], shuffle=False,
                        verbose=0)
    return record.seen, history


def test_learning_rate_callbacks(_):
    size = terse.size()
    epochs, steps, warmup, target = 3, 4, 2, 0.4
    seen, history = fit_recording(
        [hk.callbacks.LearningRateWarmupCallback(target,
                                                 warmup_epochs=warmup)],
        epochs, steps)
    want = []
    for e in range(epochs):
        for b in range(steps):
            if e < warmup:
                t = e + b / steps + 1.0 / steps
                want.append(target / size * (t * (size - 1) / warmup + 1))
            else:
                want.append(want[-1])
    close(seen, want, "warmup learning rates")
    close(history.history["lr"], [want[steps * (e + 1) - 1]
                                  for e in range(epochs)], "logged lr")

    seen, _ = fit_recording(
        [hk.callbacks.LearningRateScheduleCallback(
            1.0, multiplier=lambda e: 0.5 ** e, start_epoch=1, end_epoch=3)],
        4, 2, lr=7.0)
    close(seen, [7.0, 7.0, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25],
          "staircase schedule")
    seen, _ = fit_recording(
        [hk.callbacks.LearningRateScheduleCallback(
            2.0, multiplier=lambda e: e, staircase=False)], 2, 2)
    close(seen, [0.0, 1.0, 2.0, 3.0], "smooth schedule (fractional epochs)")
    expect_raises(ValueError, ["initial_lr"],
                  hk.callbacks.LearningRateScheduleCallback, None, 2.0)


def test_broadcast_callback_local_variables_and_metric_average(_):
    size, rank = terse.size(), terse.rank()
    model, shared, local = two_heads(rank)
    shared.kernel.assign(np.full((DIM, 1), float(rank + 1)))
    model.compile(optimizer=hk.DistributedOptimizer(
        tf.keras.optimizers.SGD(0.0), name_prefix="bcast.cb"), loss="mse")
    x, y = data(rank, BATCH * 2, salt=3)
    history = model.fit(
        x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0,
        callbacks=[hk.callbacks.BroadcastGlobalVariablesCallback(
            0, local_variables=[local.kernel]),
            hk.callbacks.MetricAverageCallback()])
    close(shared.kernel.numpy(), np.ones((DIM, 1)), "broadcast shared kernel")
    close(local.kernel.numpy(), np.full((DIM, 1), 0.1 * rank),
          "local variable kept")
    # lr 0: every batch's loss is at the broadcast weights; the epoch's loss
    # is the mean over batches, then MetricAverageCallback's rank mean.
    losses = []
    for r in range(size):
        xr, yr = data(r, BATCH * 2, salt=3)
        w = np.ones((DIM, 1)) + np.full((DIM, 1), 0.1 * r)
        losses.append(np.mean((xr @ w - yr) ** 2))
    close(history.history["loss"], [np.mean(losses)], "averaged loss", 1e-4)


def test_load_model_restores_distributed_optimizer(_):
    rank = terse.rank()
    model = linear_model(np.full((DIM, 1), 0.5))
    model.compile(optimizer=hk.DistributedOptimizer(
        tf.keras.optimizers.Adam(0.01), name_prefix="save"), loss="mse")
    x, y = data(rank, BATCH * 2, salt=4)
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    path = os.path.join(tempfile.mkdtemp(), f"model.{rank}.keras")
    model.save(path)
    loaded = terse.keras.load_model(path)
    opt = loaded.optimizer
    expect(hasattr(opt, "terse_reduce"), f"{type(opt)} is not distributed")
    expect(isinstance(opt, tf.keras.optimizers.Adam), "still an Adam")
    expect(int(opt.iterations.numpy()) == 2, "iterations restored")
    close(loaded.layers[0].kernel.numpy(), model.layers[0].kernel.numpy(),
          "weights restored")
    # Both continue identically: same slots, same reduced gradients.
    for m in (model, loaded):
        m.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    close(loaded.layers[0].kernel.numpy(), model.layers[0].kernel.numpy(),
          "a step after loading", 1e-6)
    gathered = terse.allgather(tf.reshape(loaded.layers[0].kernel, [1, -1]),
                               name="loaded.kernels").numpy()
    close(gathered, np.repeat(gathered[:1], len(gathered), 0),
          "ranks agree after loading")


def test_sync_batch_normalization(_):
    size, rank = terse.size(), terse.rank()

    def batch(r):
        return np.random.RandomState(70 + r).randn(r + 2, 2, 3).astype(
            np.float32) * (r + 1)

    everyone = np.concatenate([batch(r) for r in range(size)])
    mean = everyone.mean(axis=(0, 1))
    var = everyone.var(axis=(0, 1))
    layer = terse.SyncBatchNormalization(momentum=0.5, epsilon=1e-3)
    want = (batch(rank) - mean) / np.sqrt(var + 1e-3)
    for how, fn in (("eager", layer),
                    ("tf.function", tf.function(layer))):
        out = fn(tf.constant(batch(rank)), training=True)
        close(out, want, f"{how} sync batch norm output", 1e-4)
    # Two calls, each moving = 0.5 moving + 0.5 batch statistic.
    close(layer.moving_mean.numpy(), 0.75 * mean, "moving mean", 1e-4)
    close(layer.moving_variance.numpy(), 0.25 + 0.75 * var,
          "moving variance", 1e-3)
    expect_raises(ValueError, ["fused"], terse.SyncBatchNormalization,
                  fused=True)


def test_compression_fp16(_):
    size, rank = terse.size(), terse.rank()
    x = tf.constant([1.5, -2.25, 1024.0], tf.float64) * (rank + 1)
    wire, ctx = terse.Compression.fp16.compress(x)
    expect(wire.dtype == tf.float16 and ctx == tf.float64, "fp16 compress")
    back = terse.Compression.fp16.decompress(wire, ctx)
    expect(back.dtype == tf.float64, "fp16 decompress")
    close(back, x.numpy(), "fp16 round trip of representable values")
    ints_ = tf.constant([3, 4])
    expect(terse.Compression.fp16.compress(ints_)[0].dtype == tf.int32,
           "integers pass unchanged")
    total = size * (size + 1) / 2
    out = terse.allreduce(x / (rank + 1), op=terse.Sum,
                          compression=terse.Compression.fp16, name="fp16.ar")
    expect(out.dtype == tf.float64, "allreduce returns the input dtype")
    close(out, [1.5 * size, -2.25 * size, 1024.0 * size], "fp16 allreduce")
    v = tf.Variable([1.0, 2.0])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(v * float(rank + 1))
    tape = terse.DistributedGradientTape(
        tape, compression=terse.Compression.fp16)
    g = tape.gradient(loss, [v])[0]
    expect(g.dtype == tf.float32, "tape gradient dtype")
    close(g, [total / size] * 2, "fp16 tape gradient")


def test_indexed_slices_gathered_or_dense(_):
    size, rank = terse.size(), terse.rank()
    table = tf.Variable(tf.zeros([size + 2, 2]))
    ids = tf.constant([rank, rank + 1, rank + 1])
    dense_want = np.zeros((size + 2, 2))
    for r in range(size):
        for i in (r, r + 1, r + 1):
            dense_want[i] += (r + 1) / size
    for sparse_as_dense in (False, True):
        with tf.GradientTape() as tape:
            rows = tf.nn.embedding_lookup(table, ids)
            loss = tf.reduce_sum(rows) * (rank + 1)
        tape = terse.DistributedGradientTape(tape,
                                             sparse_as_dense=sparse_as_dense)
        g = tape.gradient(loss, [table])[0]
        expect(isinstance(g, tf.IndexedSlices) != sparse_as_dense,
               f"sparse_as_dense={sparse_as_dense}: got {type(g)}")
        if not sparse_as_dense:
            expect(g.values.shape[0] == 3 * size, "every rank's slices")
        close(tf.convert_to_tensor(g), dense_want,
              f"embedding gradient sparse_as_dense={sparse_as_dense}")
    slices = tf.IndexedSlices(tf.ones([1, 2]), tf.constant([0]),
                              tf.constant([2, 2]))
    expect_raises(NotImplementedError, ["Adasum", "sparse_as_dense=True"],
                  terse.allreduce, slices, op=terse.Adasum)


def test_keras_value_collectives(_):
    size, rank = terse.size(), terse.rank()
    out = hk.allreduce(np.array([1.0, rank]), "keras.value", op=terse.Sum)
    close(out, [size, size * (size - 1) / 2], "keras allreduce of a value")
    close(hk.allgather([[rank]], "keras.gather"), [[r] for r in range(size)],
          "keras allgather")
    close(hk.broadcast(float(rank), size - 1, "keras.bcast"), size - 1.0,
          "keras broadcast")
    close(hk.reducescatter(np.ones((size, 2)), "keras.rs", op=terse.Sum),
          np.full((1, 2), size), "keras reducescatter")


def test_keras_modules_are_one(_):
    for name in ("DistributedOptimizer", "PartialDistributedOptimizer",
                 "load_model", "SyncBatchNormalization", "allreduce"):
        expect(getattr(terse.keras, name) is getattr(hk, name),
               f"terse.keras.{name}")
    expect(terse.keras.callbacks.MetricAverageCallback is
           hk.callbacks.MetricAverageCallback, "terse.keras.callbacks")


def setup():
    terse.init()
    return terse


if __name__ == "__main__":
    run(globals(), setup=setup, teardown=lambda _: terse.shutdown())
