"""DistributedGradientTape: a tf.GradientTape whose gradients are reduced.

    with tf.GradientTape() as tape:
        loss = loss_fn(model(x), y)
    tape = terse.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)   # averaged
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
"""

import tensorflow as tf

from terse.tensorflow import functions, ops


class _DistributedGradientTape(tf.GradientTape):
    """Shares the recorded tape of the wrapped one; see the factory below."""

    def __init__(self, tape, compression, op, sparse_as_dense,
                 gradient_predivide_factor, prefix):
        # Take over the wrapped tape's state (what it recorded, persistence):
        # this object is the same tape with a reducing gradient().
        self.__dict__.update(tape.__dict__)
        self._terse = dict(compression=compression, op=op,
                           sparse_as_dense=sparse_as_dense,
                           predivide=gradient_predivide_factor, prefix=prefix)

    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients=tf.UnconnectedGradients.NONE):
        grads = super().gradient(target, sources, output_gradients,
                                 unconnected_gradients)
        flat_sources = tf.nest.flatten(sources)
        flat_grads = tf.nest.flatten(grads, expand_composites=False)
        settings = self._terse
        predivide = settings["predivide"]
        op = settings["op"]
        if predivide != 1.0 and op != ops.Average:
            raise ValueError("gradient_predivide_factor needs op=Average")
        reduced = functions.reduce_gradients(
            flat_grads,
            [s if isinstance(s, tf.Variable) else None for s in flat_sources],
            op=op, prefix=settings["prefix"],
            sparse_as_dense=settings["sparse_as_dense"],
            prescale_factor=1.0 / predivide, postscale_factor=predivide,
            compression=settings["compression"])
        return tf.nest.pack_sequence_as(grads, reduced)


def DistributedGradientTape(tape, compression=None, op=ops.Average,
                            sparse_as_dense=False,
                            gradient_predivide_factor=1.0,
                            name_prefix="tape.grad"):
    """Wraps `tape` so that gradient() returns gradients reduced over ranks.

    op: Average (default) or Sum of the ranks' gradients.
    compression: None or the engine's process-wide choice (terse.Compression;
        compression is applied by the engine per fused bucket, as
        TERSE_COMPRESSION selects); another choice raises TerseError.
    sparse_as_dense: reduce tf.IndexedSlices gradients (embeddings) densely
        instead of gathering them.
    gradient_predivide_factor: with op=Average, divide by this before the
        sum and by size()/factor after it.
    Every rank must ask for the gradients of the same sources in the same
    order. The result is a tf.GradientTape (isinstance holds).
    """
    if op not in (ops.Sum, ops.Average):
        raise ValueError("DistributedGradientTape reduces with Sum or Average")
    return _DistributedGradientTape(tape, compression, op, sparse_as_dense,
                                    float(gradient_predivide_factor),
                                    name_prefix)
