"""Collective operations on TensorFlow tensors: allreduce, allgather, broadcast.

Each is one op of terse's op library (an asynchronous kernel that enqueues
into the engine), so it runs eagerly and inside tf.function; in a graph,
independent collectives are in flight together and the engine fuses them.
All three are differentiable (allreduce with Sum or Average).

Names identify an operation across ranks: every rank must run the same
names with the same shapes and dtypes. Without a name, an op inside a
tf.function is named after its input tensor (unique within the graph, the
same on every rank that builds the same graph); an eager op gets
'tf.<op>.noname.<n>' from a per-op counter, which matches across ranks when
they issue the same sequence of calls.

Supported dtypes: float16, bfloat16, float32, float64, int32, int64, uint8.
An engine error raises the matching tf.errors exception (e.g.
FailedPreconditionError "terse is not initialised; call init() first",
InvalidArgumentError naming a tensor whose shape differs across ranks).
"""

import re
import threading
import weakref

import tensorflow as tf

from terse import basics
from terse._native import lib
from terse.tensorflow._library import ops as _ops

# Reduction ops (the engine's ReduceOp values).
Sum = lib().OP_SUM
Average = lib().OP_AVERAGE
Min = lib().OP_MIN
Max = lib().OP_MAX
_OP_NAMES = {Sum: "Sum", Average: "Average", Min: "Min", Max: "Max"}

SUPPORTED_DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.int32,
                    tf.int64, tf.uint8)


class _Names:
    """Default names: per-op counters (eager) and per-graph uniqueness."""

    def __init__(self):
        self._lock = threading.Lock()
        self._eager = {}
        self._graphs = weakref.WeakKeyDictionary()

    def default(self, op, tensor):
        if tf.executing_eagerly():
            with self._lock:
                n = self._eager.get(op, 0)
                self._eager[op] = n + 1
            return f"tf.{op}.noname.{n}"
        return f"tf.{op}.{_clean(tensor.name)}"

    def unique_in_graph(self, name):
        """`name`, suffixed when this graph already has an op of that name."""
        if tf.executing_eagerly():
            return name
        graph = tf.compat.v1.get_default_graph()
        with self._lock:
            used = self._graphs.setdefault(graph, {})
            n = used.get(name, 0)
            used[name] = n + 1
        return name if n == 0 else f"{name}.{n}"


_names = _Names()


def _clean(name):
    return re.sub(r"[^A-Za-z0-9_.\-/]", "_", name)


def _op_name(kind, tensor, name):
    if name is None:
        name = _names.default(kind, tensor)
    elif not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, not {name!r}")
    return _names.unique_in_graph(name)


def _check_dtype(tensor, what):
    if tensor.dtype not in SUPPORTED_DTYPES:
        raise TypeError(
            f"terse {what} does not support dtype {tensor.dtype.name} "
            "(supported: " + ", ".join(d.name for d in SUPPORTED_DTYPES) + ")")


def _opaque(tensor):
    """`tensor` (no copy) as a value graph optimization cannot see through.

    Inside a tf.function, TensorFlow's optimizer (grappler) folds ops whose
    inputs are constants: it would run a collective with a constant input
    (e.g. the row counts of a known-shape allgather) while it optimizes
    one rank's graph, outside the step, and specialise rank-dependent
    arithmetic (it turned the non-root broadcast gradient `allreduce(g) * 0`
    into a constant and pruned the allreduce on those ranks only, so the
    root waited forever). A PlaceholderWithDefault is never folded (it
    could be fed), so what reads it runs at run time on every rank.
    """
    if tf.executing_eagerly():
        return tensor
    return tf.raw_ops.PlaceholderWithDefault(input=tensor, shape=tensor.shape)


def _check_op(op, average):
    if average is not None:
        if op is not None:
            raise ValueError("pass either op or average, not both")
        return Average if average else Sum
    if op is None:
        return Average
    if op not in _OP_NAMES:
        raise ValueError(f"op must be terse.tensorflow.Sum, Average, Min or "
                         f"Max, not {op!r}")
    return op


def check_compression(compression, name):
    """Per-tensor compression other than the engine's is refused (for now)."""
    spec = basics.compression_arg(compression)
    if spec:
        raise lib().TerseError(
            f"tensor '{name}': per-tensor compression '{spec}' is not wired "
            "into the engine yet; select it for the whole process with "
            f"TERSE_COMPRESSION={spec} (or init(compression=...))")


