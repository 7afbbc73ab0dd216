"""Data-parallel training with terse.tensorflow equals one process on the
concatenated batch (no compression, op=Average).

Each rank starts from its own random weights, takes rank 0's through
broadcast_variables (or the Keras callback), and trains on its slice of
each global batch; every rank also trains the single-process reference on
the whole global batch and the weights must agree after N steps:
DistributedGradientTape with SGD+momentum (eager and in tf.function), and
the Keras DistributedOptimizer with Adam through Model.fit.
"""

import numpy as np
import tensorflow as tf

import terse.tensorflow as terse
import terse.tensorflow.keras as terse_keras
from mpi_testlib import expect, run

STEPS = 5
LOCAL_BATCH = 8
TOLERANCE = 1e-5


def make_model(seed):
    tf.keras.utils.set_random_seed(seed)
    return tf.keras.Sequential([
        tf.keras.layers.Input((6,)),
        tf.keras.layers.Dense(16, activation="tanh"),
        tf.keras.layers.Dense(4),
    ])


def global_batch(step, size):
    rng = np.random.RandomState(100 + step)
    n = LOCAL_BATCH * size
    return (rng.randn(n, 6).astype(np.float32),
            rng.randint(0, 4, size=n).astype(np.int64))


def local_slice(array, rank):
    return array[rank * LOCAL_BATCH:(rank + 1) * LOCAL_BATCH]


def loss_fn(model, x, y):
    return tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
        y, model(x), from_logits=True))


def train(model, optimizer, batches, tape_wrapper, use_function):
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(model, x, y)
        tape = tape_wrapper(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    if use_function:
        step = tf.function(step)
    for x, y in batches:
        step(tf.constant(x), tf.constant(y))
    return model


def expect_same_weights(model, reference, what):
    for a, b in zip(model.trainable_variables, reference.trainable_variables):
        diff = float(np.max(np.abs(a.numpy() - b.numpy())))
        expect(diff < TOLERANCE, f"{what}: {a.name} differs by {diff}")


def expect_equal_across_ranks(model, what):
    for v in model.trainable_variables:
        mine = tf.reshape(v, [1, -1])
        every = terse.allgather(mine, name=f"check.{what}.{v.name}").numpy()
        expect(np.all(every == every[0]), f"{what}: {v.name} differs across "
               "ranks")


def run_tape_equivalence(use_function):
    rank, size = terse.rank(), terse.size()
    reference = make_model(0)
    sgd = dict(learning_rate=0.1, momentum=0.9)
    batches = [global_batch(s, size) for s in range(STEPS)]
    train(reference, tf.keras.optimizers.SGD(**sgd), batches,
          lambda tape: tape, use_function)

    # Rank 0 starts like the reference, the others elsewhere on purpose.
    model = make_model(0 if rank == 0 else 1234 + rank)
    terse.broadcast_variables(model.variables, root_rank=0)
    initial = make_model(0)
    expect_same_weights(model, initial, "after broadcast_variables")
    local = [(local_slice(x, rank), local_slice(y, rank)) for x, y in batches]
    train(model, tf.keras.optimizers.SGD(**sgd), local,
          terse.DistributedGradientTape, use_function)
    what = "tape in tf.function" if use_function else "eager tape"
    expect_same_weights(model, reference, what)
    expect_equal_across_ranks(model, what)


def test_tape_equivalence_eager(_):
    run_tape_equivalence(use_function=False)


def test_tape_equivalence_in_function(_):
    run_tape_equivalence(use_function=True)


def test_tape_sum_and_predivide(_):
    rank, size = terse.rank(), terse.size()
    w = tf.Variable([1.0, 2.0])
    for op, predivide, scale in ((terse.Sum, 1.0, 1.0),
                                 (terse.Average, 4.0, 1.0 / size)):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * w) * (rank + 1)
        tape = terse.DistributedGradientTape(
            tape, op=op, gradient_predivide_factor=predivide)
        expect(isinstance(tape, tf.GradientTape), "still a GradientTape")
        (grad,) = tape.gradient(loss, [w])
        want = 2.0 * w.numpy() * size * (size + 1) / 2 * scale
        expect(np.allclose(grad.numpy(), want), f"{grad.numpy()} != {want}")


def test_keras_fit_equivalence(_):
    rank, size = terse.rank(), terse.size()
    batches = [global_batch(s, size) for s in range(STEPS)]
    x_all = np.concatenate([x for x, _ in batches])
    y_all = np.concatenate([y for _, y in batches])
    loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    reference = make_model(0)
    reference.compile(optimizer=tf.keras.optimizers.Adam(0.01), loss=loss)
    reference.fit(x_all, y_all, batch_size=LOCAL_BATCH * size, shuffle=False,
                  epochs=1, verbose=0)

    model = make_model(0 if rank == 0 else 99 + rank)
    optimizer = terse_keras.DistributedOptimizer(tf.keras.optimizers.Adam(0.01))
    expect(isinstance(optimizer, tf.keras.optimizers.Adam),
           "the wrapper is an Adam")
    model.compile(optimizer=optimizer, loss=loss)
    x_mine = np.concatenate([local_slice(x, rank) for x, _ in batches])
    y_mine = np.concatenate([local_slice(y, rank) for _, y in batches])
    history = model.fit(
        x_mine, y_mine, batch_size=LOCAL_BATCH, shuffle=False, epochs=1,
        verbose=0,
        callbacks=[terse_keras.BroadcastGlobalVariablesCallback(0),
                   terse_keras.MetricAverageCallback()])
    expect_same_weights(model, reference, "Keras fit")
    expect_equal_across_ranks(model, "keras")
    logged = np.array([history.history["loss"][-1]])
    every = terse.allgather(tf.constant(logged), name="check.loss").numpy()
    expect(np.all(every == every[0]), f"averaged loss differs: {every}")


def setup():
    terse.init()
    return terse


if __name__ == "__main__":
    run(globals(), setup=setup, teardown=lambda _: terse.shutdown())
