"""DistributedOptimizer for Keras: reduces gradients before applying them.

The wrapper is a subclass of the wrapped optimizer's own class (built on the
fly, configured from its get_config()), so `model.compile(optimizer=...)`,
checkpoints and isinstance checks behave as with the original. Gradients
are reduced in apply_gradients(), which minimize() and Model.fit's train
step call inside their tf.function: the reductions of one step are in
flight together and the engine fuses them.
"""

import tensorflow as tf

from terse.tensorflow import functions, ops


class _DistributedOptimizerMixin:
    """Placed before the wrapped optimizer's class in the MRO."""

    def _terse_configure(self, compression, op, sparse_as_dense,
                         gradient_predivide_factor, name_prefix):
        if op not in (ops.Sum, ops.Average):
            raise ValueError("DistributedOptimizer reduces with Sum or Average")
        if gradient_predivide_factor != 1.0 and op != ops.Average:
            raise ValueError("gradient_predivide_factor needs op=Average")
        self._terse_settings = dict(
            compression=compression, op=op, sparse_as_dense=sparse_as_dense,
            predivide=float(gradient_predivide_factor), prefix=name_prefix)

    def terse_reduce(self, grads_and_vars):
        """The (reduced gradient, variable) pairs of `grads_and_vars`."""
        pairs = list(grads_and_vars)
        s = self._terse_settings
        grads = functions.reduce_gradients(
            [g for g, _ in pairs], [v for _, v in pairs], op=s["op"],
            prefix=s["prefix"], sparse_as_dense=s["sparse_as_dense"],
            prescale_factor=1.0 / s["predivide"],
            postscale_factor=s["predivide"], compression=s["compression"])
        return list(zip(grads, [v for _, v in pairs]))

    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        return super().apply_gradients(self.terse_reduce(grads_and_vars),
                                       *args, **kwargs)


def DistributedOptimizer(optimizer, compression=None, op=ops.Average,
                         sparse_as_dense=False, gradient_predivide_factor=1.0,
                         name_prefix="keras.grad"):
    """A copy of `optimizer` whose apply_gradients reduces over ranks first.

    optimizer: a tf.keras optimizer (tf.keras.optimizers.* or .legacy.*),
        not yet used (its configuration is copied, not its slot variables).
    compression: None or the engine's process-wide choice (terse.Compression;
        the engine compresses per fused bucket as TERSE_COMPRESSION selects);
        another choice raises TerseError.
    op: Average (default) or Sum.
    Scale the learning rate with size() yourself if you want Horovod's
    linear-scaling rule.
    """
    base = type(optimizer)
    if not isinstance(optimizer, (tf.keras.optimizers.Optimizer,
                                  tf.keras.optimizers.legacy.Optimizer)):
        raise TypeError("DistributedOptimizer wraps a tf.keras optimizer, not "
                        f"{base.__name__}")
    cls = type(base.__name__, (_DistributedOptimizerMixin, base), {
        "__module__": base.__module__,
        "__doc__": f"{base.__name__} with terse gradient reduction.",
    })
    wrapped = cls.from_config(optimizer.get_config())
    wrapped._terse_configure(compression, op, sparse_as_dense,
                             gradient_predivide_factor, name_prefix)
    return wrapped
