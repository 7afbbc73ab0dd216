"""Collective operations on TensorFlow tensors: allreduce, allgather,
broadcast, and the *_op process queries.

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

Dtypes, as Horovod moves them on the CPU: allreduce takes float16,
bfloat16, float32, float64, int8, int16, uint16, int32, int64 and uint8;
allgather and broadcast take bool too. uint16 is not an engine type: it
travels as the same bits in int16 (sums and products wrap alike; Min and Max
flip the sign bit around the reduction so the order is unsigned's), so a
uint16 on one rank and an int16 on another is not detected. Integer tensors
take Average and scale factors as Horovod computes them: the engine sums,
and each scaling (prescale on the input, postscale / size after the sum) is
done in float64 and truncated toward zero.

Errors: a shape, dtype, root rank or op that differs across ranks raises
tf.errors.FailedPreconditionError on every rank (as Horovod), naming the
tensor and the ranks; so does an op before init() ("terse is not
initialised; call init() first"). Arguments this rank alone gets wrong raise
before anything is sent (TypeError, ValueError) or InvalidArgumentError
from the engine's enqueue (e.g. a root rank outside [0, size)).
"""

import re
import threading
import weakref

import tensorflow as tf

from terse import basics
from terse._native import lib
from terse.tensorflow._library import ops as _ops

# Reduction ops (the engine's ReduceOp values). Product and Adasum are
# values 4 and 5 of the engine's enum; an engine without them refuses them
# ("unknown reduce op").
Sum = lib().OP_SUM
Average = lib().OP_AVERAGE
Min = lib().OP_MIN
Max = lib().OP_MAX
Product = getattr(lib(), "OP_PRODUCT", 4)
Adasum = getattr(lib(), "OP_ADASUM", 5)
_OP_NAMES = {Sum: "Sum", Average: "Average", Min: "Min", Max: "Max",
             Product: "Product", Adasum: "Adasum"}

FLOAT_DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64)
INT_DTYPES = (tf.int8, tf.int16, tf.uint16, tf.int32, tf.int64, tf.uint8)
# What allreduce takes; allgather and broadcast take MOVED_DTYPES.
SUPPORTED_DTYPES = FLOAT_DTYPES + INT_DTYPES
MOVED_DTYPES = SUPPORTED_DTYPES + (tf.bool,)


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
        if tensor is None:  # Made unique per graph by unique_in_graph.
            return f"tf.{op}"
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


def _check_dtype(tensor, what, dtypes=SUPPORTED_DTYPES):
    if tensor.dtype not in dtypes:
        raise TypeError(
            f"terse {what} does not support dtype {tensor.dtype.name} "
            "(supported: " + ", ".join(d.name for d in dtypes) + ")")


def _to_engine(tensor):
    """uint16 as int16 bits (a bitcast: no copy); other dtypes unchanged."""
    if tensor.dtype == tf.uint16:
        return tf.bitcast(tensor, tf.int16)
    return tensor


def _from_engine(tensor, dtype):
    if dtype == tf.uint16:
        return tf.bitcast(tensor, tf.uint16)
    return tensor


def _flip_sign(tensor):
    """int16 bits of uint16 values, with the sign bit flipped: signed order
    of the result is the unsigned order of the input (and it undoes itself)."""
    return tf.bitwise.bitwise_xor(tensor, tf.constant(-32768, tf.int16))


def _scale_int(tensor, factor):
    """Horovod's integer scaling: factor * value in float64, truncated."""
    return tf.cast(tf.cast(tensor, tf.float64) * factor, tensor.dtype)


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
    op = basics.resolve_average(op, average, stacklevel=3)
    if op not in _OP_NAMES:
        raise ValueError("op must be terse.tensorflow.Sum, Average, Min, Max, "
                         f"Product or Adasum, not {op!r}")
    return op


