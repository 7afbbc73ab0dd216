"""horovod.torch 0.28.1's API in terse.torch, under mpirun (2 and 4 ranks).

Every rank's input is a function of (rank, case), so each rank builds every
other rank's tensor and computes the reference itself: numpy / float64 for
reductions, a numpy implementation of Adasum's pairwise tree, plain slicing
for reducescatter and alltoall, a single-process torch BatchNorm over the
global batch for SyncBatchNorm.
"""

import json
import os
import pickle
import tempfile

import numpy as np
import torch

import terse.torch as hvd
from mpi_testlib import expect, expect_raises, run

INTS = [torch.int32, torch.int64, torch.uint8, torch.int8, torch.int16]
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def rank_ints(rank, dtype, n, case):
    g = torch.Generator().manual_seed(100 * case + rank)
    low = 0 if dtype == torch.uint8 else -9
    return torch.randint(low, 10, (n,), generator=g).to(dtype)


def rank_floats(rank, n, case):
    return np.random.default_rng(1000 * case + rank).standard_normal(n)


# --- introspection ---------------------------------------------------------------

def test_introspection(_):
    size, rank = hvd.size(), hvd.rank()
    # mpirun on one host: one cross group per local rank, all on one host.
    expect(hvd.local_size() == size, "all ranks on this host")
    expect(hvd.cross_size() == 1 and hvd.cross_rank() == 0,
           f"cross {hvd.cross_rank()}/{hvd.cross_size()}")
    expect(hvd.is_homogeneous() is True, "homogeneous")
    layout = hvd.allgather_object((hvd.local_rank(), hvd.local_size()))
    expect(sorted(l for l, _ in layout) == list(range(size)), str(layout))
    expect(hvd.mpi_built() and hvd.mpi_enabled(), "mpi")
    expect(isinstance(hvd.mpi_threads_supported(), bool), "threads")
    for fn in (hvd.gloo_built, hvd.gloo_enabled, hvd.rocm_built,
               hvd.ddl_built, hvd.ccl_built):
        expect(fn() is False, fn.__name__)
    expect(isinstance(hvd.nccl_built(), int), "nccl_built is a version")
    expect(isinstance(hvd.cuda_built(), bool), "cuda_built")
    expect(hvd.HorovodInternalError is hvd.TerseError, "alias")
    expect(rank == hvd.global_process_set.rank(), "global set rank")


# Every public name of horovod.torch 0.28.1 (dir() of the package, taken
# from the Horovod 0.28.1 that bench/peers/horovod.sh builds), except
# mpi_lib_v2, Horovod's own extension module.
HOROVOD_TORCH_NAMES = [
    "Adasum", "Average", "Compression", "DistributedOptimizer",
    "HorovodInternalError", "Max", "Min", "ProcessSet", "Product", "Sum",
    "SyncBatchNorm", "add_process_set", "allgather", "allgather_async",
    "allgather_object", "allreduce", "allreduce_", "allreduce_async",
    "allreduce_async_", "alltoall", "alltoall_async", "barrier", "broadcast",
    "broadcast_", "broadcast_async", "broadcast_async_", "broadcast_object",
    "broadcast_optimizer_state", "broadcast_parameters", "ccl_built",
    "check_extension", "compression", "cross_rank", "cross_size",
    "cuda_built", "ddl_built", "elastic", "functions", "global_process_set",
    "gloo_built", "gloo_enabled", "grouped_allgather",
    "grouped_allgather_async", "grouped_allreduce", "grouped_allreduce_",
    "grouped_allreduce_async", "grouped_allreduce_async_",
    "grouped_reducescatter", "grouped_reducescatter_async", "init",
    "is_initialized", "join", "local_rank", "local_size", "mpi_built",
    "mpi_enabled", "mpi_ops", "mpi_threads_supported", "nccl_built",
    "optimizer", "poll", "rank", "reducescatter", "reducescatter_async",
    "remove_process_set", "rocm_built", "shutdown", "size",
    "sparse_allreduce_async", "start_timeline", "stop_timeline",
    "sync_batch_norm", "synchronize"
]


