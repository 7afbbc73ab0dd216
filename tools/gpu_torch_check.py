#!/usr/bin/env python3
"""terse.torch on CUDA tensors, each result against a closed form.

Run under mpirun by tools/gpu_check.sh on a machine with a GPU and a CUDA
PyTorch: 1 rank over NCCL, and 2 ranks sharing GPU 0 with
TERSE_GPU_OPERATIONS=mpi (NCCL refuses two ranks on one device); the
process-set check runs with 2 ranks or more. Every rank
prints `PASS name` or `FAIL name: why` per check and exits non-zero if any
failed. Without a CUDA device it prints "skipped: no device" and exits 77.

The expected values are exact in every dtype used (small integers), except
the training step (fp32 sums in another order: 1e-5) and PowerSGD (a rank-1
matrix recovered by a rank-1 sketch: 1e-3 of the largest entry).
"""
import os
import sys
import time
import traceback

import torch

if not torch.cuda.is_available():
    print("skipped: no device (torch.cuda.is_available() is False)")
    sys.exit(77)

import terse.torch as hvd  # noqa: E402  (after the device check)

hvd.init(process_sets="dynamic")  # process_sets_on_cuda adds sets
RANK, SIZE = hvd.rank(), hvd.size()
DEV = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
torch.cuda.set_device(DEV)
FAILED = []


def check(name, fn):
    try:
        why = fn()
    except Exception as e:  # a check's error is its failure, not the run's
        why = f"{type(e).__name__}: {e}"
        traceback.print_exc()
    if why:
        FAILED.append(name)
        print(f"rank {RANK}: FAIL {name}: {why}", flush=True)
    else:
        print(f"rank {RANK}: PASS {name}", flush=True)


def expect_all(t, value, what):
    if not t.is_cuda:
        return f"{what}: result is on {t.device}, not CUDA"
    got = t.double()
    if not bool((got == value).all()):
        bad = got[got != value]
        return f"{what}: want {value}, got {bad[:4].tolist()} ({bad.numel()} entries differ)"
    return None


TRIANGLE = SIZE * (SIZE + 1) / 2  # sum over ranks of (rank + 1)


def allreduce_dtypes():
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        x = torch.full((1000,), RANK + 1.0, dtype=dtype, device=DEV)
        why = (expect_all(hvd.allreduce(x, name=f"sum.{dtype}", op=hvd.Sum),
                          TRIANGLE, f"Sum {dtype}")
               or expect_all(hvd.allreduce(x, name=f"avg.{dtype}"),
                             TRIANGLE / SIZE, f"Average {dtype}"))
        if why:
            return why
    return None


def allreduce_inplace_async():
    xs = [torch.full((4096 + i,), RANK + 1.0, device=DEV) for i in range(8)]
    handles = [hvd.allreduce_async_(x, name=f"inplace.{i}", op=hvd.Sum)
               for i, x in enumerate(xs)]
    for h in handles:
        hvd.synchronize(h)
    for x in xs:
        why = expect_all(x, TRIANGLE, "allreduce_async_")
        if why:
            return why
    return None


def producer_ordering():
    # The tensor's value is written by kernels still queued on the current
    # stream when allreduce is called: a missing stream wait reads zeros or
    # a half-written buffer.
    a = torch.randn(2048, 2048, device=DEV)
    for stream_kind in ("current", "side"):
        stream = (torch.cuda.current_stream() if stream_kind == "current"
                  else torch.cuda.Stream(device=DEV))
        with torch.cuda.stream(stream):
            z = torch.zeros(1 << 24, device=DEV)
            for _ in range(20):  # ~ms of queued work before the write
                a = a @ a / 2048.0
            z.add_(RANK + 1.0)
            y = hvd.allreduce(z, name=f"order.{stream_kind}", op=hvd.Sum)
            stream.synchronize()
        why = expect_all(y, TRIANGLE, f"ordering on the {stream_kind} stream")
        if why:
            return why
    return None


def allgather_ragged():
    x = torch.full((RANK + 1, 3), float(RANK), device=DEV)
    y = hvd.allgather(x, name="gather")
    if tuple(y.shape) != (int(TRIANGLE), 3):
        return f"shape {tuple(y.shape)}, want {(int(TRIANGLE), 3)}"
    want = torch.cat([torch.full((r + 1, 3), float(r)) for r in range(SIZE)])
    if not torch.equal(y.cpu(), want):
        return "values differ from the concatenation of every rank's rows"
    return None