def check_process_set(process_set, what="process_set"):
    """The engine id of `process_set` (terse.process_sets.resolve): 0 for
    None / global_process_set; a registered set's id (this rank must be in
    it). TypeError / ValueError naming the problem otherwise."""
    if process_set is None or process_set is global_process_set:
        return 0
    from terse import process_sets
    return process_sets.resolve(process_set, what)


def _set_size(ps_id):
    from terse import process_sets
    return process_sets.size_of(ps_id)


class _GlobalProcessSet:
    """Horovod's global_process_set: every rank (terse's only set), where
    terse.process_sets (the framework-neutral one) is not there."""

    process_set_id = 0

    def size(self):
        return basics.size()

    def rank(self):
        return basics.rank()

    def included(self):
        return True

    def _is_global(self):
        return True

    def __repr__(self):
        return "terse.tensorflow.global_process_set"


try:
    from terse.process_sets import global_process_set
except ImportError:
    global_process_set = _GlobalProcessSet()


def _compression_plan(compression):
    """(wire dtype or None, engine spec) of a compression choice.

    none: nothing. fp16 / bf16: cast in TensorFlow for the wire, as Horovod's
    Compression.fp16 does (the gradient flows through the casts). Any other
    terse compressor (topk, powersgd, gravac, ...) runs inside the engine,
    named by its per-call spec.
    """
    if compression is None:
        return None, ""
    from terse.tensorflow.compression import Compression
    choice = Compression.get(compression)
    if choice.name == "none":
        return None, ""
    if choice.name in ("fp16", "bf16") and choice.cf is None:
        return (tf.float16 if choice.name == "fp16" else tf.bfloat16), ""
    return None, basics.compression_spec(choice)


def allreduce(tensor, average=None, device_dense="", device_sparse="",
              compression=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0, name=None, process_set=None,
              ignore_name_scope=False):
    """The reduction of `tensor` over all ranks (default op: Average).

    Horovod 0.28.1's signature. tensor: a tf.Tensor, tf.Variable or
    tf.IndexedSlices; IndexedSlices are reduced by gathering every rank's
    slices (Sum or Average only; see _allreduce_indexed_slices).
    average: Horovod's older spelling (True: Average, False: Sum).
    op: Sum, Average, Min, Max, Product or Adasum.
    prescale_factor / postscale_factor: multiply before / after reducing
        (integer tensors: in float64, truncated, as Horovod).
    compression: None, Compression.none / fp16 / bf16 (cast in TensorFlow,
        as Horovod), or any terse compressor (run by the engine, per call).
    device_dense, device_sparse, ignore_name_scope: accepted for Horovod
        compatibility; terse's ops run on the CPU and are named by `name`.
    process_set: the ranks to reduce over (terse.process_sets; None: every
        rank); only its members may call it; Average divides by its size.
    """
    op = _check_op(op, average)
    ps_id = check_process_set(process_set, "allreduce()")
    if isinstance(tensor, tf.IndexedSlices):
        return _allreduce_indexed_slices(tensor, op, name, prescale_factor,
                                         postscale_factor, process_set)
    tensor = tf.convert_to_tensor(tensor)
    _check_dtype(tensor, "allreduce")
    name = _op_name("allreduce", tensor, name)
    wire, spec = _compression_plan(compression)
    plan = _AllreducePlan(tensor, op, prescale_factor, postscale_factor, wire,
                          ps_id)
    reduced = _ops().terse_allreduce(
        _opaque(plan.wire), tensor_name=name, reduce_op=plan.op,
        prescale_factor=plan.prescale, postscale_factor=plan.postscale,
        compression=spec, process_set=ps_id)
    return plan.finish(reduced)