def test_every_horovod_torch_name_exists(_):
    missing = [n for n in HOROVOD_TORCH_NAMES if not hasattr(hvd, n)]
    expect(not missing, f"horovod.torch names missing in terse.torch: "
           f"{missing}")
    # The module forms Horovod's users import from.
    from terse.torch import mpi_ops
    from terse.torch.compression import (Compression, Compressor,
                                         FP16Compressor, NoneCompressor)
    expect(mpi_ops.allreduce_async_ is hvd.allreduce_async_ and
           mpi_ops.grouped_allreduce is hvd.grouped_allreduce and
           mpi_ops.Sum == hvd.Sum, "mpi_ops names are terse.torch's")
    expect(Compression is hvd.Compression and
           isinstance(Compression.fp16, FP16Compressor) and
           isinstance(Compression.none, NoneCompressor) and
           issubclass(FP16Compressor, Compressor), "compression module")
    expect([mpi_ops.num_rank_is_power_2(n) for n in (0, 1, 2, 6, 8)] ==
           [False, True, True, False, True], "num_rank_is_power_2")
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        op = mpi_ops.handle_average_backwards_compatibility(None, False)
    expect(op == hvd.Sum and any(issubclass(w.category, DeprecationWarning)
                                 for w in caught),
           "average=False is Sum, with Horovod's deprecation warning")
    expect(mpi_ops.handle_average_backwards_compatibility(None, None) ==
           hvd.Average, "neither: Average")
    expect(isinstance(mpi_ops.gpu_available("torch"), bool), "gpu_available")


def test_check_extension(_):
    # Horovod's own call, as horovod/torch/__init__.py makes it: the
    # extension loads, so nothing is raised.
    expect(hvd.check_extension("horovod.torch", "HOROVOD_WITH_PYTORCH",
                               __file__, "mpi_lib_v2") is None,
           "check_extension of a loaded extension")
    # One that does not load: ImportError naming the extension.
    import terse.basics as basics

    def missing():
        raise ImportError("no _terse here")
    loaded, basics.lib = basics.lib, missing
    try:
        expect_raises(ImportError, ["Extension horovod.torch has not been "
                                    "built", "no _terse here"],
                      hvd.check_extension, "horovod.torch",
                      "HOROVOD_WITH_PYTORCH", __file__)
    finally:
        basics.lib = loaded


def test_timeline_starts_and_stops_at_runtime(_):
    rank = hvd.rank()
    directory = tempfile.mkdtemp(prefix=f"terse_tl_{rank}_")
    hvd.stop_timeline()  # No timeline: nothing to stop.
    for attempt in range(2):  # Started again after a stop.
        path = os.path.join(directory, f"tl{attempt}.{{rank}}.json")
        hvd.start_timeline(path)
        expect_raises(hvd.TerseError, ["already"], hvd.start_timeline, path)
        hvd.allreduce(torch.ones(8), name=f"timeline.{attempt}", op=hvd.Sum)
        hvd.barrier()
        hvd.stop_timeline()
        with open(path.replace("{rank}", str(rank))) as f:
            events = json.load(f)  # A complete JSON document.
        expect(any(e.get("args", {}).get("name") == f"terse rank {rank}"
                   for e in events), "process name")
        expect(any(e.get("name") == "COMMUNICATE" for e in events),
               f"a COMMUNICATE event in {len(events)} events")
    expect_raises(hvd.TerseError, ["mark_cycles"], hvd.start_timeline,
                  os.path.join(directory, "x.json"), mark_cycles=True)


# --- reductions --------------------------------------------------------------------

