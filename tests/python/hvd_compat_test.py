"""Horovod compatibility of terse.torch under mpirun (2 and 4 ranks):
compression chosen per call, Horovod's Compression object API, the
deprecated average= keyword, and the int8/int16/bool dtypes.

References are computed independently with numpy: every rank's input is a
function of (rank, case), so every rank builds every other rank's tensor.
The engine runs with TERSE_MIN_COMPRESS_BYTES=0 so that even small buckets
are compressed as asked.
"""

import warnings

import numpy as np
import torch

import terse.torch as tt
from mpi_testlib import expect, expect_raises, run


def rank_floats(rank, n, case):
    return np.random.default_rng(1000 * case + rank).uniform(
        -1.0, 1.0, n).astype(np.float32)


def new_reports(before):
    """Bucket reports of buckets not in `before` (a set of bucket ids)."""
    return [r for r in tt.bucket_reports() if r["bucket"] not in before]


# --- per-call compression ----------------------------------------------------

def test_fp16_per_call_matches_fp16_rounded_sum(_):
    n = 4096
    inputs = [rank_floats(r, n, 1) for r in range(tt.size())]
    before = {r["bucket"] for r in tt.bucket_reports()}
    got = tt.allreduce(torch.from_numpy(inputs[tt.rank()]), name="pc.fp16",
                       op=tt.Sum, compression=tt.Compression.fp16).numpy()
    # Reference: every rank's tensor rounded to fp16, summed; the engine's
    # fp16 partial sums add up to one fp16 rounding per addition.
    ref = np.sum([x.astype(np.float16).astype(np.float64) for x in inputs], 0)
    exact = np.sum([x.astype(np.float64) for x in inputs], 0)
    tol = tt.size() * 2.0 ** -10 * np.sum([np.abs(x) for x in inputs], 0)
    err = np.abs(got - ref)
    expect(np.all(err <= tol + 1e-6),
           f"fp16 sum off by up to {err.max()} (tolerance {tol.max()})")
    expect(np.any(got != exact.astype(np.float32)),
           "fp16 per call returned the exact float32 sum: not compressed")
    reports = new_reports(before)
    expect([r["compressor"] for r in reports] == ["fp16"],
           f"bucket reports {reports}")
    # The process-wide policy (none by default) still applies without it.
    plain = tt.allreduce(torch.from_numpy(inputs[tt.rank()]), name="pc.plain",
                         op=tt.Sum).numpy()
    expect(np.allclose(plain, exact, rtol=1e-6, atol=1e-6),
           "dense sum without compression=")


def test_per_call_string_specs(_):
    n = 2048
    inputs = [rank_floats(r, n, 2) for r in range(tt.size())]
    exact = np.sum(inputs, 0)
    for spec in ("none", "bf16", "topk:4", tt.Compression.gravac):
        got = tt.allreduce(torch.from_numpy(inputs[tt.rank()]),
                           name=f"pc.spec.{spec}", op=tt.Sum,
                           compression=spec).numpy()
        expect(got.shape == (n,) and np.all(np.isfinite(got)), f"{spec}")
        if spec in ("none",):
            expect(np.allclose(got, exact, atol=1e-5), f"{spec}: dense sum")
        elif spec == "bf16":
            expect(np.allclose(got, exact, atol=0.05), f"{spec}: bf16 sum")
        elif spec == "topk:4":
            # Top-k keeps a quarter of each rank's entries (error feedback
            # keeps the rest): the result is sparse and smaller.
            expect(np.count_nonzero(got) <= tt.size() * n // 4 + 1,
                   f"topk:4 sent {np.count_nonzero(got)} nonzeros")
    expect_raises(ValueError, ["unknown compressor"], tt.allreduce,
                  torch.ones(2), name="pc.bad", compression="zip")


def test_compression_mismatch_fails_on_every_rank(_):
    mine = (tt.Compression.fp16 if tt.rank() == 0 else tt.Compression.none)
    others = ",".join(str(r) for r in range(1, tt.size()))
    e = expect_raises(tt.TerseError,
                      ["tensor 'pc.mismatch'", "compression fp16 on rank 0",
                       f"none on rank{'s' if tt.size() > 2 else ''} {others}"],
                      tt.allreduce, torch.ones(8), name="pc.mismatch",
                      compression=mine)
    del e
    # The engine goes on: the same name with agreeing choices works.
    out = tt.allreduce(torch.ones(8), name="pc.mismatch", op=tt.Sum,
                       compression="fp16")
    expect(torch.equal(out, torch.full((8,), float(tt.size()))), f"{out}")


