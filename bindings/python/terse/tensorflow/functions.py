"""Helpers over the collectives: variables, groups, Python objects.

broadcast_variables() makes every rank start from root_rank's weights;
reduce_gradients() is what DistributedGradientTape and the Keras
DistributedOptimizer run on a step's gradients. Called eagerly, both wrap
their collectives in one tf.function, so every tensor of the group is in
flight at once and the engine fuses them into buckets. grouped_allreduce
and grouped_allgather do the same inside a tf.function; called eagerly they
run their ops one after the other (each eager op waits for its result).
broadcast_object / allgather_object move picklable objects (cloudpickle
where installed, else pickle) as uint8 tensors: eagerly, or in a TF1 graph
through a session (terse.tensorflow.session_objects).
"""

import numpy as np
import tensorflow as tf

from terse import basics
from terse.tensorflow import ops, session_objects
from terse.tensorflow.session_objects import pickler as _pickler


def broadcast_variables(variables, root_rank=0, prefix="broadcast.var",
                        process_set=None, inplace=False):
    """Assigns root_rank's value to every variable of `variables`, in place.

    The ops are named '<prefix>.<index>.<variable name>', so every rank must
    pass the same variables in the same order (e.g. model.variables).
    """
    basics.check_initialized("broadcast_variables()")
    ops.check_process_set(process_set, "broadcast_variables()")
    variables = list(variables)
    if not variables:
        return
    if tf.executing_eagerly():
        _broadcast_group(variables, root_rank, prefix, process_set)
    else:
        return _broadcast_assign(variables, root_rank, prefix, process_set)


def _broadcast_assign(variables, root_rank, prefix, process_set=None):
    assigns = []
    for i, var in enumerate(variables):
        value = ops.broadcast(var, root_rank, name=_var_name(prefix, i, var),
                              process_set=process_set)
        assigns.append(var.assign(value))
    return tf.group(*assigns)


@tf.function(autograph=False)
def _broadcast_group(variables, root_rank, prefix, process_set):
    _broadcast_assign(variables, root_rank, prefix, process_set)


def broadcast_(variables, root_rank, name=None, process_set=None):
    """Horovod's in-place broadcast: every variable of `variables` (one or a
    list) takes root_rank's value; returns them. Named '<name>.<index>.<var
    name>' (default name: 'broadcast_.<n>' from a per-process counter)."""
    single = isinstance(variables, tf.Variable)
    listed = [variables] if single else list(variables)
    for v in listed:
        if not isinstance(v, tf.Variable):
            raise TypeError(f"broadcast_ assigns tf.Variables, not {v!r}")
    prefix = name or ops._names.default("broadcast_", None)
    assign = broadcast_variables(listed, root_rank, prefix=prefix,
                                 process_set=process_set)
    if assign is not None:  # Graph mode: the variables after the assigns.
        with tf.control_dependencies([assign]):
            values = [tf.identity(v) for v in listed]
        return values[0] if single else values
    return variables


def broadcast_global_variables(root_rank):
    """TF1 graphs: the op that broadcasts tf.compat.v1.global_variables()
    from root_rank. Eagerly it raises, as Horovod's does."""
    if tf.executing_eagerly():
        raise RuntimeError(
            "broadcast_global_variables() does not support eager execution. "
            "Please use `broadcast_variables(<model/optimizer variables>)` "
            "instead.")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank,
                               prefix="broadcast.global")


def _group_base(kind, name):
    """A group's name (its members are '<name>.<index>')."""
    return name or ops._names.default(kind, None)


def grouped_allreduce(tensors, average=None, device_dense="",
                      device_sparse="", compression=None, op=None,
                      prescale_factor=1.0, postscale_factor=1.0,
                      process_set=None, ignore_name_scope=False, name=None):
    """allreduce of every tensor of `tensors` (a list), same settings for
    all; returns the list. Named '<name>.<index>'. Dense tensors go as one
    engine group (one TerseGroupedAllreduce op, eagerly and in graphs):
    negotiated in one cycle, fused only among themselves, failing as one on
    every rank. IndexedSlices members are reduced one by one (Horovod
    gathers them too)."""
    op = basics.resolve_average(op, average)  # One warning, for the call.
    tensors = list(tensors)
    if not tensors:
        return []
    base = _group_base("grouped_allreduce", name)
    if any(isinstance(t, tf.IndexedSlices) for t in tensors):
        return [ops.allreduce(t, compression=compression,
                              op=op, prescale_factor=prescale_factor,
                              postscale_factor=postscale_factor,
                              name=f"{base}.{i}", process_set=process_set)
                for i, t in enumerate(tensors)]
    if op not in ops._OP_NAMES:
        raise ValueError("op must be terse.tensorflow.Sum, Average, Min, "
                         f"Max, Product or Adasum, not {op!r}")
    ps_id = ops.check_process_set(process_set, "grouped_allreduce()")
    # One name per group in a graph (a tf.function may hold several).
    group = ops._names.unique_in_graph(base)
    names = [f"{group}.{i}" for i in range(len(tensors))]
    return ops.grouped_allreduce_dense(tensors, op, names, group,
                                       prescale_factor, postscale_factor,
                                       compression, ps_id)