def test_product_every_dtype(_):
    for case, dtype in enumerate(INTS + FLOATS):
        if dtype in INTS:
            inputs = [rank_ints(r, dtype, 37, case) for r in range(hvd.size())]
            want = inputs[0].clone()
            for x in inputs[1:]:
                want = want * x  # torch wraps like terse.
        else:  # Powers of two: exact products in every dtype.
            inputs = [torch.from_numpy(np.ldexp(
                np.sign(rank_floats(r, 37, case)),
                (np.abs(rank_floats(r, 37, case + 50) * 2).astype(int) % 3)
                - 1)).to(dtype) for r in range(hvd.size())]
            want = torch.stack([x.double() for x in inputs]).prod(0)
        got = hvd.allreduce(inputs[hvd.rank()], name=f"prod.{dtype}",
                            op=hvd.Product)
        expect(got.dtype == dtype, f"{dtype}")
        expect(torch.equal(got.double(), want.double()),
               f"product {dtype}: {got[:6].tolist()} vs {want[:6].tolist()}")


def test_integer_average_and_scaling_as_horovod(_):
    size = hvd.size()
    for case, dtype in enumerate(INTS):
        inputs = [rank_ints(r, dtype, 50, 10 + case) for r in range(size)]
        mine = inputs[hvd.rank()]
        wrapped_sum = torch.stack(inputs).sum(0, dtype=dtype)
        got = hvd.allreduce(mine, name=f"iavg.{dtype}", op=hvd.Average)
        want = np.trunc(wrapped_sum.double().numpy() / size)
        expect(np.array_equal(got.double().numpy(), want),
               f"{dtype} average {got[:6].tolist()} vs {want[:6]}")
        got = hvd.allreduce(mine, name=f"iscale.{dtype}", op=hvd.Sum,
                            prescale_factor=1.5, postscale_factor=0.5)
        pre = [np.trunc(x.double().numpy() * 1.5).astype(
            mine.numpy().dtype) for x in inputs]
        summed = np.sum(pre, axis=0, dtype=mine.numpy().dtype)
        want = np.trunc(summed.astype(np.float64) * 0.5)
        expect(np.array_equal(got.double().numpy(), want), f"{dtype} scaled")


def test_min_max_product_with_factors(_):
    inputs = [rank_floats(r, 20, 30) for r in range(hvd.size())]
    mine = torch.from_numpy(inputs[hvd.rank()])
    for op, fn in ((hvd.Min, np.min), (hvd.Max, np.max)):
        got = hvd.allreduce(mine, name=f"mmf.{op}", op=op,
                            prescale_factor=-2.0, postscale_factor=3.0)
        want = fn(np.stack([x * -2.0 for x in inputs]), 0) * 3.0
        expect(np.allclose(got.numpy(), want, rtol=1e-12), f"op {op}")


def adasum_reference(vectors):
    """Adasum's tree in numpy: pairs (0,1), (2,3), ..., then pairs of those."""
    level = [np.asarray(v, dtype=np.float64) for v in vectors]
    while len(level) > 1:
        nxt = []
        for a, b in zip(level[0::2], level[1::2]):
            dot, na, nb = a @ b, a @ a, b @ b
            ca = 1 - dot / (2 * na) if na >= 1e-8 else 1.0
            cb = 1 - dot / (2 * nb) if nb >= 1e-8 else 1.0
            nxt.append(ca * a + cb * b)
        level = nxt
    return level[0]


