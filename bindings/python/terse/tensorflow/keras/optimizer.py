"""DistributedOptimizer for Keras: reduces gradients before applying them.

The wrapper is a subclass of the wrapped optimizer's own class (built on the
fly, configured from its get_config()), so `model.compile(optimizer=...)`,
checkpoints and isinstance checks behave as with the original. Gradients
are reduced in apply_gradients(), which minimize() and Model.fit's train
step call inside their tf.function: the reductions of one step are in
flight together and the engine fuses them.

backward_passes_per_step=N accumulates N steps' gradients locally (in
non-trainable variables beside the optimizer) and reduces and applies their
sum, or their mean with average_aggregated_gradients, on every N-th call;
the other calls only count the step in optimizer.iterations, as Horovod's.
"""

import tensorflow as tf

from terse.tensorflow import functions, gradient_tape, ops


class _DistributedOptimizerMixin:
    """Placed before the wrapped optimizer's class in the MRO."""

    def _terse_configure(self, compression, op, sparse_as_dense,
                         gradient_predivide_factor, name_prefix,
                         backward_passes_per_step,
                         average_aggregated_gradients, scale_local_gradients,
                         process_set=None):
        if op not in (ops.Sum, ops.Average, ops.Adasum):
            raise ValueError("DistributedOptimizer reduces with Sum, Average "
                             "or Adasum")
        if gradient_predivide_factor != 1.0 and op != ops.Average:
            raise ValueError("gradient_predivide_factor not supported with "
                             "op != Average")
        if not isinstance(backward_passes_per_step, int) or \
                backward_passes_per_step <= 0:
            raise ValueError("backward_passes_per_step must be > 0, not "
                             f"{backward_passes_per_step!r}")
        if op == ops.Adasum and average_aggregated_gradients:
            raise ValueError("Adasum does not support "
                             "average_aggregated_gradients == True")
        self._terse_settings = dict(
            compression=compression, op=op, sparse_as_dense=sparse_as_dense,
            predivide=float(gradient_predivide_factor), prefix=name_prefix,
            passes=backward_passes_per_step,
            average_aggregated=bool(average_aggregated_gradients),
            scale_local=bool(scale_local_gradients), process_set=process_set)
        self._terse_local = set()
        self._terse_counter = None
        self._terse_accumulators = None

    def register_local_var(self, var):
        """Leaves var's gradient local: not reduced (divided by size() when
        scale_local_gradients), as Horovod's register_local_var."""
        self._terse_local.add(var.ref())

    def terse_reduce(self, grads_and_vars):
        """The (reduced gradient, variable) pairs of `grads_and_vars`."""
        pairs = list(grads_and_vars)
        s = self._terse_settings
        shared = [i for i, (_, v) in enumerate(pairs)
                  if v.ref() not in self._terse_local]
        grads = functions.reduce_gradients(
            [pairs[i][0] for i in shared], [pairs[i][1] for i in shared],
            op=s["op"], prefix=s["prefix"],
            sparse_as_dense=s["sparse_as_dense"],
            prescale_factor=1.0 / s["predivide"],
            postscale_factor=s["predivide"], compression=s["compression"],
            process_set=s["process_set"])
        out = [g for g, _ in pairs]
        for i, g in zip(shared, grads):
            out[i] = g
        if s["scale_local"]:
            for i in set(range(len(pairs))) - set(shared):
                if out[i] is not None:
                    out[i] = _divide(out[i], ops._set_size(
                        ops.check_process_set(s["process_set"])))
        return list(zip(out, [v for _, v in pairs]))

    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        pairs = list(grads_and_vars)
        if self._terse_settings["passes"] == 1:
            return super().apply_gradients(self.terse_reduce(pairs), *args,
                                           **kwargs)
        return self._terse_aggregate(pairs, args, kwargs)

    def _terse_aggregate(self, pairs, args, kwargs):
        s = self._terse_settings
        passes = s["passes"]
        if self._terse_accumulators is None:
            with tf.init_scope():
                self._terse_counter = tf.Variable(
                    0, dtype=tf.int64, trainable=False,
                    name="terse_aggregation_counter")
                self._terse_accumulators = [
                    tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False,
                                name="terse_aggregated_grad")
                    for _, v in pairs]
        if len(self._terse_accumulators) != len(pairs):
            raise ValueError(
                "backward_passes_per_step needs the same variables on every "
                f"call: {len(pairs)} now, {len(self._terse_accumulators)} "
                "before")
        updates = []
        for acc, (g, _) in zip(self._terse_accumulators, pairs):
            if g is not None:
                updates.append(acc.assign_add(tf.convert_to_tensor(g)))
        with tf.control_dependencies(updates):
            count = self._terse_counter.assign_add(1)
        variables = [v for _, v in pairs]
        present = [g is not None for g, _ in pairs]

        def apply():
            grads = []
            for acc, has in zip(self._terse_accumulators, present):
                value = acc.read_value() if has else None
                if has and s["average_aggregated"]:
                    value = value / tf.cast(passes, value.dtype)
                grads.append(value)
            applied = super(_DistributedOptimizerMixin, self).apply_gradients(
                self.terse_reduce(zip(grads, variables)), *args, **kwargs)
            deps = [applied] if applied is not None and \
                not isinstance(applied, (int, float)) else []
            with tf.control_dependencies(deps):
                resets = [acc.assign(tf.zeros_like(acc))
                          for acc in self._terse_accumulators]
                resets.append(self._terse_counter.assign(0))
            with tf.control_dependencies(resets):
                return tf.constant(True)

        def skip():
            with tf.control_dependencies([self.iterations.assign_add(1)]):
                return tf.constant(False)

        return tf.cond(count >= passes, apply, skip)


