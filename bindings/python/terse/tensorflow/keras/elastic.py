"""Horovod's horovod.tensorflow.keras.elastic on terse's fixed ranks:
KerasState, the state callbacks, and run (terse.tensorflow.elastic has the
scope: restore the last commit when a collective fails on every rank; no
hosts are added or removed)."""

import tensorflow as tf

from terse.tensorflow.elastic import (HostsUpdatedInterrupt, ObjectState,
                                      State, TensorFlowKerasState, run)


class KerasState(TensorFlowKerasState):
    """The model's and optimizer's variables plus picklable attributes
    (e.g. epoch=0, batch=0)."""

    def __init__(self, model, optimizer=None, **kwargs):
        super().__init__(model, optimizer=optimizer, **kwargs)


class CommitStateCallback(tf.keras.callbacks.Callback):
    """Commits the state every batches_per_commit batches."""

    def __init__(self, state, batches_per_commit=1):
        super().__init__()
        self.state = state
        self.batches_per_commit = batches_per_commit
        self.batches_remaining = batches_per_commit

    def on_train_batch_end(self, batch, logs=None):
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.state.commit()
            self.batches_remaining = self.batches_per_commit


class UpdateBatchStateCallback(tf.keras.callbacks.Callback):
    """Keeps state.batch at the last finished batch (0 after an epoch)."""

    def __init__(self, state):
        super().__init__()
        self.state = state

    def on_train_batch_end(self, batch, logs=None):
        self.state.batch = batch

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0


class UpdateEpochStateCallback(tf.keras.callbacks.Callback):
    """Keeps state.epoch at the next epoch to run."""

    def __init__(self, state):
        super().__init__()
        self.state = state

    def on_epoch_end(self, epoch, logs=None):
        self.state.epoch = epoch + 1


__all__ = ["KerasState", "CommitStateCallback", "UpdateBatchStateCallback",
           "UpdateEpochStateCallback", "run", "State", "ObjectState",
           "HostsUpdatedInterrupt"]