def grouped_allreduce_dense(tensors, op, names, group_name, prescale,
                            postscale, compression, ps_id):
    """allreduce of every dense tensor of `tensors` as one engine group
    (TerseGroupedAllreduce): negotiated in one cycle, fused only among
    themselves, failing as one on every rank. Each tensor gets allreduce()'s
    casts and scaling."""
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    for t in tensors:
        _check_dtype(t, "grouped_allreduce")
    wire, spec = _compression_plan(compression)
    plans = [_AllreducePlan(t, op, prescale, postscale, wire, ps_id)
             for t in tensors]
    reduced = _ops().terse_grouped_allreduce(
        [_opaque(p.wire) for p in plans], group_name=group_name,
        tensor_names=list(names), reduce_ops=[p.op for p in plans],
        prescale_factors=[p.prescale for p in plans],
        postscale_factors=[p.postscale for p in plans], compression=spec,
        process_set=ps_id)
    return [p.finish(r) for p, r in zip(plans, reduced)]


class _AllreducePlan:
    """How allreduce() sends one dense tensor through the engine: `wire`
    (the tensor the engine reduces), the engine's op and factors, and
    finish(reduced wire) -> the result.

    fp16 / bf16 compression casts floating-point tensors for the wire, as
    Horovod. Floating point: the engine scales. Integers: Horovod's scaling
    here (Average is the sum times postscale / size, in float64,
    truncated). uint16 travels as int16 bits, sign-flipped for Min / Max so
    that signed order is unsigned order."""

    def __init__(self, tensor, op, prescale, postscale, wire_dtype, ps_id):
        dtype = tensor.dtype
        cast = wire_dtype is not None and dtype in FLOAT_DTYPES
        if cast:
            tensor = tf.cast(tensor, wire_dtype)
        prescale, postscale = float(prescale), float(postscale)
        after = 1.0
        if not (tensor.dtype in FLOAT_DTYPES or
                (op != Average and prescale == 1.0 and postscale == 1.0)):
            if op == Average:
                op = Sum
                postscale /= _set_size(ps_id)
            if prescale != 1.0:
                tensor = _scale_int(tensor, prescale)
            prescale, after, postscale = 1.0, postscale, 1.0
        engine_dtype = tensor.dtype
        flip = engine_dtype == tf.uint16 and op in (Min, Max)
        wire = _to_engine(tensor)
        self.wire = _flip_sign(wire) if flip else wire
        self.op, self.prescale, self.postscale = op, prescale, postscale

        def finish(reduced):
            if flip:
                reduced = _flip_sign(reduced)
            reduced = _from_engine(reduced, engine_dtype)
            if after != 1.0:
                reduced = _scale_int(reduced, after)
            return tf.cast(reduced, dtype) if cast else reduced
        self.finish = finish