def test_adasum_matches_numpy_tree(_):
    size = hvd.size()
    shape = (3, 7)
    inputs = [rank_floats(r, 21, 40).reshape(shape) for r in range(size)]
    # Orthogonal inputs add, parallel ones average: both show in the tree.
    want = adasum_reference([x.ravel() for x in inputs]).reshape(shape)
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 1e-5),
                       (torch.float16, 2e-2)):
        mine = torch.from_numpy(inputs[hvd.rank()]).to(dtype)
        got = hvd.allreduce(mine, name=f"adasum.{dtype}", op=hvd.Adasum)
        expect(got.dtype == dtype and got.shape == shape, "shape/dtype")
        expect(np.allclose(got.double().numpy(), want, rtol=tol, atol=tol),
               f"adasum {dtype}: {np.abs(got.double().numpy() - want).max()}")
        inplace = mine.clone()
        hvd.allreduce_(inplace, name=f"adasum_.{dtype}", op=hvd.Adasum)
        expect(torch.equal(inplace, got), "in place equals out of place")
    # Enqueued together, two Adasum tensors are still reduced each alone
    # (fused, the dot products would mix them).
    others = [rank_floats(r, 9, 41) for r in range(size)]
    want_other = adasum_reference(others)
    h1 = hvd.allreduce_async(torch.from_numpy(inputs[hvd.rank()]),
                             name="adasum.pair.1", op=hvd.Adasum)
    h2 = hvd.allreduce_async(torch.from_numpy(others[hvd.rank()]),
                             name="adasum.pair.2", op=hvd.Adasum)
    expect(np.allclose(hvd.synchronize(h1).numpy(), want, atol=1e-12) and
           np.allclose(hvd.synchronize(h2).numpy(), want_other, atol=1e-12),
           "two Adasum tensors in flight: each its own tree")
    same = torch.ones(5, dtype=torch.float64)
    expect(torch.allclose(hvd.allreduce(same, name="adasum.same",
                                        op=hvd.Adasum), same),
           "identical vectors: Adasum is their value")
    expect_raises(ValueError, ["Adasum", "compression"], hvd.allreduce,
                  torch.ones(3), name="adasum.c", op=hvd.Adasum,
                  compression=hvd.Compression.fp16)
    expect_raises(hvd.TerseError, ["Adasum", "floating"], hvd.allreduce,
                  torch.ones(3, dtype=torch.int32), name="adasum.i",
                  op=hvd.Adasum)


# --- grouped ops, reducescatter, alltoall ----------------------------------------------

def test_grouped_ops(_):
    size, rank = hvd.size(), hvd.rank()
    shapes = [(4,), (2, 3), (5, 1)]
    inputs = [[torch.from_numpy(rank_floats(r, int(np.prod(s)), 50 + i))
               .reshape(s) for i, s in enumerate(shapes)] for r in range(size)]
    mine = inputs[rank]
    got = hvd.grouped_allreduce(mine, name="g.ar", op=hvd.Sum)
    for i in range(len(shapes)):
        want = sum(inputs[r][i] for r in range(size))
        expect(torch.allclose(got[i], want), f"grouped allreduce {i}")
    handle = hvd.grouped_allreduce_async_([t.clone() for t in mine],
                                          name="g.ar_", op=hvd.Average)
    expect(isinstance(hvd.poll(handle), bool), "poll a composed handle")
    for i, t in enumerate(hvd.synchronize(handle)):
        want = sum(inputs[r][i] for r in range(size)) / size
        expect(torch.allclose(t, want), f"grouped allreduce_ {i}")
    gathered = hvd.grouped_allgather([m[: rank + 1] for m in mine],
                                     name="g.ag")
    for i in range(len(shapes)):
        want = torch.cat([inputs[r][i][: r + 1] for r in range(size)])
        expect(torch.equal(gathered[i], want), f"grouped allgather {i}")
    # The group is one engine group: a member whose shape differs on the
    # last rank fails every member on every rank, naming the ranks.
    if size > 1:
        odd = size - 1
        bad = [torch.ones(4), torch.ones(5 if rank == odd else 4),
               torch.ones(3)]
        others = ",".join(str(r) for r in range(odd))
        expect_raises(hvd.TerseError,
                      ["its group 'g.bad' failed",
                       f"shape [4] on rank{'s' if odd > 1 else ''} {others} "
                       f"but [5] on rank {odd}"],
                      hvd.grouped_allreduce, bad, name="g.bad")
        # The engine goes on: the same group, now alike everywhere.
        again = hvd.grouped_allreduce([torch.ones(4), torch.ones(4)],
                                      name="g.bad", op=hvd.Sum)
        expect(all(torch.equal(t, torch.full((4,), float(size)))
                   for t in again), "group after a failed one")