def test_different_compressions_never_share_a_bucket(_):
    n = 1024
    before = {r["bucket"] for r in tt.bucket_reports()}
    choices = ["fp16", "none", "fp16", "bf16", "none", "fp16"]
    tensors = [torch.full((n,), float(i + 1)) for i in range(len(choices))]
    for step in range(3):
        handles = [tt.allreduce_async(t, name=f"pc.mix.{i}", op=tt.Sum,
                                      compression=c)
                   for i, (t, c) in enumerate(zip(tensors, choices))]
        outs = [tt.synchronize(h) for h in handles]
        for i, out in enumerate(outs):
            expect(torch.equal(out, tensors[i] * tt.size()),
                   f"step {step} tensor {i}: {out[:4]}")
    reports = new_reports(before)
    per = {}
    for r in reports:
        per.setdefault(r["compressor"], []).append(r["tensors"])
    # Every bucket holds one choice only: the tensors of each choice add up
    # to exactly that choice's count (a mixed bucket would shift a count).
    want = {"fp16": 3, "none": 2, "bf16": 1}
    got = {k: sum(v) for k, v in per.items()}
    expect(got == want, f"tensors per compressor {got}, want {want} "
                        f"(reports {reports})")


def test_distributed_optimizer_per_call_fp16(_):
    # The package docstring's example: compression=Compression.fp16 on the
    # default (uncompressed) engine.
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 32)
    opt = tt.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1),
        named_parameters=model.named_parameters(),
        compression=tt.Compression.fp16)
    x = torch.from_numpy(rank_floats(tt.rank(), 64 * 8, 3).reshape(8, 64))
    model(x).pow(2).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    opt.synchronize()
    for p, mine in zip(model.parameters(), grads):
        want = tt.allreduce(mine, op=tt.Average, compression="none")
        expect(torch.allclose(p.grad, want, rtol=2e-2, atol=2e-3),
               "fp16-reduced gradient far from the dense average")
    with opt.skip_synchronize():
        opt.step()


# --- Horovod's Compression object API ----------------------------------------

def test_compression_object_api(_):
    t = torch.tensor([1.0, 2.5, 1e-4 + 1.0], dtype=torch.float32)
    c, ctx = tt.Compression.fp16.compress(t)
    expect(c.dtype == torch.float16, f"fp16 compress dtype {c.dtype}")
    back = tt.Compression.fp16.decompress(c, ctx)
    expect(back.dtype == torch.float32, f"decompress dtype {back.dtype}")
    expect(torch.equal(back, t.half().float()), "fp16 round trip")
    # Static methods, as in horovod.torch.compression.
    c2, ctx2 = type(tt.Compression.fp16).compress(t.double())
    expect(c2.dtype == torch.float16 and ctx2 == torch.float64, "static")
    expect(tt.Compression.fp16.decompress(c2, ctx2).dtype == torch.float64,
           "back to ctx's dtype")
    i = torch.arange(4)
    ci, cti = tt.Compression.fp16.compress(i)
    expect(ci.dtype == torch.int64 and torch.equal(
        tt.Compression.fp16.decompress(ci, cti), i), "integers untouched")
    n, nctx = tt.Compression.none.compress(t)
    expect(n is t and tt.Compression.none.decompress(n, nctx) is t, "none")
    b, bctx = tt.Compression.bf16.compress(t)
    expect(b.dtype == torch.bfloat16 and
           tt.Compression.bf16.decompress(b, bctx).dtype == torch.float32,
           "bf16")
    expect_raises(NotImplementedError, ["engine"],
                  tt.Compression.topk.compress, t)
    expect(tt.Compression.fp16(cf=2).compress(t)[0].dtype == torch.float16,
           "a copy with a cf keeps the class")
    # Horovod's round trip around an allreduce equals terse's per-call fp16
    # up to fp16 rounding.
    x = torch.from_numpy(rank_floats(tt.rank(), 512, 4))
    hc, hctx = tt.Compression.fp16.compress(x)
    hvd_style = tt.Compression.fp16.decompress(
        tt.allreduce(hc, name="api.hvd", op=tt.Sum), hctx)
    terse_style = tt.allreduce(x, name="api.terse", op=tt.Sum,
                               compression=tt.Compression.fp16)
    expect(torch.allclose(hvd_style, terse_style, atol=tt.size() * 2e-3),
           "Horovod-style fp16 and terse fp16 agree")


# --- average= ----------------------------------------------------------------

