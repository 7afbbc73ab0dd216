"""Soak: random collectives through terse.torch for a while, every result
checked against a numpy reference, memory and file descriptors watched.

    tools/terserun -np 4 /usr/bin/python3 integration/soak.py --seconds 60
    (or tests/mpirun.sh 4 /usr/bin/python3 integration/soak.py ...)

What every rank does, in lockstep (one shared seed draws the sequence of
operations, kinds, names, dtypes and shapes; each rank's data is a
deterministic function of (seed, op index, rank), so every rank regenerates
every other rank's input and computes the full reference itself):

  batches of 1-4 asynchronous operations, synchronised in random order:
    allreduce Sum / Average  float32 float64 float16 bfloat16 int32 int64
                             uint8 (integer Average as Horovod's: truncated
                             toward zero; drawn only if a probe accepts it)
    allgather                first dimension differing per rank
    broadcast                random root
  sizes log-uniform from 1 byte to --max-bytes (64 MiB), the bytes of a batch
  capped by --batch-bytes.

Compression: the engine takes its policy at init, per tensor name through
TERSE_COMPRESSION_RULES (there is no per-call choice: compression= must equal
the engine's policy). The soak starts the engine with one rule per
compressor, so choosing a compressor per call is choosing a name:
  soak.fp16.* / soak.bf16.*   any float32 size; checked against the wire
                              format's relative error bound
  soak.ef.<comp>.<slot>       error-feedback compressors (topk randomk dgc
                              redsync threshold powersgd qsgd efsignsgd) and
                              the adaptive policies (gravac accordion), on a
                              fixed pool of float32 slots with fixed shapes
                              (so their residuals persist across calls).
                              Checked with the conservation law of error
                              feedback, element-wise:
                                result*(Average? size:1) + sum_r e_r(after)
                                  = sum_r g_r + sum_r e_r(before)
                              where e_r is rank r's residual as the engine
                              itself reports it (save_compression_state(),
                              parsed by soak_state.py, allgathered); top-k
                              also: at most size*ceil(d/cf) nonzeros in the
                              result.
  everything else             none (dense): integer results exact, float sums
                              within (size+1)*eps(dtype)*sum_r |x_r|.
Random events between batches (drawn from the shared seed):
  join      a random non-empty subset of ranks joins at once; the others
            run 1-3 dense allreduces (the joined ranks count as zeros), then
            join; every rank must get the same "last joined" rank, one of
            the late ranks.
  save      save_compression_state() (and the reference's residual sums).
  restore   load_compression_state() of the last save: the law's e(before)
            then is the saved residual, so a restore that did not restore
            fails the next check of that slot.
  unnamed   (--unnamed) an allreduce without a name: a fresh name each
            time, whose state the engine must drop (--forget-after,
            TERSE_FORGET_AFTER_STEPS). An EF slot unused for that many ops
            may have been forgotten (restarting from a zero residual): only
            for such a slot does the check also accept e(before) = 0.

Reported per rank: ops and ops/s, peak RSS (VmHWM), RSS growth after the
warm-up (the first 20% of the time; RSS sampled at quiescent points, between
batches, after gc), open fds at start and end, every mismatch (op index,
kind, dtype, shape, name, rank, worst element). RSS growth is read from the
floor (integration/rss_trend.py): the lowest sample of the last third of
the run after warm-up against the lowest of the first third, because RSS at
a quiescent point also holds buffers sized by the shapes drawn last, which
swing by hundreds of MiB without a trend; a leak raises the floor with
everything else. The least-squares slope and its standard error are
reported beside it, and end vs warm-up for comparison. Exits 1 (every rank)
on any mismatch, floor growth above --max-rss-growth, or more fds at the
end than at the start. --leak-kib (a positive control, never in CI) keeps
that many KiB alive per batch, so a run can show that the measure sees a
leak. --malloc-trim samples RSS after glibc's malloc_trim(0), so free heap
pages the allocator keeps do not count (the untrimmed floor and the floor
of malloc's live bytes are reported beside it); --trace writes what each
point's RSS is made of (integration/soak_memory.py, docs/reliability.md).
"""