def test_reducescatter_rows_as_horovod(_):
    size, rank = hvd.size(), hvd.rank()
    for rows in (size * 2, size * 2 + 1, 1):
        inputs = [torch.from_numpy(rank_floats(r, rows * 3, 60 + rows))
                  .reshape(rows, 3) for r in range(size)]
        total = sum(inputs)
        base, extra = divmod(rows, size)
        counts = [base + (1 if r < extra else 0) for r in range(size)]
        start = sum(counts[:rank])
        got = hvd.reducescatter(inputs[rank], name=f"rs.{rows}", op=hvd.Sum)
        expect(got.shape == (counts[rank], 3), f"shape {tuple(got.shape)}")
        expect(torch.allclose(got, total[start:start + counts[rank]]),
               f"reducescatter rows={rows}")
        avg = hvd.reducescatter(inputs[rank], name=f"rs.avg.{rows}")
        expect(torch.allclose(avg, total[start:start + counts[rank]] / size),
               "reducescatter default op is Average")
    grouped = hvd.grouped_reducescatter([inputs[rank], inputs[rank] * 2],
                                        name="g.rs", op=hvd.Sum)
    expect(torch.allclose(grouped[1], 2 * grouped[0]), "grouped reducescatter")
    expect_raises(hvd.TerseError, ["reducescatter", "Max"], hvd.reducescatter,
                  torch.ones(4), name="rs.max", op=hvd.Max)


def test_reducescatter_dtypes_scales_and_compression(_):
    """Native reducescatter: integer Average truncates as Horovod's
    (computed in double around an engine Sum), float factors, and a
    compressed reducescatter (an allreduce through the compressor) agree
    with the reduction computed here from every rank's input."""
    size, rank = hvd.size(), hvd.rank()
    rows = 2 * size + 1
    base, extra = divmod(rows, size)
    counts = [base + (1 if r < extra else 0) for r in range(size)]
    start, n = sum(counts[:rank]), counts[rank]
    ints = [torch.arange(rows * 2, dtype=torch.int32).reshape(rows, 2) * (r + 1)
            for r in range(size)]
    total = sum(t.to(torch.float64) for t in ints)
    got = hvd.reducescatter(ints[rank], name="rs.int.avg")
    want = (total[start:start + n] / size).to(torch.int32)
    expect(got.dtype == torch.int32 and torch.equal(got, want),
           f"integer Average {got} != {want}")
    got = hvd.reducescatter(ints[rank], name="rs.int.scaled", op=hvd.Sum,
                            prescale_factor=2.0, postscale_factor=0.5)
    expect(torch.equal(got, total[start:start + n].to(torch.int32)),
           f"integer factors {got}")
    floats = [t.to(torch.float64) for t in ints]
    got = hvd.reducescatter(floats[rank], name="rs.f64.scaled", op=hvd.Average,
                            prescale_factor=3.0, postscale_factor=0.25)
    expect(torch.allclose(got, total[start:start + n] * 3.0 * 0.25 / size),
           f"float factors {got}")
    halves = [(t.to(torch.float32) / 8) for t in ints]
    got = hvd.reducescatter(halves[rank], name="rs.fp16", op=hvd.Sum,
                            compression=hvd.Compression.fp16)
    expect(torch.allclose(got, sum(halves)[start:start + n], rtol=1e-2),
           f"fp16-compressed reducescatter {got}")