def allreduce(tensor, average=None, op=None, name=None, prescale_factor=1.0,
              postscale_factor=1.0, compression=None):
    """The reduction of `tensor` over all ranks (default op: Average).

    tensor: a tf.Tensor, tf.Variable or tf.IndexedSlices. IndexedSlices are
        reduced by gathering every rank's slices (Sum or Average only).
    average: Horovod's older spelling (True: Average, False: Sum).
    prescale_factor / postscale_factor: multiply before / after reducing.
    compression: None or the engine's process-wide choice (see
        terse.Compression); a different one raises TerseError.
    """
    op = _check_op(op, average)
    if isinstance(tensor, tf.IndexedSlices):
        return _allreduce_indexed_slices(tensor, op, name, prescale_factor,
                                         postscale_factor)
    tensor = tf.convert_to_tensor(tensor)
    _check_dtype(tensor, "allreduce")
    name = _op_name("allreduce", tensor, name)
    if compression is not None:
        check_compression(compression, name)
    return _ops().terse_allreduce(_opaque(tensor), tensor_name=name,
                                  reduce_op=op,
                                  prescale_factor=float(prescale_factor),
                                  postscale_factor=float(postscale_factor))


def _allreduce_indexed_slices(slices, op, name, prescale, postscale):
    if op not in (Sum, Average):
        raise ValueError("IndexedSlices can be reduced with Sum or Average "
                         f"only, not {_OP_NAMES[op]}")
    base = name or _names.default("allreduce", slices.values)
    values = allgather(slices.values, name=f"{base}.values")
    indices = allgather(slices.indices, name=f"{base}.indices")
    scale = prescale * postscale
    if op == Average:
        scale /= basics.size()
    if scale != 1.0:
        values = values * tf.cast(scale, values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


def allgather(tensor, name=None):
    """Every rank's `tensor` concatenated along dimension 0, in rank order.

    The first dimension may differ across ranks; the others must agree.
    """
    tensor = tf.convert_to_tensor(tensor)
    _check_dtype(tensor, "allgather")
    if tensor.shape.rank == 0:
        raise ValueError("terse allgather needs a tensor of rank >= 1, got a "
                         "scalar")
    return _ops().terse_allgather(_opaque(tensor),
                                  tensor_name=_op_name("allgather", tensor,
                                                       name))


def broadcast(tensor, root_rank, name=None):
    """root_rank's `tensor` on every rank (same shape and dtype everywhere)."""
    tensor = tf.convert_to_tensor(tensor)
    _check_dtype(tensor, "broadcast")
    if not isinstance(root_rank, int) or root_rank < 0:
        raise ValueError(f"root_rank must be a rank, not {root_rank!r}")
    return _ops().terse_broadcast(_opaque(tensor),
                                  tensor_name=_op_name("broadcast", tensor,
                                                       name),
                                  root_rank=root_rank)


@tf.RegisterGradient("TerseAllreduce")
def _allreduce_grad(op, grad):
    """Every rank's output depends on every rank's input: reduce the grads.

    d(sum)/dx is the sum of the ranks' upstream gradients; Average divides
    by the rank count, and the scale factors apply the same way.
    """
    reduce_op = op.get_attr("reduce_op")
    if reduce_op not in (Sum, Average):
        raise LookupError(
            f"terse allreduce with {_OP_NAMES.get(reduce_op, reduce_op)} has "
            "no gradient; use Sum or Average")
    name = op.get_attr("tensor_name").decode() + ".grad"
    return allreduce(grad, op=reduce_op, name=name,
                     prescale_factor=op.get_attr("prescale_factor"),
                     postscale_factor=op.get_attr("postscale_factor"))


def _rank_tensor():
    """This rank as a run-time int32 scalar (see _opaque): the gradients
    differ by rank only in its value, so every rank builds the same graph
    and none has a collective optimized away."""
    return _opaque(tf.constant(basics.rank(), tf.int32))


@tf.RegisterGradient("TerseAllgather")
def _allgather_grad(op, grad):
    """The sum over ranks of the gathered gradient, this rank's rows.

    Both collectives are graph ops that run with the step; this rank's
    first row is the sum of the lower ranks' row counts, picked at run time
    (see _rank_tensor) so no rank's graph loses the row-count allgather.
    """
    name = op.get_attr("tensor_name").decode()
    grad = allreduce(grad, op=Sum, name=f"{name}.grad")
    rows = tf.shape(op.inputs[0], out_type=tf.int64)[:1]
    all_rows = allgather(rows, name=f"{name}.grad.rows")
    begin = tf.gather(tf.cumsum(all_rows, exclusive=True),
                      tf.cast(_rank_tensor(), tf.int64))
    return grad[begin:begin + rows[0]]


@tf.RegisterGradient("TerseBroadcast")
def _broadcast_grad(op, grad):
    """The root's input feeds every rank's output; the others feed nothing.

    Every rank joins the allreduce and keeps its result only on the root;
    the choice is made at run time (see _rank_tensor), so the allreduce is
    never pruned from a non-root rank's graph.
    """
    name = op.get_attr("tensor_name").decode()
    grad = allreduce(grad, op=Sum, name=f"{name}.grad")
    is_root = tf.equal(_rank_tensor(), op.get_attr("root_rank"))
    return tf.where(is_root, grad, tf.zeros_like(grad))