import argparse
import gc
import json
import math
import os
import sys
import time

import numpy as np
import torch

import terse.torch as terse
import soak_memory
from rss_trend import floor_growth
from soak_inputs import (DTYPES, EPS, FLOATS, ITEMSIZE, make_input,
                         to_numpy, to_torch)
from soak_state import residuals_of

# Error-feedback compressors and adaptive policies, by TERSE_COMPRESSION word.
EF_COMPRESSORS = ("topk", "randomk", "dgc", "redsync", "threshold",
                  "powersgd", "qsgd", "efsignsgd", "gravac", "accordion")
EF_CF = 50  # TERSE_CF for the rules.
EF_SLOTS = 2  # Slots per compressor.
MIN_COMPRESS_BYTES = 65536  # The engine's default TERSE_MIN_COMPRESS_BYTES.
DEFAULT_FORGET_AFTER = 100  # The engine's TERSE_FORGET_AFTER_STEPS.


def compression_rules():
    rules = ["soak.fp16.*=fp16", "soak.bf16.*=bf16"]
    rules += [f"soak.ef.{c}.*={c}" for c in EF_COMPRESSORS]
    return ";".join(rules)


# --- inputs --------------------------------------------------------------------

def status_kib(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return -1


def open_fds():
    return len(os.listdir("/proc/self/fd"))


# --- the soak ------------------------------------------------------------------

class Soak:
    def __init__(self, args):
        self.args = args
        self.rank = terse.rank()
        self.size = terse.size()
        self.rng = np.random.default_rng([args.seed, 1])  # Shared by ranks.
        self.op = 0
        self.counts = {}
        self.mismatches = []
        self.skipped = {}
        # Reference: sum over ranks of each EF slot's residual (float64).
        self.residual_sums = {}
        # Op index of each EF slot's last use; the engine's forget bound.
        self.last_use = {}
        self.forget_after = (DEFAULT_FORGET_AFTER if args.forget_after is None
                             else args.forget_after)
        self.saved = None  # (engine state bytes, residual_sums copy)
        self.int_average = False
        self.ef_slots = {}
        for c in EF_COMPRESSORS:
            for s in range(EF_SLOTS):
                # 16 KiB .. 2 MiB, 2-D (PowerSGD reads matrices).
                nbytes = int(math.exp(self.rng.uniform(math.log(16 << 10),
                                                       math.log(2 << 20))))
                n = max(1, nbytes // 4)
                cols = int(self.rng.choice([1, 7, 64, 256]))
                rows = max(1, n // cols)
                self.ef_slots[f"soak.ef.{c}.{s}"] = (c, [rows, cols])

    # -- drawing (the shared rng only) --

    def draw_bytes(self, cap):
        lo, hi = 0.0, math.log(min(cap, self.args.max_bytes))
        return max(1, int(math.exp(self.rng.uniform(lo, hi))))

    def draw_dtype(self, allowed=None):
        names = allowed or list(DTYPES)
        return names[int(self.rng.integers(len(names)))]

    def draw_shape(self, nbytes, dtype, first=None):
        n = max(1, nbytes // ITEMSIZE[dtype])
        if first is None and self.rng.random() < 0.5:
            return [n]
        cols = int(self.rng.choice([1, 3, 16, 128]))
        return [max(1, n // cols), cols]

    def draw_batch(self, batch_no):
        """A list of operation specs (same on every rank)."""
        k = int(self.rng.integers(1, 5))
        pool = int(self.rng.integers(self.args.name_pool))
        budget = self.args.batch_bytes
        specs = []
        ef_used = False
        for j in range(k):
            if budget < 1:
                break
            kind = self.rng.choice(["allreduce", "allgather", "broadcast"],
                                   p=[0.6, 0.2, 0.2])
            if kind == "allreduce":
                comp = self.rng.choice(["none", "fp16", "bf16", "ef"],
                                       p=[0.55, 0.1, 0.1, 0.25])
                if comp == "ef" and ef_used:
                    comp = "none"
                if comp == "ef":
                    ef_used = True
                    name = list(self.ef_slots)[int(self.rng.integers(
                        len(self.ef_slots)))]
                    c, shape = self.ef_slots[name]
                    op = terse.Sum if self.rng.random() < 0.5 else terse.Average
                    specs.append(dict(kind="allreduce", comp=c, ef=True,
                                      name=name, dtype="float32",
                                      shape=shape, op=op))
                    budget -= 4 * shape[0] * shape[1]
                    continue
                if comp in ("fp16", "bf16"):
                    dtype = "float32"
                else:
                    allowed = list(DTYPES) if self.int_average else None
                    dtype = self.draw_dtype(allowed)
                op = terse.Sum if self.rng.random() < 0.5 else terse.Average
                if dtype not in FLOATS and not self.int_average:
                    op = terse.Sum
                nbytes = self.draw_bytes(budget)
                shape = self.draw_shape(nbytes, dtype)
                unnamed = self.rng.random() < self.args.unnamed
                name = None if unnamed else (
                    f"soak.{comp}.b{k}.p{pool}.{j}")
                specs.append(dict(kind="allreduce", comp=comp, ef=False,
                                  name=name, dtype=dtype, shape=shape, op=op))
                budget -= nbytes
            elif kind == "allgather":
                dtype = self.draw_dtype()
                nbytes = self.draw_bytes(max(1, budget // self.size))
                shape = self.draw_shape(nbytes, dtype)
                rest = shape[1:]
                firsts = [int(self.rng.integers(0, 2 * shape[0] + 1))
                          for _ in range(self.size)]
                if sum(firsts) == 0:
                    firsts[0] = 1
                specs.append(dict(kind="allgather", dtype=dtype, rest=rest,
                                  firsts=firsts,
                                  name=f"soak.ag.b{k}.p{pool}.{j}"))
                budget -= nbytes * self.size
            else:
                dtype = self.draw_dtype()
                nbytes = self.draw_bytes(budget)
                shape = self.draw_shape(nbytes, dtype)
                root = int(self.rng.integers(self.size))
                specs.append(dict(kind="broadcast", dtype=dtype, shape=shape,
                                  root=root, name=f"soak.bc.b{k}.p{pool}.{j}"))
                budget -= nbytes
        order = [int(i) for i in self.rng.permutation(len(specs))]
        return specs, order

    # -- running and checking --

    def mismatch(self, spec, what, detail=""):
        shape = spec.get("shape") or spec.get("rest")
        record = dict(op=spec["index"], kind=spec["kind"],
                      comp=spec.get("comp", "none"), dtype=spec["dtype"],
                      shape=shape, name=spec.get("name"), rank=self.rank,
                      what=what, detail=detail)
        self.mismatches.append(record)
        if len(self.mismatches) <= 20:
            print(f"[rank {self.rank}] MISMATCH {json.dumps(record)}",
                  file=sys.stderr, flush=True)

    def inputs(self, spec, shape_of=None):
        return [make_input(self.args.seed, spec["index"], r, spec["dtype"],
                           shape_of(r) if shape_of else spec["shape"])
                for r in range(self.size)]

    def start(self, spec):
        spec["index"] = self.op
        self.op += 1
        dtype = spec["dtype"]
        if spec["kind"] == "allreduce":
            x = make_input(self.args.seed, spec["index"], self.rank, dtype,
                           spec["shape"])
            return terse.allreduce_async(to_torch(x, dtype), name=spec["name"],
                                         op=spec["op"])
        if spec["kind"] == "allgather":
            shape = [spec["firsts"][self.rank]] + spec["rest"]
            x = make_input(self.args.seed, spec["index"], self.rank, dtype,
                           shape)
            return terse.allgather_async(to_torch(x, dtype),
                                         name=spec["name"])
        x = make_input(self.args.seed, spec["index"], self.rank, dtype,
                       spec["shape"])
        return terse.broadcast_async(to_torch(x, dtype), spec["root"],
                                     name=spec["name"])

    def check(self, spec, result):
        dtype = spec["dtype"]
        key = (spec["kind"], spec.get("comp", "none"), dtype)
        self.counts[key] = self.counts.get(key, 0) + 1
        got = to_numpy(result, dtype)
        if spec["kind"] == "broadcast":
            want = make_input(self.args.seed, spec["index"], spec["root"],
                              dtype, spec["shape"])
            self.expect_equal(spec, got, want)
        elif spec["kind"] == "allgather":
            xs = self.inputs(spec, lambda r: [spec["firsts"][r]] + spec["rest"])
            self.expect_equal(spec, got, np.concatenate(xs, axis=0))
        elif spec["ef"]:
            self.check_ef(spec, got)
        else:
            self.check_reduce(spec, got, self.inputs(spec))

    def expect_equal(self, spec, got, want):
        if got.shape != want.shape:
            self.mismatch(spec, "shape", f"{list(got.shape)} != "
                          f"{list(want.shape)}")
        elif not np.array_equal(got, want):
            bad = int(np.count_nonzero(got != want))
            self.mismatch(spec, "value", f"{bad} elements differ")

    def check_reduce(self, spec, got, xs, active=None):
        """Sum/Average over ranks (joined ranks contribute zeros)."""
        dtype = spec["dtype"]
        if active is not None:
            xs = [x if r in active else np.zeros_like(x)
                  for r, x in enumerate(xs)]
        if got.shape != xs[0].shape:
            self.mismatch(spec, "shape", f"{list(got.shape)}")
            return
        if dtype not in FLOATS:
            want = xs[0].copy()
            for x in xs[1:]:
                want += x  # Wraps like the engine (uint8).
            if spec["op"] == terse.Average:
                # Horovod's integer Average (docs/torch.md): the wrapped sum
                # times 1/size in double, truncated toward zero.
                want = np.trunc(want.astype(np.float64) *
                                (1.0 / self.size)).astype(want.dtype)
            self.expect_equal(spec, got, want)
            return
        # In chunks of 1M elements: float64 copies of a 64 MiB tensor of
        # bytes-sized elements would take gigabytes.
        flat = [x.reshape(-1) for x in xs]
        out = got.reshape(-1)
        chunk = 1 << 20
        for lo in range(0, out.size, chunk):
            self.check_reduce_chunk(spec, out[lo:lo + chunk],
                                    [x[lo:lo + chunk] for x in flat], lo)

    def check_reduce_chunk(self, spec, got, xs, offset):
        dtype = spec["dtype"]
        want = np.zeros(got.shape, np.float64)
        mag = np.zeros(got.shape, np.float64)
        for x in xs:
            want += x
            mag += np.abs(x.astype(np.float64))
        eps = EPS[dtype]
        if spec.get("comp") == "fp16":
            eps = max(eps, 2.0 ** -10)
        elif spec.get("comp") == "bf16":
            eps = max(eps, 2.0 ** -7)
        tol = (self.size + 1) * eps * mag
        if spec["op"] == terse.Average:
            want /= self.size
            tol = tol / self.size + eps * np.abs(want)
        if dtype == "float16" or spec.get("comp") == "fp16":
            tol += 2.0 ** -24 * (self.size + 1)  # Subnormal spacing.
        err = np.abs(got.astype(np.float64) - want)
        bad = ~(err <= tol)
        if bad.any():
            i = int(np.argmax(np.where(bad, err - tol, -np.inf)))
            self.mismatch(spec, "tolerance",
                          f"{int(bad.sum())} elements; worst at {offset + i}: "
                          f"got {got[i]!r} want {want[i]!r} tol {tol[i]:.3g}")

    def check_ef(self, spec, got):
        """The conservation law of error feedback (see the module doc)."""
        name = spec["name"]
        xs = self.inputs(spec)
        state = terse.save_compression_state()
        mine = residuals_of(state).get((name, 0))
        del state
        d = int(np.prod(spec["shape"]))
        if mine is None:
            mine = np.zeros(d, np.float32)
        if mine.size != d:
            self.mismatch(spec, "residual size", f"{mine.size} != {d}")
            return
        gathered = terse.allgather(torch.from_numpy(mine.reshape(1, d)),
                                   name=f"soak.res.{name}").numpy()
        after = gathered.astype(np.float64).sum(axis=0)
        before = self.residual_sums.get(name, np.zeros(d))
        # A slot unused for TERSE_FORGET_AFTER_STEPS ops or more may have
        # been forgotten (the engine counts at most a step per allreduce):
        # then the law may hold with e(before) = 0 instead.
        since = spec["index"] - self.last_use.get(name, spec["index"])
        self.last_use[name] = spec["index"]
        forget = self.forget_after
        candidates = [before]
        if forget > 0 and since >= forget and before.any():
            candidates.append(np.zeros(d))
        g = np.zeros(d, np.float64)
        mag = np.abs(after)
        for x in xs:
            g += x.reshape(-1)
            mag += np.abs(x.reshape(-1).astype(np.float64))
        for row in gathered:
            mag += np.abs(row.astype(np.float64))
        scale = self.size if spec["op"] == terse.Average else 1
        res = got.reshape(-1).astype(np.float64) * scale
        mag += np.abs(res)
        lhs = res + after
        for k, before in enumerate(candidates):
            rhs = g + before
            m = mag + np.abs(before)
            tol = 8 * (self.size + 2) * EPS["float32"] * m + 1e-30
            if not gathered.any():
                # No residual on any rank: the step went dense or through a
                # cast (GraVAC's fp16), which keeps no error feedback: the
                # result is sum_r (g_r + e_r(before)) within fp16 rounding.
                tol = tol + (self.size + 1) * 2.0 ** -10 * m + \
                    (self.size + 1) * 2.0 ** -24
            err = np.abs(lhs - rhs)
            bad = ~(err <= tol)
            if not bad.any():
                if k > 0:
                    key = ("forgotten", spec["comp"], "-")
                    self.counts[key] = self.counts.get(key, 0) + 1
                break
        if bad.any():
            i = int(np.argmax(np.where(bad, err - tol, -np.inf)))
            self.mismatch(spec, "error-feedback conservation",
                          f"{int(bad.sum())} of {d} elements; worst at {i}: "
                          f"result+residuals {lhs[i]!r} != inputs+previous "
                          f"residuals {rhs[i]!r} (tol {tol[i]:.3g})"
                          + (" (e(before) = 0 tried too: the slot could "
                             "have been forgotten)" if len(candidates) > 1
                             else ""))
        if spec["comp"] == "topk" and 4 * d >= MIN_COMPRESS_BYTES:
            k = min(d, max(1, math.ceil(d / EF_CF)))
            nnz = int(np.count_nonzero(res))
            if nnz > self.size * k:
                self.mismatch(spec, "topk support",
                              f"{nnz} nonzeros > {self.size} ranks x k={k}")
        self.residual_sums[name] = after

    def run_batch(self, batch_no):
        specs, order = self.draw_batch(batch_no)
        handles = [self.start(s) for s in specs]
        for i in order:
            try:
                result = terse.synchronize(handles[i])
            except terse.TerseError as e:
                self.mismatch(specs[i], "error", str(e))
                continue
            self.check(specs[i], result)
            del result
        return len(specs)

    def join_episode(self):
        early = [r for r in range(self.size) if self.rng.random() < 0.5]
        if not early:
            early = [int(self.rng.integers(self.size))]
        late = [r for r in range(self.size) if r not in early]
        m = int(self.rng.integers(1, 4))
        specs = []
        for j in range(m):
            dtype = self.draw_dtype(["float32", "float64", "int32", "int64"])
            nbytes = self.draw_bytes(1 << 20)
            shape = self.draw_shape(nbytes, dtype)
            op = terse.Sum if (dtype not in FLOATS or
                               self.rng.random() < 0.5) else terse.Average
            specs.append(dict(kind="allreduce", comp="none", ef=False,
                              name=f"soak.join.{j}", dtype=dtype, shape=shape,
                              op=op))
        for s in specs:
            s["index"] = self.op
            self.op += 1
        ops = 0
        if self.rank in late:
            for s in specs:
                x = make_input(self.args.seed, s["index"], self.rank,
                               s["dtype"], s["shape"])
                result = terse.allreduce(to_torch(x, s["dtype"]),
                                         name=s["name"], op=s["op"])
                key = ("allreduce-joined", "none", s["dtype"])
                self.counts[key] = self.counts.get(key, 0) + 1
                self.check_reduce(s, to_numpy(result, s["dtype"]),
                                  self.inputs(s), active=set(late))
                ops += 1
        last = terse.join()
        ops += 1
        everyone = terse.allgather(torch.tensor([last], dtype=torch.int64),
                                   name="soak.join.last").tolist()
        spec = dict(index=self.op - 1, kind="join", dtype="-",
                    shape=[len(early)], name="join")
        if len(set(everyone)) != 1:
            self.mismatch(spec, "join", f"ranks disagree on the last: "
                          f"{everyone}")
        elif late and everyone[0] not in late:
            self.mismatch(spec, "join", f"last {everyone[0]} is not among "
                          f"the late ranks {late}")
        self.counts[("join", "-", "-")] = self.counts.get(("join", "-", "-"),
                                                          0) + 1
        return ops

    def probe_int_average(self):
        """Does the engine accept integer Average? (Drawn only if so.)"""
        x = torch.ones(4, dtype=torch.int32)
        try:
            terse.allreduce(x, name="soak.probe.iavg", op=terse.Average)
            self.int_average = True
        except terse.TerseError as e:
            self.skipped["int Average"] = str(e).splitlines()[0][:200]
            self.int_average = False

    def prime(self):
        """Every EF slot once, so their residuals exist before the warm-up
        ends (otherwise RSS grows as slots are first drawn)."""
        for name, (c, shape) in self.ef_slots.items():
            spec = dict(kind="allreduce", comp=c, ef=True, name=name,
                        dtype="float32", shape=shape, op=terse.Sum)
            self.check(spec, terse.synchronize(self.start(spec)))

    def trace_point(self, trace, t, batch, mem):
        """One line of --trace: what RSS at this quiescent point is made of
        (integration/soak_memory.py), Python's live objects and the
        engine's buckets."""
        point = dict(t=round(t, 2), batch=batch, **mem)
        point["py_objects"] = len(gc.get_objects())
        point["buckets"] = len(terse.bucket_reports())
        trace.write(json.dumps(point) + "\n")
        trace.flush()

    def run(self):
        args = self.args
        self.probe_int_average()
        self.prime()
        gc.collect()
        fds_start = open_fds()
        rss_samples = []
        side_samples = {}  # "untrimmed" (--malloc-trim), "live" (malloc)
        t0 = time.monotonic()
        warm_until = t0 + 0.2 * args.seconds
        baseline = None
        ops = 0
        batch = 0
        ctl = torch.zeros(1, dtype=torch.int32)
        leaked = []  # --leak-kib: the positive control's kept buffers
        trace = None
        if args.trace:
            trace = open(f"{args.trace}.rank{self.rank}.jsonl", "w")
        while True:
            event = self.rng.random()
            if event < args.join_rate:
                ops += self.join_episode()
            elif event < args.join_rate + args.checkpoint_rate:
                self.saved = (terse.save_compression_state(),
                              {k: v.copy() for k, v in
                               self.residual_sums.items()})
                self.counts[("save", "-", "-")] = self.counts.get(
                    ("save", "-", "-"), 0) + 1
            elif (event < args.join_rate + 2 * args.checkpoint_rate
                  and self.saved is not None):
                terse.load_compression_state(self.saved[0])
                self.residual_sums = {k: v.copy() for k, v in
                                      self.saved[1].items()}
                self.counts[("restore", "-", "-")] = self.counts.get(
                    ("restore", "-", "-"), 0) + 1
            ops += self.run_batch(batch)
            batch += 1
            if args.leak_kib:
                leaked.append(np.ones(args.leak_kib * 256, np.float32))
            # Rank 0's clock decides for everyone.
            now = time.monotonic()
            done = now - t0 >= args.seconds or (
                args.max_batches and batch >= args.max_batches)
            ctl[0] = 1 if done else 0
            terse.broadcast_(ctl, 0, name="soak.ctl")
            if True:  # Every batch: a quiescent point.
                gc.collect()
                mem = soak_memory.sample(trim=args.malloc_trim)
                rss = mem["VmRSS"]
                rss_samples.append((now - t0, rss))
                for key in ("untrimmed", "live"):
                    if mem.get(key) is not None:
                        side_samples.setdefault(key, []).append(
                            (now - t0, mem[key]))
                if trace is not None:
                    self.trace_point(trace, now - t0, batch, mem)
                if baseline is None and now >= warm_until:
                    baseline = rss
            if ctl[0]:
                break
        elapsed = time.monotonic() - t0
        if trace is not None:
            trace.close()
        terse.barrier()
        gc.collect()
        rss_end = soak_memory.sample(trim=args.malloc_trim)["VmRSS"]
        fds_end = open_fds()
        if baseline is None:
            baseline = rss_end
        rss_samples.append((elapsed, rss_end))
        try:
            floor = floor_growth(rss_samples, warmup_fraction=0.2, windows=3)
        except ValueError as e:  # too short a run: said, not gated
            self.skipped["RSS floor"] = str(e)
            floor = None
        end_vs_warmup = (rss_end - baseline) / baseline
        side = {}
        for key, samples in side_samples.items():
            try:
                side[key] = round(100 * floor_growth(
                    samples, warmup_fraction=0.2, windows=3)["floor_growth"],
                    2)
            except ValueError:
                side[key] = None
        return dict(
            rank=self.rank, seconds=round(elapsed, 1), ops=ops,
            batches=batch, ops_per_s=round(ops / elapsed, 1),
            peak_rss_mib=round(status_kib("VmHWM") / 1024, 1),
            rss_after_warmup_mib=round(baseline / 1024, 1),
            rss_end_mib=round(rss_end / 1024, 1),
            rss_growth_pct=(None if floor is None else
                            round(100 * floor["floor_growth"], 2)),
            rss_floor_mib=(None if floor is None else
                           (round(floor["floor_early"] / 1024, 1),
                            round(floor["floor_late"] / 1024, 1))),
            rss_floor_samples=(None if floor is None else
                               (floor["samples_early"],
                                floor["samples_late"])),
            rss_end_vs_warmup_pct=round(100 * end_vs_warmup, 2),
            rss_slope_kib_per_s=(None if floor is None else
                                 round(floor["slope"], 1)),
            rss_slope_stderr_kib_per_s=(None if floor is None else
                                        round(floor["slope_stderr"], 1)),
            leaked_mib=round(len(leaked) * args.leak_kib / 1024, 1),
            malloc_trim=bool(args.malloc_trim),
            # The same floor measure on RSS before malloc_trim and on the
            # bytes malloc has handed out (not gated; see soak_memory.py).
            untrimmed_growth_pct=side.get("untrimmed"),
            malloc_live_growth_pct=side.get("live"),
            fds_start=fds_start, fds_end=fds_end,
            mismatches=len(self.mismatches),
            rss_trace_mib=[(round(t), round(r / 1024)) for t, r in
                           rss_samples[::max(1, len(rss_samples) // 12)]],
            counts={"/".join(k): v for k, v in sorted(self.counts.items())},
            skipped=self.skipped)


def max_growth(reports):
    known = [r["rss_growth_pct"] for r in reports
             if r["rss_growth_pct"] is not None]
    return f"{max(known)}%" if known else "not measured (too short)"


def main():
    # glibc's dynamic mmap threshold rises to the largest block freed, after
    # which big buffers come from the heap and RSS swings by hundreds of MiB
    # with whichever sizes were drawn last. A fixed threshold returns every
    # block over 1 MiB to the system at free, so RSS measures what is live.
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        os.environ["MALLOC_MMAP_THRESHOLD_"] = str(1 << 20)
        os.environ.setdefault("MALLOC_TRIM_THRESHOLD_", str(1 << 20))
        os.execv(sys.executable, [sys.executable] + sys.argv)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--max-batches", type=int, default=0,
                   help="stop after this many batches if --seconds has not "
                        "passed (0: no cap). The draws are a function of "
                        "--seed, so a cap makes the run the same sequence "
                        "on any machine (CI: RSS then swings alike)")
    p.add_argument("--seed", type=int, default=20)
    p.add_argument("--max-bytes", type=int, default=64 << 20,
                   help="largest tensor (bytes)")
    p.add_argument("--batch-bytes", type=int, default=64 << 20,
                   help="cap on the bytes a batch has in flight per rank")
    p.add_argument("--name-pool", type=int, default=2,
                   help="name sets per batch shape (the engine keeps a "
                        "bucket and its fusion buffer per name)")
    p.add_argument("--unnamed", type=float, default=0.0,
                   help="share of dense allreduces issued without a name")
    p.add_argument("--forget-after", type=int, default=None,
                   help="TERSE_FORGET_AFTER_STEPS for the engine (default: "
                        "the engine's; 0 never forgets a name)")
    p.add_argument("--join-rate", type=float, default=0.03)
    p.add_argument("--checkpoint-rate", type=float, default=0.02)
    p.add_argument("--max-rss-growth", type=float, default=0.01,
                   help="largest accepted growth of the RSS floor after the "
                        "warm-up (fraction; see integration/rss_trend.py)")
    p.add_argument("--leak-kib", type=int, default=0,
                   help="positive control: keep this many KiB alive per "
                        "batch (a deliberate leak the measure must see)")
    p.add_argument("--json", help="write rank 0's summary here")
    p.add_argument("--trace", help="write every quiescent point's memory "
                   "(RssAnon/RssFile, glibc's mallinfo2, Python objects, "
                   "engine buckets) to TRACE.rank<N>.jsonl")
    p.add_argument("--malloc-trim", action="store_true",
                   help="call glibc's malloc_trim(0) before each RSS sample, "
                        "so free pages the allocator kept do not count")
    args = p.parse_args()

    torch.set_num_threads(1)
    config = {"TERSE_COMPRESSION_RULES": compression_rules(),
              "TERSE_CF": str(EF_CF)}
    if args.forget_after is not None:
        config["TERSE_FORGET_AFTER_STEPS"] = str(args.forget_after)
    terse.init(config=config)
    soak = Soak(args)
    report = soak.run()
    problems = []
    if report["mismatches"]:
        problems.append(f"{report['mismatches']} mismatches")
    growth = report["rss_growth_pct"]
    if growth is not None and growth > 100 * args.max_rss_growth:
        problems.append(f"the RSS floor grew {report['rss_growth_pct']}% "
                        "after the warm-up (limit "
                        f"{100 * args.max_rss_growth:g}%)")
    if report["fds_end"] > report["fds_start"]:
        problems.append(f"fds {report['fds_start']} -> {report['fds_end']}")
    report["problems"] = problems
    everyone = terse.allgather_object(report)
    failed = any(r["problems"] for r in everyone)
    if soak.rank == 0:
        for r in everyone:
            print("soak: " + json.dumps({k: v for k, v in r.items()
                                         if k not in ("counts",)}),
                  flush=True)
        print("soak: operations (rank 0): " + json.dumps(report["counts"]),
              flush=True)
        total = sum(r["ops"] for r in everyone) / len(everyone)
        worst = max(r["seconds"] for r in everyone)
        print(f"soak: {terse.size()} ranks, {worst:.0f} s, "
              f"{total / worst:.1f} ops/s per rank, peak RSS "
              f"{max(r['peak_rss_mib'] for r in everyone)} MiB, RSS floor "
              f"growth max {max_growth(everyone)}, "
              f"mismatches {sum(r['mismatches'] for r in everyone)}: "
              + ("FAILED" if failed else "ok"), flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(everyone, f, indent=1)
    terse.shutdown()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
