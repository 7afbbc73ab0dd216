"""terse.tensorflow.elastic on a fixed set of ranks, under mpirun.

Ranks start from different weights; elastic.run syncs rank 0's. One epoch
fails on every rank after its step (a collective whose shape differs across
ranks: FailedPreconditionError everywhere); run restores the last commit
(weights, optimizer iterations, attributes), calls the reset callbacks and
resumes. The final weights must equal a numpy run of the same epochs
without the failure (rank 0's start, ranks' gradients averaged). Then the
Keras flavour: KerasState with the commit / batch / epoch callbacks in
Model.fit.
"""

import numpy as np
import tensorflow as tf

import terse.tensorflow as terse
import terse.tensorflow.keras as hk
from mpi_testlib import expect, run

DIM, ROWS, EPOCHS, LR = 3, 4, 4, 0.1


def data(rank, epoch):
    rng = np.random.RandomState(300 + 10 * rank + epoch)
    return (rng.randint(-3, 4, size=(ROWS, DIM)).astype(np.float32),
            rng.randint(-3, 4, size=(ROWS, 1)).astype(np.float32))


def start(rank):
    return np.full((DIM, 1), 0.2 * (rank + 1), np.float32)


def numpy_reference(size):
    w = start(0).astype(np.float64)
    for epoch in range(EPOCHS):
        grads = []
        for r in range(size):
            x, y = data(r, epoch)
            grads.append(2.0 / ROWS * x.T @ (x @ w - y))
        w -= LR * sum(grads) / size
    return w


def test_restore_after_a_failed_collective(_):
    size, rank = terse.size(), terse.rank()
    model = tf.keras.Sequential([tf.keras.layers.Dense(
        1, use_bias=False, input_shape=(DIM,),
        kernel_initializer=tf.keras.initializers.Constant(start(rank)))])
    optimizer = tf.keras.optimizers.SGD(LR)
    optimizer.build(model.trainable_variables)
    state = terse.elastic.TensorFlowKerasState(model, optimizer, epoch=0,
                                              note=f"rank {rank}")
    resets, attempts = [], []
    state.register_reset_callbacks([lambda: resets.append(state.epoch)])

    @terse.elastic.run
    def train(state):
        attempts.append(state.epoch)
        while state.epoch < EPOCHS:
            x, y = data(rank, state.epoch)
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x) - y))
            tape = terse.DistributedGradientTape(tape)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            if state.epoch == 2 and len(attempts) == 1:
                terse.allreduce(tf.ones([rank + 1]), name="elastic.fail")
            state.epoch += 1
            state.commit()
        return "finished"

    expect(train(state) == "finished", "run returns func's result")
    expect(attempts == [0, 2], f"attempts started at epochs {attempts}")
    expect(resets == [2], f"reset callbacks saw epochs {resets}")
    expect(state.note == "rank 0", f"attributes synced: {state.note}")
    expect(int(optimizer.iterations.numpy()) == EPOCHS,
           f"iterations restored: {optimizer.iterations.numpy()}")
    want = numpy_reference(size)
    got = model.layers[0].kernel.numpy()
    expect(np.allclose(got, want, atol=1e-5),
           f"weights {got.ravel()} != reference {want.ravel()}")


def test_keras_state_and_callbacks(_):
    rank = terse.rank()
    model = tf.keras.Sequential([tf.keras.layers.Dense(
        1, use_bias=False, input_shape=(DIM,),
        kernel_initializer=tf.keras.initializers.Constant(start(rank)))])
    model.compile(optimizer=hk.DistributedOptimizer(
        tf.keras.optimizers.SGD(LR), name_prefix="elastic.keras"),
        loss="mse")
    state = hk.elastic.KerasState(model, batch=0, epoch=0)
    seen = []

    @hk.elastic.run
    def train(state):
        x, y = data(rank, 0)
        seen.append(model.layers[0].kernel.numpy().copy())
        model.fit(x, y, batch_size=2, initial_epoch=state.epoch, epochs=2,
                  shuffle=False, verbose=0, callbacks=[
                      hk.elastic.CommitStateCallback(state),
                      hk.elastic.UpdateBatchStateCallback(state),
                      hk.elastic.UpdateEpochStateCallback(state)])

    train(state)
    expect(np.allclose(seen[0], start(0)), "synced from rank 0 first")
    expect(state.epoch == 2 and state.batch == 0,
           f"epoch {state.epoch}, batch {state.batch}")
    expect(state._commits == 4, f"{state._commits} commits (one per batch)")


def setup():
    terse.init()
    return terse


if __name__ == "__main__":
    run(globals(), setup=setup, teardown=lambda _: terse.shutdown())
