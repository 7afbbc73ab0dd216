"""Python objects as uint8 tensors: the pickler terse.tensorflow uses
(cloudpickle where installed, else pickle), and broadcast_object /
allgather_object's TF1 form, whose collectives are built in a session's
graph and run there (two runs each: the sizes, then the bytes).

terse.tensorflow.functions runs the eager form and calls these in a TF1
graph; terse.tensorflow.elastic finds its session with session_of.
"""

import pickle

import numpy as np
import tensorflow as tf

from terse import basics
from terse.tensorflow import ops

try:
    import cloudpickle as pickler
except ImportError:
    pickler = pickle


def session_of(session, what):
    session = session or tf.compat.v1.get_default_session()
    if session is None:
        raise ValueError(
            f"{what} in a TF1 graph runs its ops in a session: pass "
            "session=, or make one the default (with session.as_default():)")
    return session


def _run_on_bytes(session, collective, payload):
    """Runs collective(placeholder) in the session on `payload` (uint8)."""
    with session.graph.as_default():
        feed = tf.compat.v1.placeholder(tf.uint8, [None])
        return session.run(collective(feed), {feed: payload})


def _run_on_sizes(session, collective, size):
    with session.graph.as_default():
        feed = tf.compat.v1.placeholder(tf.int64, [1])
        return session.run(collective(feed), {feed: np.array([size])})


def broadcast_object_in_session(obj, root_rank, session, name, process_set):
    """broadcast_object's TF1 form: each collective built in the session's
    graph and run there (two runs: the size, then the bytes)."""
    basics.check_initialized("broadcast_object()")
    ops.check_process_set(process_set)
    session = session_of(session, "broadcast_object")
    name = name or ops._names.default("broadcast_object", None)
    payload = None
    if basics.rank() == root_rank:
        payload = np.frombuffer(pickler.dumps(obj), np.uint8)
    size = _run_on_sizes(
        session, lambda t: ops.broadcast(t, root_rank, name=f"{name}.size"),
        0 if payload is None else payload.size)
    if payload is None:
        payload = np.zeros([int(size[0])], np.uint8)
    data = _run_on_bytes(
        session, lambda t: ops.broadcast(t, root_rank, name=f"{name}.data"),
        payload)
    return pickler.loads(data.tobytes())


def allgather_object_in_session(obj, session, name, process_set):
    """allgather_object's TF1 form (see broadcast_object_in_session)."""
    basics.check_initialized("allgather_object()")
    ops.check_process_set(process_set)
    session = session_of(session, "allgather_object")
    name = name or ops._names.default("allgather_object", None)
    payload = np.frombuffer(pickler.dumps(obj), np.uint8)
    sizes = _run_on_sizes(
        session, lambda t: ops.allgather(t, name=f"{name}.sizes"),
        payload.size)
    data = _run_on_bytes(
        session, lambda t: ops.allgather(t, name=f"{name}.data"),
        payload).tobytes()
    out, begin = [], 0
    for n in sizes:
        out.append(pickler.loads(data[begin:begin + int(n)]))
        begin += int(n)
    return out