def test_alltoall_splits_as_horovod(_):
    size, rank = hvd.size(), hvd.rank()

    def splits_of(r):
        return [(r + k) % 3 for k in range(size)]

    def data_of(r):
        n = sum(splits_of(r))
        return (torch.arange(n * 2, dtype=torch.float32).reshape(n, 2)
                + 1000 * r)
    out, received = hvd.alltoall(data_of(rank), splits=splits_of(rank),
                                 name="a2a")
    pieces = []
    for r in range(size):
        s = splits_of(r)
        pieces.append(data_of(r)[sum(s[:rank]):sum(s[:rank + 1])])
    expect(torch.equal(out, torch.cat(pieces)), "alltoall rows")
    expect(received.dtype == torch.int32 and received.tolist() ==
           [splits_of(r)[rank] for r in range(size)], f"received {received}")
    even = torch.arange(size * 2, dtype=torch.int64) + 100 * rank
    got = hvd.alltoall(even, name="a2a.even")
    expect(isinstance(got, torch.Tensor), "no splits: one tensor returned")
    expect(got.tolist() == [100 * r + 2 * rank + k for r in range(size)
                            for k in range(2)], f"even alltoall {got}")
    expect_raises(hvd.TerseError, ["splits"], hvd.alltoall, torch.ones(3),
                  splits=[1] * (size + 1), name="a2a.bad")
    # Splits that only the last rank gets wrong fail the alltoall on every
    # rank (no rank waits for it), naming that rank and the reason.
    wrong = size - 1
    mine = [size] + [0] * (size - 1) if rank == wrong else [1] * size
    x = torch.ones(size + (1 if rank == wrong else 0), 2)
    expect_raises(hvd.TerseError,
                  [f"tensor 'a2a.one_bad': rank {wrong} refused it: splits "
                   f"sum to {size}, the first dimension of the tensor is "
                   f"{size + 1}"],
                  hvd.alltoall, x, splits=mine, name="a2a.one_bad")
    if size > 1:
        expect_raises(hvd.TerseError, ["divisible"], hvd.alltoall,
                      torch.ones(size + 1), name="a2a.odd")


def test_autograd(_):
    size, rank = hvd.size(), hvd.rank()
    x = torch.full((3,), float(rank + 1), requires_grad=True)
    hvd.allreduce(x, name="ag.ar", op=hvd.Sum).sum().backward()
    expect(torch.equal(x.grad, torch.full((3,), float(size))), "allreduce")
    y = torch.ones(rank + 1, 2, requires_grad=True)
    (hvd.allgather(y, name="ag.ag") * 2).sum().backward()
    expect(torch.equal(y.grad, torch.full((rank + 1, 2), 2.0 * size)),
           "allgather grad: this rank's rows of the summed gradient")
    z = torch.ones(4, requires_grad=True)
    hvd.broadcast(z, 0, name="ag.bc").sum().backward()
    want = float(size) if rank == 0 else 0.0
    expect(torch.equal(z.grad, torch.full((4,), want)), "broadcast grad")
    w = torch.ones(size * 2, requires_grad=True)
    hvd.reducescatter(w, name="ag.rs", op=hvd.Sum).sum().backward()
    expect(torch.equal(w.grad, torch.ones(size * 2)), "reducescatter grad")
    v = torch.arange(size, dtype=torch.float32, requires_grad=True)
    out = hvd.alltoall(v, name="ag.a2a")
    (out * (rank + 1)).sum().backward()
    expect(torch.equal(v.grad, torch.arange(1, size + 1).float()),
           f"alltoall grad {v.grad}")


# --- objects, sparse, batch norm, process sets --------------------------------------------

def test_objects_pickle_loadable_by_plain_pickle(_):
    obj = {"rank": hvd.rank(), "t": torch.arange(3), "s": "x" * hvd.rank()}
    got = hvd.broadcast_object(obj if hvd.rank() == 1 % hvd.size() else None,
                               root_rank=1 % hvd.size())
    expect(got["rank"] == 1 % hvd.size() and torch.equal(got["t"],
                                                         torch.arange(3)),
           f"broadcast_object {got}")
    everyone = hvd.allgather_object(obj)
    expect([o["rank"] for o in everyone] == list(range(hvd.size())),
           "allgather_object order")
    from terse.torch import functions
    data = functions._dumps(obj)
    expect(pickle.loads(data)["s"] == obj["s"], "plain pickle loads it")
    expect(torch.load.__name__ and isinstance(data, bytes), "bytes")