def grouped_allgather(tensors, name=None, ignore_name_scope=False,
                      process_set=None):
    """allgather of every tensor of `tensors`; returns the list. One
    TerseGroupedAllgather op, one engine group: negotiated in one cycle,
    failing as one on every rank."""
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    if not tensors:
        return []
    ps_id = ops.check_process_set(process_set, "grouped_allgather()")
    for t in tensors:
        ops._check_dtype(t, "allgather", ops.MOVED_DTYPES)
        if t.shape.rank == 0:
            raise ValueError("terse allgather needs a tensor of rank >= 1, "
                             "got a scalar")
    group = ops._names.unique_in_graph(_group_base("grouped_allgather", name))
    gathered = ops._ops().terse_grouped_allgather(
        [ops._opaque(ops._to_engine(t)) for t in tensors], group_name=group,
        tensor_names=[f"{group}.{i}" for i in range(len(tensors))],
        process_set=ps_id)
    return [ops._from_engine(g, t.dtype) for g, t in zip(gathered, tensors)]


def _in_session(session):
    """True when the object helpers run TF1-style: a session, or a graph."""
    return session is not None or not tf.executing_eagerly()


def _to_bytes_tensor(obj):
    data = _pickler.dumps(obj)
    return tf.constant(np.frombuffer(data, dtype=np.uint8))


def broadcast_object(obj, root_rank=0, session=None, name=None,
                     process_set=None):
    """root_rank's `obj` (any picklable object), on every rank. In a TF1
    graph the ops run in `session` (default: the default session)."""
    if _in_session(session):
        return session_objects.broadcast_object_in_session(
            obj, root_rank, session, name, process_set)
    basics.check_initialized("broadcast_object()")
    ops.check_process_set(process_set, "broadcast_object()")
    name = name or ops._names.default("broadcast_object", None)
    if basics.rank() == root_rank:
        payload = _to_bytes_tensor(obj)
        length = tf.constant([int(payload.shape[0])], tf.int64)
    else:
        payload = None
        length = tf.constant([0], tf.int64)
    length = int(ops.broadcast(length, root_rank, name=f"{name}.size",
                               process_set=process_set)[0])
    if payload is None:
        payload = tf.zeros([length], tf.uint8)
    payload = ops.broadcast(payload, root_rank, name=f"{name}.data",
                            process_set=process_set)
    return _pickler.loads(payload.numpy().tobytes())


def broadcast_object_fn(root_rank=0, session=None, name=None,
                        process_set=None):
    """A function obj -> broadcast_object(obj, root_rank, ...)."""
    def broadcast_fn(obj):
        return broadcast_object(obj, root_rank, session, name, process_set)
    return broadcast_fn


def allgather_object(obj, session=None, name=None, process_set=None):
    """Every rank's `obj` (picklable), as a list in rank order. In a TF1
    graph the ops run in `session` (default: the default session)."""
    if _in_session(session):
        return session_objects.allgather_object_in_session(
            obj, session, name, process_set)
    basics.check_initialized("allgather_object()")
    ops.check_process_set(process_set, "allgather_object()")
    name = name or ops._names.default("allgather_object", None)
    payload = _to_bytes_tensor(obj)
    sizes = ops.allgather(tf.constant([int(payload.shape[0])], tf.int64),
                          name=f"{name}.sizes",
                          process_set=process_set).numpy()
    data = ops.allgather(payload, name=f"{name}.data",
                         process_set=process_set).numpy().tobytes()
    out, begin = [], 0
    for n in sizes:
        out.append(_pickler.loads(data[begin:begin + int(n)]))
        begin += int(n)
    return out


def _var_name(prefix, index, var):
    return f"{prefix}.{index}.{var.name}"


def reduce_gradients(grads, variables, op=ops.Average, prefix="grad",
                     sparse_as_dense=False, prescale_factor=1.0,
                     postscale_factor=1.0, compression=None,
                     process_set=None):
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
    settings = (op, float(prescale_factor), float(postscale_factor),
                compression, process_set)
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
                                   postscale_factor=postscale_factor,
                                   process_set=process_set)
    return out


def _reduce_dense(tensors, names, settings):
    op, prescale, postscale, compression, process_set = settings
    return [ops.allreduce(t, op=op, name=n, prescale_factor=prescale,
                          postscale_factor=postscale, compression=compression,
                          process_set=process_set)
            for t, n in zip(tensors, names)]


_reduce_group = tf.function(_reduce_dense, autograph=False)
