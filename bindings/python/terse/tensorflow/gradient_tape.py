"""DistributedGradientTape: a tf.GradientTape whose gradients are reduced.

    with tf.GradientTape() as tape:
        loss = loss_fn(model(x), y)
    tape = terse.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)   # averaged
    optimizer.apply_gradients(zip(grads, model.trainable_variables))

PartialDistributedGradientTape leaves the gradients of some layers local
(not reduced), as Horovod's does.
"""

import tensorflow as tf

from terse.tensorflow import functions, ops


class _DistributedGradientTape(tf.GradientTape):
    """Shares the recorded tape of the wrapped one; see the factory below."""

    def __init__(self, tape, compression, op, sparse_as_dense,
                 gradient_predivide_factor, prefix, scale_local_gradients,
                 process_set=None):
        # Take over the wrapped tape's state (what it recorded, persistence):
        # this object is the same tape with a reducing gradient().
        self.__dict__.update(tape.__dict__)
        self._terse = dict(compression=compression, op=op,
                           sparse_as_dense=sparse_as_dense,
                           predivide=gradient_predivide_factor, prefix=prefix,
                           scale_local=scale_local_gradients,
                           process_set=process_set)
        self._terse_local = set()

    def register_local_source(self, source):
        """Leaves the gradient of `source` (a variable) local: not reduced,
        divided by size() when scale_local_gradients (Horovod's rule)."""
        self._terse_local.add(source.ref())

    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients=tf.UnconnectedGradients.NONE):
        grads = super().gradient(target, sources, output_gradients,
                                 unconnected_gradients)
        flat_sources = tf.nest.flatten(sources)
        flat_grads = tf.nest.flatten(grads, expand_composites=False)
        settings = self._terse
        predivide = settings["predivide"]
        shared = [i for i, s in enumerate(flat_sources)
                  if not (hasattr(s, "ref") and s.ref() in self._terse_local)]
        reduced = functions.reduce_gradients(
            [flat_grads[i] for i in shared],
            [flat_sources[i] if isinstance(flat_sources[i], tf.Variable)
             else None for i in shared],
            op=settings["op"], prefix=settings["prefix"],
            sparse_as_dense=settings["sparse_as_dense"],
            prescale_factor=1.0 / predivide, postscale_factor=predivide,
            compression=settings["compression"],
            process_set=settings["process_set"])
        out = list(flat_grads)
        for i, g in zip(shared, reduced):
            out[i] = g
        if settings["scale_local"] and len(shared) < len(out):
            local = set(range(len(out))) - set(shared)
            for i in local:
                out[i] = _divide(out[i], ops._set_size(ops.check_process_set(
                    settings["process_set"])))
        return tf.nest.pack_sequence_as(grads, out)


def _divide(grad, n):
    if grad is None:
        return None
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values / n, grad.indices,
                                grad.dense_shape)
    return grad / n


def _check(op, gradient_predivide_factor, process_set):
    ops.check_process_set(process_set, "DistributedGradientTape()")
    if op not in (ops.Sum, ops.Average, ops.Adasum):
        raise ValueError("DistributedGradientTape reduces with Sum, Average "
                         "or Adasum")
    if gradient_predivide_factor != 1.0 and op != ops.Average:
        raise ValueError("gradient_predivide_factor not supported with "
                         "op != Average")


def DistributedGradientTape(gradtape, device_dense="", device_sparse="",
                            compression=None, sparse_as_dense=False,
                            op=ops.Average, gradient_predivide_factor=1.0,
                            num_groups=0, groups=None, process_set=None,
                            scale_local_gradients=True,
                            name_prefix="tape.grad"):
    """Wraps `gradtape` so that gradient() returns gradients reduced over
    ranks (Horovod 0.28.1's signature).

    op: Average (default), Sum, or Adasum where the engine has it.
    compression: None / Compression.none, fp16, bf16 (cast in TensorFlow),
        or a terse compressor run by the engine per call.
    sparse_as_dense: reduce tf.IndexedSlices gradients (embeddings) densely
        instead of gathering them.
    gradient_predivide_factor: with op=Average, divide by this before the
        sum and by size()/factor after it.
    num_groups / groups: accepted; the engine fuses every gradient of the
        call by its own bucket rules instead.
    scale_local_gradients: divide the gradients of sources registered with
        register_local_source() by size().
    Every rank must ask for the gradients of the same sources in the same
    order. The result is a tf.GradientTape (isinstance holds).
    """
    _check(op, float(gradient_predivide_factor), process_set)
    return _DistributedGradientTape(gradtape, compression, op,
                                    sparse_as_dense,
                                    float(gradient_predivide_factor),
                                    name_prefix, scale_local_gradients,
                                    process_set)


def PartialDistributedGradientTape(gradtape, device_dense="",
                                   device_sparse="", compression=None,
                                   sparse_as_dense=False, op=ops.Average,
                                   gradient_predivide_factor=1.0,
                                   local_layers=None, groups=None,
                                   process_set=None,
                                   scale_local_gradients=True,
                                   name_prefix="tape.grad"):
    """DistributedGradientTape whose `local_layers` (a tf.keras layer or a
    list of them) keep local gradients: their trainable weights' gradients
    are not reduced (and are divided by size() if scale_local_gradients)."""
    tape = DistributedGradientTape(
        gradtape, compression=compression, sparse_as_dense=sparse_as_dense,
        op=op, gradient_predivide_factor=gradient_predivide_factor,
        groups=groups, process_set=process_set,
        scale_local_gradients=scale_local_gradients, name_prefix=name_prefix)
    for var in local_layer_weights(local_layers):
        tape.register_local_source(var)
    return tape


def local_layer_weights(local_layers):
    """The trainable weights of `local_layers` (None, a tf.keras layer or a
    list of them); ValueError for anything else."""
    if local_layers is None:
        local_layers = []
    elif isinstance(local_layers, tf.keras.layers.Layer):
        local_layers = [local_layers]
    weights = []
    for layer in local_layers:
        if not isinstance(layer, tf.keras.layers.Layer):
            raise ValueError("local_layers must be tf.keras layers, not "
                             f"{layer!r}")
        weights.extend(layer.trainable_weights)
    return weights