def test_sparse_allreduce(_):
    size, rank = hvd.size(), hvd.rank()
    idx = torch.tensor([[rank % 3, 4]])
    val = torch.tensor([1.0 + rank, 2.0])
    sp = torch.sparse_coo_tensor(idx, val, (6,))
    handle = hvd.sparse_allreduce_async(sp, name="sparse", op=hvd.Sum)
    got = hvd.synchronize(handle).to_dense()
    want = sum(torch.sparse_coo_tensor(torch.tensor([[r % 3, 4]]),
                                       torch.tensor([1.0 + r, 2.0]),
                                       (6,)).to_dense() for r in range(size))
    expect(torch.equal(got, want), f"sparse {got} vs {want}")


def test_sync_batch_norm_equals_global_batch_norm(_):
    size, rank = hvd.size(), hvd.rank()
    torch.manual_seed(5)
    full = torch.randn(size * 3, 4, 5, dtype=torch.float64)
    grad_out = torch.randn(size * 3, 4, 5, dtype=torch.float64)
    ref = torch.nn.BatchNorm1d(4).double()
    with torch.no_grad():
        ref.weight.copy_(torch.linspace(0.5, 2.0, 4))
        ref.bias.copy_(torch.linspace(-1.0, 1.0, 4))
    sync = hvd.SyncBatchNorm(4).double()
    sync.load_state_dict(ref.state_dict())
    x_full = full.clone().requires_grad_(True)
    y_full = ref(x_full)
    (y_full * grad_out).sum().backward()
    part = slice(3 * rank, 3 * rank + 3)
    x = full[part].clone().requires_grad_(True)
    y = sync(x)
    (y * grad_out[part]).sum().backward()
    expect(torch.allclose(y, y_full[part], atol=1e-10), "forward")
    expect(torch.allclose(x.grad, x_full.grad[part], atol=1e-10),
           "input gradient")
    expect(torch.allclose(sync.running_mean, ref.running_mean, atol=1e-12)
           and torch.allclose(sync.running_var, ref.running_var, atol=1e-12),
           "running statistics")
    wsum = hvd.allreduce(sync.weight.grad, name="sbn.w", op=hvd.Sum)
    expect(torch.allclose(wsum, ref.weight.grad, atol=1e-10),
           "weight gradient summed over ranks")
    sync.eval()
    ref.eval()
    expect(torch.allclose(sync(full[part]), ref(full[part])), "eval mode")


def test_process_sets(_):
    gps = hvd.global_process_set
    expect(gps.size() == hvd.size() and gps.included(), "global set")
    expect(hvd.ProcessSet(range(hvd.size())) == gps, "all ranks == global")
    out = hvd.allreduce(torch.ones(2), name="ps.g", op=hvd.Sum,
                        process_set=gps)
    expect(torch.equal(out, torch.full((2,), float(hvd.size()))), "global")
    # A set never registered (tests/python/process_sets_test.py covers
    # registered ones): a ValueError naming it, on every op.
    sub = hvd.ProcessSet([0])
    for fn, args in ((hvd.allreduce, (torch.ones(2),)),
                     (hvd.allgather, (torch.ones(2),)),
                     (hvd.broadcast, (torch.ones(2), 0))):
        expect_raises(ValueError, ["process set [0] is not registered"], fn,
                      *args, process_set=sub)
    # Without TERSE_DYNAMIC_PROCESS_SETS=1, Horovod's error.
    expect_raises(ValueError, ["TERSE_DYNAMIC_PROCESS_SETS=1"],
                  hvd.add_process_set, [0])
    expect(hvd.remove_process_set(gps) is False, "global is not removed")


# --- DistributedOptimizer's remaining arguments ---------------------------------------