def _divide(grad, n):
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values / n, grad.indices,
                                grad.dense_shape)
    return grad / n


def _is_keras_optimizer(optimizer):
    return isinstance(optimizer, (tf.keras.optimizers.Optimizer,
                                  tf.keras.optimizers.legacy.Optimizer))


def wrap_class(base):
    """The distributed subclass of optimizer class `base` (cached)."""
    cached = _CLASSES.get(base)
    if cached is None:
        cached = type(base.__name__, (_DistributedOptimizerMixin, base), {
            "__module__": base.__module__,
            "__doc__": f"{base.__name__} with terse gradient reduction.",
        })
        _CLASSES[base] = cached
    return cached


_CLASSES = {}


def DistributedOptimizer(optimizer, name=None, device_dense="",
                         device_sparse="", compression=None,
                         sparse_as_dense=False, gradient_predivide_factor=1.0,
                         op=ops.Average, backward_passes_per_step=1,
                         average_aggregated_gradients=False, num_groups=0,
                         groups=None, process_set=None,
                         scale_local_gradients=True,
                         name_prefix="keras.grad"):
    """A copy of `optimizer` whose apply_gradients reduces over ranks first
    (Horovod 0.28.1's signature).

    optimizer: a tf.keras optimizer (tf.keras.optimizers.* or .legacy.*),
        not yet used (its configuration is copied, not its slot variables).
    compression: None / Compression.none, fp16, bf16 (cast in TensorFlow),
        or a terse compressor run by the engine per call.
    op: Average (default), Sum, or Adasum where the engine has it.
    backward_passes_per_step, average_aggregated_gradients: see the module.
    name: the wrapped optimizer's name (default: its own).
    device_dense, device_sparse, num_groups, groups: accepted for Horovod
        compatibility; the engine fuses a step's gradients by its own
        bucket rules.
    Scale the learning rate with size() yourself if you want Horovod's
    linear-scaling rule.
    """
    ops.check_process_set(process_set, "DistributedOptimizer()")
    if not _is_keras_optimizer(optimizer):
        raise TypeError("DistributedOptimizer wraps a tf.keras optimizer, not "
                        f"{type(optimizer).__name__}")
    cls = wrap_class(type(optimizer))
    config = optimizer.get_config()
    if name is not None:
        config["name"] = name
    wrapped = cls.from_config(config)
    wrapped._terse_configure(compression, op, sparse_as_dense,
                             float(gradient_predivide_factor), name_prefix,
                             backward_passes_per_step,
                             average_aggregated_gradients,
                             scale_local_gradients, process_set=process_set)
    return wrapped


def PartialDistributedOptimizer(optimizer, name=None, device_dense="",
                                device_sparse="", compression=None,
                                sparse_as_dense=False,
                                gradient_predivide_factor=1.0,
                                op=ops.Average, backward_passes_per_step=1,
                                average_aggregated_gradients=False,
                                groups=None, process_set=None,
                                local_layers=None, scale_local_gradients=True,
                                name_prefix="keras.grad"):
    """DistributedOptimizer whose `local_layers` (a tf.keras layer or a list
    of them) keep local gradients: not reduced, and divided by size() when
    scale_local_gradients, as Horovod's."""
    wrapped = DistributedOptimizer(
        optimizer, name=name, compression=compression,
        sparse_as_dense=sparse_as_dense,
        gradient_predivide_factor=gradient_predivide_factor, op=op,
        backward_passes_per_step=backward_passes_per_step,
        average_aggregated_gradients=average_aggregated_gradients,
        groups=groups, process_set=process_set,
        scale_local_gradients=scale_local_gradients, name_prefix=name_prefix)
    for var in gradient_tape.local_layer_weights(local_layers):
        wrapped.register_local_var(var)
    return wrapped
