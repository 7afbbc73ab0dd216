"""Horovod's TF1 pieces for tf.compat.v1 graphs: DistributedOptimizer over
a tf.compat.v1.train.Optimizer, and BroadcastGlobalVariablesHook.

terse.tensorflow.DistributedOptimizer takes either kind of optimizer, as
Horovod's does: a tf.keras one goes to terse.tensorflow.keras'
DistributedOptimizer; a tf.compat.v1.train one is wrapped here, reducing
in compute_gradients() (so minimize() and explicit compute/apply both
reduce).
"""

import tensorflow as tf

from terse.tensorflow import functions, ops


class _DistributedV1Optimizer(tf.compat.v1.train.Optimizer):
    """Delegates to the wrapped optimizer; compute_gradients reduces."""

    def __init__(self, optimizer, name, use_locking, settings):
        super().__init__(name=name or f"Distributed{type(optimizer).__name__}",
                         use_locking=use_locking)
        self._optimizer = optimizer
        self._terse = settings

    def compute_gradients(self, *args, **kwargs):
        pairs = self._optimizer.compute_gradients(*args, **kwargs)
        s = self._terse
        grads = functions.reduce_gradients(
            [g for g, _ in pairs], [v for _, v in pairs], op=s["op"],
            prefix=s["prefix"], sparse_as_dense=s["sparse_as_dense"],
            prescale_factor=1.0 / s["predivide"],
            postscale_factor=s["predivide"], compression=s["compression"],
            process_set=s.get("process_set"))
        return list(zip(grads, [v for _, v in pairs]))

    def apply_gradients(self, *args, **kwargs):
        return self._optimizer.apply_gradients(*args, **kwargs)

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)


def DistributedOptimizer(optimizer, name=None, use_locking=False,
                         device_dense="", device_sparse="", compression=None,
                         sparse_as_dense=False, backward_passes_per_step=1,
                         op=ops.Average, gradient_predivide_factor=1.0,
                         average_aggregated_gradients=False, num_groups=0,
                         groups=None, process_set=None,
                         scale_local_gradients=True,
                         name_prefix="opt.grad"):
    """Horovod's horovod.tensorflow.DistributedOptimizer.

    A tf.keras optimizer: terse.tensorflow.keras.DistributedOptimizer (all
    its options). A tf.compat.v1.train.Optimizer: gradients reduced in
    compute_gradients (backward_passes_per_step must be 1 there).
    """
    ops.check_process_set(process_set, "DistributedOptimizer()")
    if gradient_predivide_factor != 1.0 and op != ops.Average:
        raise ValueError("gradient_predivide_factor not supported with "
                         "op != Average")
    if isinstance(optimizer, tf.compat.v1.train.Optimizer):
        if backward_passes_per_step != 1:
            raise NotImplementedError(
                "terse aggregates backward passes for tf.keras optimizers "
                "only; a tf.compat.v1.train.Optimizer needs "
                "backward_passes_per_step=1")
        if op not in (ops.Sum, ops.Average, ops.Adasum):
            raise ValueError("DistributedOptimizer reduces with Sum, Average "
                             "or Adasum")
        return _DistributedV1Optimizer(optimizer, name, use_locking, dict(
            op=op, prefix=name_prefix, sparse_as_dense=sparse_as_dense,
            predivide=float(gradient_predivide_factor),
            compression=compression, process_set=process_set))
    from terse.tensorflow.keras import optimizer as keras_optimizer
    if keras_optimizer._is_keras_optimizer(optimizer):
        if op == ops.Adasum:
            raise ValueError("op == Adasum is not supported yet with Keras")
        return keras_optimizer.DistributedOptimizer(
            optimizer, name=name, compression=compression,
            sparse_as_dense=sparse_as_dense,
            gradient_predivide_factor=gradient_predivide_factor, op=op,
            backward_passes_per_step=backward_passes_per_step,
            average_aggregated_gradients=average_aggregated_gradients,
            groups=groups, process_set=process_set,
            scale_local_gradients=scale_local_gradients)
    raise ValueError("Provided optimizer doesn't inherit from either legacy "
                     f"TensorFlow or Keras optimizer: {optimizer!r}")


class BroadcastGlobalVariablesHook(tf.compat.v1.train.SessionRunHook):
    """A TF1 SessionRunHook: once the session exists, every rank takes
    root_rank's global variables (tf.compat.v1.train.MonitoredSession)."""

    def __init__(self, root_rank, device=""):
        super().__init__()
        self.root_rank = root_rank
        self.device = device
        self.bcast_op = None

    def begin(self):
        graph = tf.compat.v1.get_default_graph()
        if self.bcast_op is None or self.bcast_op.graph != graph:
            self.bcast_op = functions.broadcast_global_variables(
                self.root_rank)

    def after_create_session(self, session, coord):
        session.run(self.bcast_op)