def _rank_batch(r):
    g = torch.Generator().manual_seed(900 + r)
    return torch.randn(6, 4, generator=g, dtype=torch.float64), torch.randn(
        6, 2, generator=g, dtype=torch.float64)


def _model():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(),
                               torch.nn.Linear(3, 2)).double()


def _grads(model, r):
    model.zero_grad()
    x, y = _rank_batch(r)
    torch.nn.functional.mse_loss(model(x), y).backward()
    return [p.grad.clone() for p in model.parameters()]


def test_optimizer_groups_match_averaged_gradients(_):
    size, rank = hvd.size(), hvd.rank()
    ref = _model()
    per_rank = [_grads(ref, r) for r in range(size)]
    mean = [sum(g[i] for g in per_rank) / size for i in range(4)]
    start = [p.detach().clone() for p in ref.parameters()]
    for label, kwargs in (("num_groups", {"num_groups": 2}),
                          ("groups", None)):
        model = _model()
        params = list(model.parameters())
        if kwargs is None:
            kwargs = {"groups": [[params[0], params[3]], [params[1]]]}
        opt = hvd.DistributedOptimizer(
            torch.optim.SGD(model.parameters(), lr=0.5),
            named_parameters=model.named_parameters(), op=hvd.Average,
            **kwargs)
        x, y = _rank_batch(rank)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        for p, s0, g in zip(model.parameters(), start, mean):
            expect(torch.allclose(p, s0 - 0.5 * g, atol=1e-12), label)
    expect_raises(ValueError, ["num_groups or groups"],
                  hvd.DistributedOptimizer,
                  torch.optim.SGD(_model().parameters(), lr=0.1),
                  num_groups=2, groups=[[]])


def test_optimizer_sparse_gradients(_):
    size, rank = hvd.size(), hvd.rank()
    for sparse_as_dense in (False, True):
        torch.manual_seed(1)
        emb = torch.nn.Embedding(10, 3, sparse=True).double()
        start = emb.weight.detach().clone()
        opt = hvd.DistributedOptimizer(
            torch.optim.SGD(emb.parameters(), lr=1.0),
            named_parameters=emb.named_parameters(),
            sparse_as_dense=sparse_as_dense)
        ids = torch.tensor([rank % 10, (rank + 3) % 10, 7])
        emb(ids).sum().backward()
        opt.step()
        want = start.clone()
        for r in range(size):
            for i in (r % 10, (r + 3) % 10, 7):
                want[i] -= 1.0 / size
        expect(torch.allclose(emb.weight, want, atol=1e-12),
               f"sparse_as_dense={sparse_as_dense}")


def test_optimizer_adasum_combines_deltas(_):
    size, rank = hvd.size(), hvd.rank()
    ref = _model()
    start = [p.detach().clone() for p in ref.parameters()]
    per_rank = [_grads(ref, r) for r in range(size)]
    model = _model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(),
                                                   lr=0.1),
                                   named_parameters=model.named_parameters(),
                                   op=hvd.Adasum)
    x, y = _rank_batch(rank)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    for i, p in enumerate(model.parameters()):
        deltas = [(-0.1 * g[i]).numpy().ravel() for g in per_rank]
        want = start[i].numpy() + adasum_reference(deltas).reshape(
            start[i].shape)
        expect(np.allclose(p.detach().numpy(), want, atol=1e-12),
               f"Adasum optimizer parameter {i}")
    expect_raises(ValueError, ["Adasum", "compression"],
                  hvd.DistributedOptimizer,
                  torch.optim.SGD(_model().parameters(), lr=0.1),
                  op=hvd.Adasum, compression=hvd.Compression.fp16)
    expect_raises(ValueError, ["not registered"],
                  hvd.DistributedOptimizer,
                  torch.optim.SGD(_model().parameters(), lr=0.1),
                  process_set=hvd.ProcessSet([0]))


def setup():
    hvd.init()
    return "initialised"  # mpi_testlib passes a non-None context.


if __name__ == "__main__":
    run(globals(), setup=setup)
