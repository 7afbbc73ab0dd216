"""Helpers over the collectives: variables and groups of gradients.

broadcast_variables() makes every rank start from root_rank's weights;
reduce_gradients() is what DistributedGradientTape and the Keras
DistributedOptimizer run on a step's gradients. Called eagerly, both wrap
their collectives in one tf.function, so every tensor of the group is in
flight at once and the engine fuses them into buckets.
"""

import tensorflow as tf

from terse import basics
from terse.tensorflow import ops


def broadcast_variables(variables, root_rank=0, prefix="broadcast.var"):
    """Assigns root_rank's value to every variable of `variables`, in place.

    The ops are named '<prefix>.<index>.<variable name>', so every rank must
    pass the same variables in the same order (e.g. model.variables).
    """
    basics.check_initialized("broadcast_variables()")
    variables = list(variables)
    if not variables:
        return
    if tf.executing_eagerly():
        _broadcast_group(variables, root_rank, prefix)
    else:
        return _broadcast_assign(variables, root_rank, prefix)


def _broadcast_assign(variables, root_rank, prefix):
    assigns = []
    for i, var in enumerate(variables):
        value = ops.broadcast(var, root_rank, name=_var_name(prefix, i, var))
        assigns.append(var.assign(value))
    return tf.group(*assigns)


@tf.function(autograph=False)
def _broadcast_group(variables, root_rank, prefix):
    _broadcast_assign(variables, root_rank, prefix)


def _var_name(prefix, index, var):
    return f"{prefix}.{index}.{var.name}"


def reduce_gradients(grads, variables, op=ops.Average, prefix="grad",
                     sparse_as_dense=False, prescale_factor=1.0,
                     postscale_factor=1.0, compression=None):
    """The allreduce of every gradient of `grads` (a list; None stays None).

    Names are '<prefix>.<index>.<variable name>' from the matching entry of
    `variables` (None allowed), so every rank must pass gradients of the same
    variables in the same order. sparse_as_dense turns tf.IndexedSlices into
    dense tensors first (else they are gathered).
    """
    basics.check_initialized("reducing gradients")
    grads = list(grads)
    variables = list(variables)
    if len(grads) != len(variables):
        raise ValueError(f"{len(grads)} gradients for {len(variables)} "
                         "variables")
    if compression is not None:
        ops.check_compression(compression, prefix)
    names = []
    for i, (grad, var) in enumerate(zip(grads, variables)):
        names.append(f"{prefix}.{i}" if var is None else
                     _var_name(prefix, i, var))
    if sparse_as_dense:
        grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices)
                 else g for g in grads]
    dense = [i for i, g in enumerate(grads)
             if g is not None and not isinstance(g, tf.IndexedSlices)]
    out = list(grads)
    settings = (op, float(prescale_factor), float(postscale_factor))
    if dense:
        tensors = [grads[i] for i in dense]
        dense_names = tuple(names[i] for i in dense)
        if tf.executing_eagerly():
            reduced = _reduce_group(tensors, dense_names, settings)
        else:
            reduced = _reduce_dense(tensors, dense_names, settings)
        for i, r in zip(dense, reduced):
            out[i] = r
    for i, g in enumerate(grads):
        if isinstance(g, tf.IndexedSlices):
            out[i] = ops.allreduce(g, op=op, name=names[i],
                                   prescale_factor=prescale_factor,
                                   postscale_factor=postscale_factor)
    return out


def _reduce_dense(tensors, names, settings):
    op, prescale, postscale = settings
    return [ops.allreduce(t, op=op, name=n, prescale_factor=prescale,
                          postscale_factor=postscale)
            for t, n in zip(tensors, names)]


_reduce_group = tf.function(_reduce_dense, autograph=False)
