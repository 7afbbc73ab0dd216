"""Keras callbacks for data-parallel training with terse."""

import tensorflow as tf

from terse import basics
from terse.tensorflow import functions, ops


class BroadcastGlobalVariablesCallback(tf.keras.callbacks.Callback):
    """At the start of training, every rank takes root_rank's variables.

    Broadcasts the model's variables and the optimizer's (if it has any by
    then, e.g. restored from a checkpoint on root_rank), so training starts
    from one state on every rank even if each rank initialised its own.
    """

    def __init__(self, root_rank=0):
        super().__init__()
        self.root_rank = root_rank

    def on_train_begin(self, logs=None):
        functions.broadcast_variables(self.model.variables, self.root_rank,
                                      prefix="keras.broadcast.model")
        variables = getattr(getattr(self.model, "optimizer", None),
                            "variables", None) or []
        if callable(variables):  # Legacy optimizers: a method.
            variables = variables()
        variables = list(variables)
        if variables:
            functions.broadcast_variables(variables, self.root_rank,
                                          prefix="keras.broadcast.optimizer")


class MetricAverageCallback(tf.keras.callbacks.Callback):
    """At the end of each epoch, replaces every numeric entry of `logs` by
    its average over the ranks (so rank 0 reports the whole job's loss and
    accuracy). Put it before callbacks that read the logs."""

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        basics.check_initialized("MetricAverageCallback")
        keys = sorted(k for k, v in logs.items()
                      if isinstance(v, (int, float)) or hasattr(v, "dtype"))
        if not keys:
            return
        values = tf.constant([float(logs[k]) for k in keys], tf.float64)
        averaged = ops.allreduce(values, op=ops.Average,
                                 name=f"keras.metrics.epoch{epoch}").numpy()
        for key, value in zip(keys, averaged):
            logs[key] = float(value)