def broadcast_inplace():
    x = torch.full((777,), float(RANK + 5), device=DEV)
    hvd.broadcast_(x, root_rank=0, name="bcast")
    return expect_all(x, 5.0, "broadcast_ from rank 0")


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 4)).to(DEV)


def rank_batch(r, step):
    g = torch.Generator().manual_seed(1000 * step + r)
    return (torch.randn(16, 32, generator=g), torch.randn(16, 4, generator=g))


def broadcast_state():
    model = make_model(seed=RANK)  # different on every rank on purpose
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    want = make_model(seed=0)
    for (n, p), q in zip(model.named_parameters(), want.parameters()):
        if not p.is_cuda or not torch.equal(p, q):
            return f"parameter {n} is not rank 0's after broadcast_parameters"
    return None


def distributed_optimizer():
    model = make_model(seed=0)
    reference = make_model(seed=0)
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1),
        named_parameters=model.named_parameters())
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for step in range(3):
        x, y = (t.to(DEV) for t in rank_batch(RANK, step))
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        # The reference: one process, the mean of every rank's mean loss.
        ref_opt.zero_grad()
        loss = sum(torch.nn.functional.mse_loss(
            reference(a.to(DEV)), b.to(DEV))
            for a, b in (rank_batch(r, step) for r in range(SIZE))) / SIZE
        loss.backward()
        ref_opt.step()
    worst = max((p - q).abs().max().item()
                for p, q in zip(model.parameters(), reference.parameters()))
    return None if worst < 1e-5 else f"max |terse - reference| = {worst:.3g}"


def per_call_fp16():
    x = torch.full((100000,), RANK + 1.0, device=DEV)
    y = hvd.allreduce(x, name="pc.fp16", op=hvd.Sum,
                      compression=hvd.Compression.fp16)
    return expect_all(y, TRIANGLE, "compression=fp16")


def per_call_topk():
    # 1% of the entries are non-zero, at the same places on every rank:
    # top-k at CF 100 selects exactly them, so the sum is exact.
    x = torch.zeros(100000, device=DEV)
    x[::100] = RANK + 1.0
    y = hvd.allreduce(x, name="pc.topk", op=hvd.Sum,
                      compression=hvd.Compression.topk)
    want = torch.zeros(100000, device=DEV, dtype=torch.float64)
    want[::100] = TRIANGLE
    if not y.is_cuda:
        return f"result on {y.device}"
    if not torch.equal(y.double(), want):
        return f"max |error| {(y.double() - want).abs().max().item():.3g}"
    return None


def per_call_powersgd():
    g = torch.Generator().manual_seed(7)
    u, v = torch.randn(256, 1, generator=g), torch.randn(1, 128, generator=g)
    x = ((RANK + 1.0) * (u @ v)).to(DEV)  # rank 1: the sketch is exact
    worst = 0.0
    for step in range(2):
        y = hvd.allreduce(x, name="pc.powersgd", op=hvd.Sum,
                          compression=hvd.Compression.powersgd)
        want = (TRIANGLE * (u @ v)).to(DEV)
        worst = (y - want).abs().max().item() / want.abs().max().item()
    return None if worst < 1e-3 else f"relative error {worst:.3g}"


def per_call_gravac_portfolio():
    # gravac's portfolio on CUDA, on the device (DeviceCompression). Run with
    # TERSE_GRAVAC_CANDIDATES=none,fp16,bf16 (tools/gpu_check.sh): every
    # candidate carries these small integers exactly, whatever it picks.
    if os.environ.get("TERSE_GRAVAC_CANDIDATES") != "none,fp16,bf16":
        return "needs TERSE_GRAVAC_CANDIDATES=none,fp16,bf16"
    for step in range(12):
        x = torch.full((100000,), RANK + 1.0, device=DEV)
        x[::7] = -(RANK + 2.0)
        y = hvd.allreduce(x, name="pc.gravac", op=hvd.Sum,
                          compression=hvd.Compression.gravac)
        want = torch.full((100000,), TRIANGLE, dtype=torch.float64)
        want[::7] = -(TRIANGLE + SIZE)
        if not y.is_cuda or not torch.equal(y.double().cpu(), want):
            return f"step {step}: not the exact sum"
    return None


