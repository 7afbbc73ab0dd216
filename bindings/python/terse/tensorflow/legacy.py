"""Horovod's TF1 pieces for tf.compat.v1 graphs: DistributedOptimizer over
a tf.compat.v1.train.Optimizer and BroadcastGlobalVariablesHook (the
object helpers' session form is in terse.tensorflow.session_objects).

terse.tensorflow.DistributedOptimizer takes either kind of optimizer, as
Horovod's does: a tf.keras one goes to terse.tensorflow.keras'
DistributedOptimizer; a tf.compat.v1.train one is wrapped here, reducing
in compute_gradients() (so minimize() and explicit compute/apply both
reduce). With backward_passes_per_step=N it adds each step's gradients to
local accumulators (variables in LOCAL_VARIABLES) and, every N-th run,
reduces their sum (their mean with average_aggregated_gradients) and
applies it; the other runs apply nothing and only advance global_step.
Every rank must run the training op the same number of times. With
op=Adasum it is Horovod's Adasum optimizer: each rank applies its own
gradients, and each variable then takes its value before the step plus the
Adasum of the ranks' updates; with backward_passes_per_step=N each rank
takes N steps of its own and the variables then take their value before
the first of them plus the Adasum of the ranks' N-step updates.
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

    def _reduce(self, grads, variables):
        s = self._terse
        return functions.reduce_gradients(
            grads, variables, op=s["op"],
            prefix=s["prefix"], sparse_as_dense=s["sparse_as_dense"],
            prescale_factor=1.0 / s["predivide"],
            postscale_factor=s["predivide"], compression=s["compression"],
            process_set=s.get("process_set"))

    def compute_gradients(self, *args, **kwargs):
        pairs = self._optimizer.compute_gradients(*args, **kwargs)
        if self._terse["op"] == ops.Adasum:
            return pairs  # local: apply_gradients combines the updates
        grads = [g for g, _ in pairs]
        variables = [v for _, v in pairs]
        if self._terse["passes"] > 1:
            grads = self._aggregate(grads, variables)
        else:
            grads = self._reduce(grads, variables)
        return list(zip(grads, variables))

    def _aggregate(self, grads, variables):
        """Accumulates this run's gradients; on every N-th run returns the
        reduced sum (or mean), else zeros (never applied: see
        apply_gradients)."""
        passes = self._terse["passes"]
        if tf.executing_eagerly():
            raise NotImplementedError(
                "backward_passes_per_step with a tf.compat.v1.train.Optimizer "
                "runs in a TF1 graph; eagerly, wrap a tf.keras optimizer")
        present = [g is not None for g in grads]
        local = [tf.compat.v1.GraphKeys.LOCAL_VARIABLES]
        self._terse_counter = tf.compat.v1.Variable(
            tf.constant(0, tf.int64), trainable=False, collections=local,
            name="terse_aggregation_counter")
        accumulators = [
            tf.compat.v1.Variable(
                tf.zeros(v.shape, v.dtype.base_dtype), trainable=False,
                collections=local, name="terse_aggregated_grad")
            if has else None for v, has in zip(variables, present)]
        self._terse_accumulators = [a for a in accumulators if a is not None]
        updates = [a.assign_add(tf.convert_to_tensor(g))
                   for a, g in zip(accumulators, grads) if a is not None]
        with tf.control_dependencies(updates):
            count = self._terse_counter.assign_add(1)
        self._terse_due = tf.equal(count % passes, 0)
        kept = [i for i, has in enumerate(present) if has]

        def reduce():
            values = []
            for i in kept:
                value = accumulators[i].read_value()
                if self._terse["average_aggregated"]:
                    value = value / tf.cast(passes, value.dtype)
                values.append(value)
            return self._reduce(values, [variables[i] for i in kept])

        def wait():
            return [tf.zeros_like(accumulators[i]) for i in kept]

        out = list(grads)
        if kept:
            reduced = tf.compat.v1.cond(self._terse_due, reduce, wait)
            if not isinstance(reduced, (list, tuple)):
                reduced = [reduced]  # v1 control flow unpacks a singleton
            for i, r in zip(kept, reduced):
                out[i] = r
        return out

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        if self._terse["op"] == ops.Adasum:
            return self._adasum_apply(list(grads_and_vars), global_step, name)
        if self._terse["passes"] == 1:
            return self._optimizer.apply_gradients(grads_and_vars,
                                                   global_step, name)
        if getattr(self, "_terse_due", None) is None:
            raise ValueError("with backward_passes_per_step > 1, "
                             "apply_gradients takes what this optimizer's "
                             "compute_gradients (or minimize) returned")
        grads_and_vars = list(grads_and_vars)

        def apply():
            applied = self._optimizer.apply_gradients(grads_and_vars,
                                                      global_step, name)
            with tf.control_dependencies([applied]):
                return tf.group(*[a.assign(tf.zeros_like(a))
                                  for a in self._terse_accumulators])

        def skip():
            if global_step is None:
                return tf.no_op()
            return tf.group(tf.compat.v1.assign_add(global_step, 1))

        return tf.compat.v1.cond(self._terse_due, apply, skip)

    def _adasum_apply(self, grads_and_vars, global_step, name):
        """Horovod's Adasum optimizer: each rank applies its own gradients,
        then every variable becomes its value before the step plus the
        Adasum of the ranks' updates (new - old)."""
        if tf.executing_eagerly():
            raise NotImplementedError(
                "op=Adasum with a tf.compat.v1.train.Optimizer runs in a TF1 "
                "graph")
        variables = [v for g, v in grads_and_vars if g is not None]
        s = self._terse
        if s["passes"] > 1:
            return self._adasum_apply_every(grads_and_vars, variables,
                                            global_step, name)
        old = [tf.identity(v.read_value()) for v in variables]
        with tf.control_dependencies(old):
            applied = self._optimizer.apply_gradients(grads_and_vars,
                                                      global_step, name)
        with tf.control_dependencies([applied]):
            deltas = [v.read_value() - o for v, o in zip(variables, old)]
        combined = functions.reduce_gradients(
            deltas, variables, op=ops.Adasum, prefix=f"{s['prefix']}.adasum",
            compression=s["compression"])
        return tf.group(*[v.assign(o + d)
                          for v, o, d in zip(variables, old, combined)])

    def _adasum_apply_every(self, grads_and_vars, variables, global_step,
                            name):
        """Adasum with backward_passes_per_step=N (Horovod's): every run
        applies this rank's own step; the first run of each N snapshots the
        variables, the N-th replaces each by its snapshot plus the Adasum of
        the ranks' updates since (new - snapshot)."""
        s, passes = self._terse, self._terse["passes"]
        local = [tf.compat.v1.GraphKeys.LOCAL_VARIABLES]
        counter = tf.compat.v1.Variable(
            tf.constant(0, tf.int64), trainable=False, collections=local,
            name="terse_adasum_counter")
        starts = [tf.compat.v1.Variable(
            tf.zeros(v.shape, v.dtype.base_dtype), trainable=False,
            collections=local, name="terse_adasum_start") for v in variables]

        def snapshot():
            return tf.group(*[a.assign(v.read_value())
                              for a, v in zip(starts, variables)])

        first = tf.equal(counter.read_value() % passes, 0)
        snapped = tf.compat.v1.cond(first, snapshot, tf.no_op)
        with tf.control_dependencies([snapped]):
            applied = self._optimizer.apply_gradients(grads_and_vars,
                                                      global_step, name)
        with tf.control_dependencies([applied]):
            count = counter.assign_add(1)
        due = tf.equal(count % passes, 0)

        def combine():
            deltas = [v.read_value() - a.read_value()
                      for v, a in zip(variables, starts)]
            combined = functions.reduce_gradients(
                deltas, variables, op=ops.Adasum,
                prefix=f"{s['prefix']}.adasum", compression=s["compression"])
            return tf.group(*[v.assign(a.read_value() + d)
                              for v, a, d in zip(variables, starts,
                                                 combined)])

        return tf.compat.v1.cond(due, combine, tf.no_op)

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
    compute_gradients, backward passes aggregated in the graph (see the
    module comment).
    """
    ops.check_process_set(process_set, "DistributedOptimizer()")
    if gradient_predivide_factor != 1.0 and op != ops.Average:
        raise ValueError("gradient_predivide_factor not supported with "
                         "op != Average")
    if isinstance(optimizer, tf.compat.v1.train.Optimizer):
        if (not isinstance(backward_passes_per_step, int)
                or backward_passes_per_step <= 0):
            raise ValueError("backward_passes_per_step must be > 0, not "
                             f"{backward_passes_per_step!r}")
        if op not in (ops.Sum, ops.Average, ops.Adasum):
            raise ValueError("DistributedOptimizer reduces with Sum, Average "
                             "or Adasum")
        return _DistributedV1Optimizer(optimizer, name, use_locking, dict(
            op=op, prefix=name_prefix, sparse_as_dense=sparse_as_dense,
            predivide=float(gradient_predivide_factor),
            compression=compression, process_set=process_set,
            passes=backward_passes_per_step,
            average_aggregated=bool(average_aggregated_gradients)))
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