def _allreduce_indexed_slices(slices, op, name, prescale, postscale,
                              process_set=None):
    """Horovod's sparse allreduce: gather every rank's values and indices
    (duplicate indices stay; applying them sums). Unlike Horovod, which
    ignores them there, the scale factors apply to the gathered values, and
    Min and Max are refused rather than summed."""
    if op == Adasum:
        raise NotImplementedError(
            "The Adasum reduction does not currently support sparse tensors. "
            "As a workaround please pass sparse_as_dense=True to "
            "DistributedOptimizer")
    if op not in (Sum, Average):
        raise ValueError("IndexedSlices can be reduced with Sum or Average "
                         f"only, not {_OP_NAMES[op]}")
    base = name or _names.default("allreduce", slices.values)
    values = allgather(slices.values, name=f"{base}.values",
                       process_set=process_set)
    indices = allgather(slices.indices, name=f"{base}.indices",
                        process_set=process_set)
    scale = prescale * postscale
    if op == Average:
        scale /= _set_size(check_process_set(process_set))
    if scale != 1.0:
        values = values * tf.cast(scale, values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


def allgather(tensor, name=None, ignore_name_scope=False,
              process_set=None):
    """Every member's `tensor` concatenated along dimension 0, in rank order
    (process_set: None for every rank).

    The first dimension may differ across ranks; the others must agree.
    """
    ps_id = check_process_set(process_set, "allgather()")
    tensor = tf.convert_to_tensor(tensor)
    _check_dtype(tensor, "allgather", MOVED_DTYPES)
    if tensor.shape.rank == 0:
        raise ValueError("terse allgather needs a tensor of rank >= 1, got a "
                         "scalar")
    gathered = _ops().terse_allgather(
        _opaque(_to_engine(tensor)),
        tensor_name=_op_name("allgather", tensor, name), process_set=ps_id)
    return _from_engine(gathered, tensor.dtype)


def broadcast(tensor, root_rank, name=None, ignore_name_scope=False,
              process_set=None):
    """root_rank's `tensor` on every member of process_set (None: every
    rank); root_rank is a world rank in the set. Same shape and dtype
    everywhere."""
    ps_id = check_process_set(process_set, "broadcast()")
    tensor = tf.convert_to_tensor(tensor)
    _check_dtype(tensor, "broadcast", MOVED_DTYPES)
    if isinstance(root_rank, bool) or not isinstance(root_rank, int) \
            or root_rank < 0:
        raise ValueError(f"root_rank must be a rank, not {root_rank!r}")
    out = _ops().terse_broadcast(_opaque(_to_engine(tensor)),
                                 tensor_name=_op_name("broadcast", tensor,
                                                      name),
                                 root_rank=root_rank, process_set=ps_id)
    return _from_engine(out, tensor.dtype)


def _process_info(what, name, process_set_id=0):
    return _ops().terse_process_info(what=what, process_set=process_set_id,
                                     name=name)


def rank_op(name=None):
    """This process's rank as an int32 scalar op, read when it runs."""
    return _process_info("rank", name)


def size_op(process_set_id=0, name=None):
    """The number of ranks (of process set `process_set_id`; 0: every rank)
    as an int32 scalar op, read when it runs."""
    return _process_info("size", name, int(process_set_id))


def process_set_included_op(process_set_id=0, name=None):
    """1 if this process is in process set `process_set_id`, else 0 (an
    int32 scalar op, read when it runs), as Horovod's."""
    return _process_info("included", name, int(process_set_id))


def local_rank_op(name=None):
    """This process's rank on its host as an int32 scalar op."""
    return _process_info("local_rank", name)


def local_size_op(name=None):
    """The number of ranks on this host as an int32 scalar op."""
    return _process_info("local_size", name)


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
    grad = _dense(grad)
    name = op.get_attr("tensor_name").decode() + ".grad"
    spec = op.get_attr("compression").decode()
    return _ops().terse_allreduce(
        _opaque(grad), tensor_name=_names.unique_in_graph(name),
        reduce_op=reduce_op, prescale_factor=op.get_attr("prescale_factor"),
        postscale_factor=op.get_attr("postscale_factor"), compression=spec,
        process_set=op.get_attr("process_set"))


@tf.RegisterGradient("TerseGroupedAllreduce")
def _grouped_allreduce_grad(op, *grads):
    """Each output is its input's allreduce (see _allreduce_grad): the
    gradients are the grouped allreduce of the upstream gradients, with the
    same ops and factors."""
    reduce_ops = op.get_attr("reduce_ops")
    for reduce_op in reduce_ops:
        if reduce_op not in (Sum, Average):
            raise LookupError(
                f"terse grouped allreduce with "
                f"{_OP_NAMES.get(reduce_op, reduce_op)} has no gradient; use "
                "Sum or Average")
    group = _names.unique_in_graph(op.get_attr("group_name").decode() +
                                   ".grad")
    names = [f"{group}.{i}" for i in range(len(grads))]
    return _ops().terse_grouped_allreduce(
        [_opaque(_dense(_grad_or_zeros(op, i, g)))
         for i, g in enumerate(grads)], group_name=group,
        tensor_names=names, reduce_ops=reduce_ops,
        prescale_factors=op.get_attr("prescale_factors"),
        postscale_factors=op.get_attr("postscale_factors"),
        compression=op.get_attr("compression").decode(),
        process_set=op.get_attr("process_set"))


class _Member:
    """Member i of a grouped op (TerseGrouped*), seen as the single op it
    groups, so that the single op's gradient can be reused for it."""

    _LISTS = {"tensor_name": "tensor_names", "reduce_op": "reduce_ops",
              "prescale_factor": "prescale_factors",
              "postscale_factor": "postscale_factors"}

    def __init__(self, op, i):
        self._op, self._i = op, i
        self.inputs = [op.inputs[i]]
        self.outputs = [op.outputs[i]]

    def get_attr(self, name):
        if name in self._LISTS:
            return self._op.get_attr(self._LISTS[name])[self._i]
        return self._op.get_attr(name)


def _grad_or_zeros(op, i, grad):
    """The upstream gradient of output i, zeros where none flows back (every
    rank must still take part in the gradient's collective)."""
    return tf.zeros_like(op.outputs[i]) if grad is None else grad


@tf.RegisterGradient("TerseGroupedAllgather")
def _grouped_allgather_grad(op, *grads):
    """Each member's gradient, as a single allgather's (_allgather_grad)."""
    return [_allgather_grad(_Member(op, i), _grad_or_zeros(op, i, g))
            for i, g in enumerate(grads)]


def _dense(grad):
    """An upstream gradient as a dense tensor: a tf.gather downstream (e.g.
    alltoall's row selection) hands back IndexedSlices, which every rank
    must reduce with the same shape."""
    if isinstance(grad, tf.IndexedSlices):
        return tf.convert_to_tensor(grad)
    return grad


def _rank_tensor(ps_id=0):
    """This rank (within process set `ps_id`) as a run-time int32 scalar
    (see _opaque): the gradients differ by rank only in its value, so every
    rank builds the same graph and none has a collective optimized away."""
    from terse import process_sets
    return _opaque(tf.constant(process_sets.rank_in(ps_id), tf.int32))


def _by_id(ps_id):
    """The registered ProcessSet of id `ps_id` (None for 0)."""
    if ps_id == 0:
        return None
    from terse import process_sets
    return process_sets.registered(ps_id)


@tf.RegisterGradient("TerseAllgather")
def _allgather_grad(op, grad):
    """The sum over ranks of the gathered gradient, this rank's rows.

    Both collectives are graph ops that run with the step; this rank's
    first row is the sum of the lower ranks' row counts, picked at run time
    (see _rank_tensor) so no rank's graph loses the row-count allgather.
    """
    name = op.get_attr("tensor_name").decode()
    ps_id = op.get_attr("process_set")
    ps = _by_id(ps_id)
    grad = allreduce(_dense(grad), op=Sum, name=f"{name}.grad",
                     process_set=ps)
    rows = tf.shape(op.inputs[0], out_type=tf.int64)[:1]
    all_rows = allgather(rows, name=f"{name}.grad.rows", process_set=ps)
    begin = tf.gather(tf.cumsum(all_rows, exclusive=True),
                      tf.cast(_rank_tensor(ps_id), tf.int64))
    return grad[begin:begin + rows[0]]


@tf.RegisterGradient("TerseBroadcast")
def _broadcast_grad(op, grad):
    """The root's input feeds every rank's output; the others feed nothing.

    Every rank joins the allreduce and keeps its result only on the root;
    the choice is made at run time (see _rank_tensor), so the allreduce is
    never pruned from a non-root rank's graph.
    """
    name = op.get_attr("tensor_name").decode()
    grad = allreduce(_dense(grad), op=Sum, name=f"{name}.grad",
                     process_set=_by_id(op.get_attr("process_set")))
    # root_rank is a world rank: compare with this world rank.
    is_root = tf.equal(_opaque(tf.constant(basics.rank(), tf.int32)),
                       op.get_attr("root_rank"))
    return tf.where(is_root, grad, tf.zeros_like(grad))