def hook_does_not_block_host():
    # Enqueueing a gradient whose producer is still running must not wait
    # for it on the host: time allreduce_async_ after 0.2 s of queued work.
    a = torch.randn(4096, 4096, device=DEV)
    torch.cuda.synchronize()
    z = torch.zeros(1 << 20, device=DEV)
    t0 = time.perf_counter()
    for _ in range(60):
        a = a @ a / 4096.0
    z.add_(1.0)
    t1 = time.perf_counter()
    h = hvd.allreduce_async_(z, name="nonblocking", op=hvd.Sum)
    t2 = time.perf_counter()
    hvd.synchronize(h)
    t3 = time.perf_counter()
    print(f"rank {RANK}: queueing {1e3 * (t1 - t0):.2f} ms, "
          f"allreduce_async_ {1e3 * (t2 - t1):.2f} ms, synchronize "
          f"{1e3 * (t3 - t2):.2f} ms", flush=True)
    why = expect_all(z, float(SIZE), "after the queued work")
    if why:
        return why
    if t2 - t1 > 0.5 * (t3 - t1):
        return (f"allreduce_async_ took {1e3 * (t2 - t1):.1f} ms of "
                f"{1e3 * (t3 - t1):.1f}: it waited for the producer on the host")
    return None


def process_sets_on_cuda():
    # CUDA tensors on process sets other than the global one (each set has
    # its own device executor and transport): every rank registers the
    # same sets, in order, each rank alone in one; then the pairs' set
    # {0, 1} when there are more than two ranks.
    sets = [hvd.add_process_set([r]) for r in range(SIZE)]
    if SIZE > 2:
        sets.append(hvd.add_process_set([0, 1]))
    try:
        mine = sets[RANK]
        x = torch.full((1000,), RANK + 1.0, device=DEV)
        why = expect_all(hvd.allreduce(x, name="ps.sum", op=hvd.Sum,
                                       process_set=mine),
                         RANK + 1.0, "allreduce Sum on this rank's set")
        if why:
            return why
        why = expect_all(
            hvd.allreduce(x, name="ps.fp16", op=hvd.Average,
                          compression=hvd.Compression.fp16, process_set=mine),
            RANK + 1.0, "allreduce Average, fp16, on this rank's set")
        if why:
            return why
        g = hvd.allgather(torch.full((2, 3), RANK, device=DEV,
                                     dtype=torch.int32),
                          name="ps.gather", process_set=mine)
        why = expect_all(g, RANK, "allgather on this rank's set")
        if why or tuple(g.shape) != (2, 3):
            return why or f"allgather shape {tuple(g.shape)}"
        if SIZE > 2 and RANK <= 1:
            y = hvd.allreduce(x, name="ps.pair", op=hvd.Sum,
                              process_set=sets[-1])
            why = expect_all(y, 3.0, "allreduce Sum on set {0, 1}")
            if why:
                return why
        return None
    finally:
        for ps in sets:
            hvd.remove_process_set(ps)


CHECKS = [
    ("allreduce fp32/fp16/bf16 Sum and Average", allreduce_dtypes),
    ("allreduce_async_ in place, 8 tensors", allreduce_inplace_async),
    ("producer ordering (current and side stream)", producer_ordering),
    ("allgather with a first dimension per rank", allgather_ragged),
    ("broadcast_", broadcast_inplace),
    ("broadcast_parameters and broadcast_optimizer_state", broadcast_state),
    ("DistributedOptimizer vs one process, 3 steps", distributed_optimizer),
    ("per-call compression=fp16", per_call_fp16),
    ("per-call compression=topk", per_call_topk),
    ("per-call compression=powersgd (rank-1 matrix)", per_call_powersgd),
    ("per-call compression=gravac, a portfolio (none, fp16, bf16)",
     per_call_gravac_portfolio),
    ("allreduce_async_ does not wait for the producer", hook_does_not_block_host),
]
if SIZE >= 2:  # one rank has no process set but the global one
    CHECKS.append(("process sets: allreduce (fp16 too) and allgather",
                   process_sets_on_cuda))

only = os.environ.get("TERSE_GPU_CHECKS")  # comma-separated indices
ran = 0
for i, (name, fn) in enumerate(CHECKS):
    if only and str(i) not in only.split(","):
        continue
    check(name, fn)
    ran += 1
print(f"rank {RANK}: {ran - len(FAILED)} passed, {len(FAILED)} failed "
      f"(size {SIZE}, TERSE_GPU_OPERATIONS="
      f"{os.environ.get('TERSE_GPU_OPERATIONS', 'nccl')})", flush=True)
hvd.shutdown()
sys.exit(1 if FAILED else 0)