def test_average_keyword(_):
    mine = torch.full((4,), float(tt.rank() + 1))
    total = sum(range(1, tt.size() + 1))
    for fn in (tt.allreduce, tt.allreduce_):
        for average, want in ((True, total / tt.size()), (False, total)):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                out = fn(mine.clone(), name=f"avg.{fn.__name__}.{average}",
                         average=average)
            expect(torch.equal(out, torch.full((4,), float(want))),
                   f"{fn.__name__} average={average}: {out}")
            expect(any(issubclass(w.category, DeprecationWarning) and
                       "average" in str(w.message) for w in caught),
                   f"no DeprecationWarning for average={average}")
        expect_raises(ValueError, ["op parameter supersedes average"], fn,
                      mine.clone(), name="avg.both", average=True, op=tt.Sum)
    h = tt.allreduce_async(mine, name="avg.async", average=False)
    expect(torch.equal(tt.synchronize(h), torch.full((4,), float(total))),
           "allreduce_async average=False")
    h = tt.allreduce_async_(mine.clone(), name="avg.async_", average=True)
    expect(torch.equal(tt.synchronize(h),
                       torch.full((4,), total / tt.size())),
           "allreduce_async_ average=True")
    # Neither given: Average, as before.
    out = tt.allreduce(mine, name="avg.default")
    expect(torch.equal(out, torch.full((4,), total / tt.size())), "default")


# --- int8 / int16 / bool -----------------------------------------------------

def rank_ints(rank, dtype, n, case):
    info = np.iinfo(dtype)
    return np.random.default_rng(5000 * case + rank).integers(
        info.min, info.max, n, endpoint=True, dtype=dtype)


def test_int8_int16_exact_sums_wrap_like_numpy(_):
    n = 1000
    for case, (np_type, t_type) in enumerate(((np.int8, torch.int8),
                                              (np.int16, torch.int16),
                                              (np.uint8, torch.uint8))):
        inputs = [rank_ints(r, np_type, n, case) for r in range(tt.size())]
        mine = torch.from_numpy(inputs[tt.rank()].copy())
        # numpy's sum in the type itself wraps modulo 2^bits.
        want_sum = np.sum(np.stack(inputs), axis=0, dtype=np_type)
        wide = np.sum(np.stack(inputs).astype(np.int64), axis=0)
        expect(np.any(wide != want_sum.astype(np.int64)),
               f"{np_type}: inputs never overflow")
        for op, want in ((tt.Sum, want_sum),
                         (tt.Min, np.min(np.stack(inputs), axis=0)),
                         (tt.Max, np.max(np.stack(inputs), axis=0))):
            got = tt.allreduce(mine, name=f"int.{t_type}.{op}", op=op)
            expect(got.dtype == t_type, f"{t_type}: dtype {got.dtype}")
            expect(np.array_equal(got.numpy(), want),
                   f"{t_type} op {op}: first differences at "
                   f"{np.nonzero(got.numpy() != want)[0][:5]}")
            # torch's own sum in the type agrees (both wrap).
            if op == tt.Sum:
                tsum = torch.stack([torch.from_numpy(x.copy())
                                    for x in inputs]).sum(0, dtype=t_type)
                expect(torch.equal(got, tsum), f"{t_type}: torch sum")
        # Fused: several small int8/int16 tensors in one bucket.
        hs = [tt.allreduce_async(mine[k::4].clone(), name=f"int.f.{t_type}.{k}",
                                 op=tt.Sum) for k in range(4)]
        for k, h in enumerate(hs):
            expect(np.array_equal(tt.synchronize(h).numpy(), want_sum[k::4]),
                   f"{t_type} fused piece {k}")
        # Horovod's integer Average: the (wrapped) sum times 1/size in
        # double, truncated toward zero.
        got_avg = tt.allreduce(mine, name=f"int.avg.{t_type}",
                               op=tt.Average).numpy()
        want_avg = np.trunc(want_sum.astype(np.float64) / tt.size())
        expect(np.array_equal(got_avg.astype(np.float64), want_avg),
               f"{t_type}: integer Average")


def test_int8_int16_bool_move(_):
    for case, dtype in enumerate((torch.int8, torch.int16, torch.bool)):
        mine = (torch.arange(6) * (tt.rank() + 1) - 7 * case).to(dtype)
        want = torch.cat([(torch.arange(6) * (r + 1) - 7 * case).to(dtype)
                          for r in range(tt.size())])
        got = tt.allgather(mine, name=f"mv.ag.{dtype}")
        expect(got.dtype == dtype and torch.equal(got, want),
               f"allgather {dtype}: {got}")
        root = tt.size() - 1
        got = tt.broadcast(mine, root, name=f"mv.bc.{dtype}")
        expect(torch.equal(got, (torch.arange(6) * (root + 1) - 7 * case)
                           .to(dtype)), f"broadcast {dtype}: {got}")
    expect_raises(tt.TerseError, ["allreduce of bool"], tt.allreduce,
                  torch.ones(3, dtype=torch.bool), name="mv.bool", op=tt.Max)


if __name__ == "__main__":
    def setup():
        tt.init(config={"TERSE_MIN_COMPRESS_BYTES": "0"})
        return object()
    run(globals(), setup=setup, teardown=lambda _: tt.shutdown())
