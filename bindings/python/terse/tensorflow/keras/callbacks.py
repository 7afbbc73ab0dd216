"""Keras callbacks for data-parallel training with terse (Horovod's)."""

import tensorflow as tf

from terse import basics
from terse.tensorflow import functions, ops


class BroadcastGlobalVariablesCallback(tf.keras.callbacks.Callback):
    """Every rank takes root_rank's variables.

    At the start of training the model's variables (and the optimizer's, if
    it has any by then, e.g. restored on root_rank), so the first step
    starts from one state everywhere; at the end of the first batch the
    model's and the optimizer's again, as Horovod does (the optimizer's
    slots exist only after a step). local_variables: a variable or a list of
    them that stay each rank's own (never broadcast).
    """

    def __init__(self, root_rank=0, device="", local_variables=None):
        super().__init__()
        self.root_rank = root_rank
        self.device = device
        if local_variables is None:
            local_variables = []
        elif isinstance(local_variables, tf.Variable):
            local_variables = [local_variables]
        self._local = {v.ref() for v in local_variables}
        self.broadcast_done = False

    def _shared(self, variables):
        return [v for v in variables if v.ref() not in self._local]

    def _optimizer_variables(self):
        variables = getattr(getattr(self.model, "optimizer", None),
                            "variables", None) or []
        if callable(variables):  # Legacy optimizers: a method.
            variables = variables()
        return self._shared(list(variables))

    def _broadcast(self, tag):
        functions.broadcast_variables(self._shared(self.model.variables),
                                      self.root_rank,
                                      prefix=f"keras.broadcast.{tag}.model")
        optimizer = self._optimizer_variables()
        if optimizer:
            functions.broadcast_variables(
                optimizer, self.root_rank,
                prefix=f"keras.broadcast.{tag}.optimizer")

    def on_train_begin(self, logs=None):
        if not self.broadcast_done:
            self._broadcast("begin")

    def on_train_batch_end(self, batch, logs=None):
        if not self.broadcast_done:
            self._broadcast("first_batch")
            self.broadcast_done = True


class MetricAverageCallback(tf.keras.callbacks.Callback):
    """At the end of each epoch, replaces every numeric entry of `logs` by
    its average over the ranks (so rank 0 reports the whole job's loss and
    accuracy). Put it before callbacks that read the logs."""

    def __init__(self, device=""):
        super().__init__()
        self.device = device

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


def _get(value):
    return float(tf.keras.backend.get_value(value))


class LearningRateScheduleCallback(tf.keras.callbacks.Callback):
    """Sets the learning rate to initial_lr * multiplier(epoch) from
    start_epoch until end_epoch (exclusive), as Horovod's.

    multiplier: a number (a constant factor, applied at the first batch of
    each epoch) or a function of the epoch; with staircase=False it is
    called with a fractional epoch at every batch (steps_per_epoch: given,
    or read from Model.fit's parameters). momentum_correction: while the
    rate changes, scale the optimizer's momentum by new_lr / old_lr for the
    batch (Goyal et al.), where the momentum is a variable.
    """

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None,
                 staircase=True, momentum_correction=True,
                 steps_per_epoch=None, verbose=0):
        super().__init__()
        if initial_lr is None:
            raise ValueError("Parameter `initial_lr` is required")
        self.initial_lr = float(initial_lr)
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.verbose = verbose
        self.current_epoch = None
        self.restore_momentum = None
        if callable(multiplier):
            self.staircase = staircase
            self.multiplier = multiplier
        else:
            self.staircase = True
            self.multiplier = lambda epoch: multiplier

    def _lr_variable(self):
        optimizer = self.model.optimizer
        lr = getattr(optimizer, "learning_rate", None)
        if lr is None:
            lr = optimizer.lr
        if isinstance(lr, tf.keras.optimizers.schedules.LearningRateSchedule):
            raise ValueError("the learning rate callbacks set the optimizer's "
                             "learning rate; it is a LearningRateSchedule")
        return lr

    def _autodetect_steps_per_epoch(self):
        steps = (self.params or {}).get("steps")
        if steps:
            return steps
        raise ValueError(
            "Could not autodetect the number of steps per epoch. Please "
            "specify the steps_per_epoch parameter to the "
            f"{type(self).__name__}() or upgrade to the latest version of "
            "Keras.")

    def _adjust_learning_rate(self, epoch):
        lr = self._lr_variable()
        old_lr = _get(lr)
        new_lr = self.initial_lr * self.multiplier(epoch)
        tf.keras.backend.set_value(lr, new_lr)
        momentum = getattr(self.model.optimizer, "momentum", None)
        if self.momentum_correction and isinstance(momentum, tf.Variable) \
                and old_lr > 0:
            self.restore_momentum = _get(momentum)
            tf.keras.backend.set_value(
                momentum, self.restore_momentum * new_lr / old_lr)

    def _restore_momentum_if_needed(self):
        if self.restore_momentum is not None:
            tf.keras.backend.set_value(self.model.optimizer.momentum,
                                       self.restore_momentum)
            self.restore_momentum = None

    def on_train_begin(self, logs=None):
        if not self.staircase and not self.steps_per_epoch:
            self.steps_per_epoch = self._autodetect_steps_per_epoch()

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if self.current_epoch < self.start_epoch or (
                self.end_epoch is not None
                and self.current_epoch >= self.end_epoch):
            return
        if self.staircase and batch == 0:
            self._adjust_learning_rate(self.current_epoch)
        elif not self.staircase:
            self._adjust_learning_rate(
                self.current_epoch + float(batch) / self.steps_per_epoch)

    def on_train_batch_end(self, batch, logs=None):
        self._restore_momentum_if_needed()

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = _get(self._lr_variable())


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Horovod's gradual warmup (Goyal et al.): over warmup_epochs the
    learning rate rises from initial_lr / size() to initial_lr (the rate
    already scaled for size() ranks), at every batch."""

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True,
                 steps_per_epoch=None, verbose=0):
        def multiplier(epoch):
            # Shifted so the rate reaches round values at epoch ends.
            epoch += 1.0 / self.steps_per_epoch
            size = basics.size()
            return 1.0 / size * (epoch * (size - 1) / warmup_epochs + 1)

        super().__init__(initial_lr, multiplier, start_epoch=0,
                         end_epoch=warmup_epochs, staircase=False,
                         momentum_correction=momentum_correction,
                         steps_per_epoch=steps_per_epoch, verbose=verbose)
        self.warmup_epochs = warmup_epochs

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.end_epoch - 1 and self.verbose > 0:
            print(f"\nEpoch {epoch + 1}: finished gradual learning rate "
                  f"warmup to {_get(self._lr_variable()):g}.")


class BestModelCheckpoint(tf.keras.callbacks.ModelCheckpoint):
    """Horovod's: a ModelCheckpoint that keeps only the best weights by
    `monitor` (save_best_only, save_weights_only). Pass it to rank 0's fit
    only; filepath, which Horovod's Spark estimator fills in, is required
    here."""

    def __init__(self, filepath=None, monitor="val_loss", verbose=0,
                 mode="auto", save_freq="epoch"):
        if filepath is None:
            raise ValueError("BestModelCheckpoint needs a filepath")
        super().__init__(filepath=filepath, monitor=monitor, verbose=verbose,
                         save_best_only=True, save_weights_only=True,
                         mode=mode, save_freq=save_freq)
