"""Allreduce of many torch tensors from Python: terse against Horovod 0.28.1
and raw MPI, the same script for every library, in one invocation.

    /usr/bin/python3 bench/py_allreduce_bench.py            # 4 ranks, all modes
    /usr/bin/python3 bench/py_allreduce_bench.py --modes terse:none,horovod:none \\
        --workloads small --rounds 5
    /usr/bin/python3 bench/py_allreduce_bench.py --transport netns   # see below

Workloads (fp32 CPU tensors, each allocated on its own):
  small     1,000 tensors of 1-64 KiB, 33.8 MB: the sizes bench/engine's
            engine_bench draws (std::mt19937(1234), reproduced here)
  resnet50  the 161 parameter tensors of ResNet-50, 97.5 MiB
            (bench/engine/resnet50_param_shapes.tsv)
  one1mib   one tensor of 1 MiB: the per-op cost of each library (issue
            19's one-tensor target, here through Python, with Horovod
            beside terse and raw MPI)

Modes, each one step = every tensor of the workload reduced (Sum) in place:
  terse:none / terse:fp16   terse.torch.allreduce_async_(t, name, op=Sum,
                            compression=None or 'fp16') for every tensor,
                            then synchronize() every handle
  horovod:none / horovod:fp16
                            horovod.torch.allreduce_async_(t, name, op=Sum)
                            for every tensor, then synchronize(); fp16 as
                            Horovod's DistributedOptimizer does it: cast to
                            float16 (Compression.fp16.compress) before, cast
                            back into the tensor after, both timed
  terse:autotune            terse:none with TERSE_AUTOTUNE=1 (engine/autotune.h,
                            TERSE_AUTOTUNE_STEPS_PER_SAMPLE from
                            --autotune-steps-per-sample): terse is started
                            afresh for each workload and runs
                            --autotune-steps untimed steps (the search)
                            before its warm-up and timed steps
  terse:grouped / horovod:grouped
                            one grouped_allreduce_async_(tensors, name,
                            op=Sum) of the whole workload per step, then
                            synchronize(): a group (terse: one engine
                            group, negotiated in one cycle and never from
                            the response cache; Horovod: its group table)
  terse:unpipelined         terse:none with TERSE_PIPELINE_CHUNK=0: large fused
                            buckets copied in, reduced and copied out whole
                            (the engine before session 10)
  mpi:per_tensor            one MPI_Allreduce (MPI_IN_PLACE) per tensor, in
                            order, through ctypes on Open MPI's libmpi: what a
                            trainer without an engine does
  mpi:flat                  one MPI_Allreduce over a buffer of the workload's
                            total size: the practical limit of any library
                            that fuses (no copies, one call)
Both libraries run at their defaults (terse: TERSE_* from the environment;
Horovod: fusion threshold 128 MiB, cycle time as its default); set
HOROVOD_* / TERSE_* variables to change them (they reach every job).

The driver (this script without --worker) starts one mpirun job per mode and
round, all with the same mpirun command (bench/mpi_launch.py: --transport shm
is tools/terserun's one-host command, shared memory plus TCP on lo; tcp is
TCP on lo only; netns runs one rank per namespace of integration/netns), and
alternates the modes' order round by round so machine noise hits them alike.
Each job initialises its library, runs --warmup untimed steps and --steps
timed steps per workload, every step after a barrier. A step's time is the
slowest rank's; each figure is the median over all timed steps of all rounds.
"enqueue" is the time until the last async call returned (Python, binding,
queueing; the slowest rank's), the rest is waiting for completion. The last
line is one JSON object with the medians and the ratios terse/horovod (speed,
so > 1 means terse is faster) and per-tensor MPI/terse. Nothing is asserted:
this is a measurement, not a test (results are checked for the right sum).
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mpi_launch  # noqa: E402

DEFAULT_MODES = ("terse:none,horovod:none,terse:fp16,horovod:fp16,"
                 "mpi:per_tensor,mpi:flat")
SHAPES = os.path.join(mpi_launch.ROOT, "bench", "engine",
                      "resnet50_param_shapes.tsv")


# --- workloads ---------------------------------------------------------------

def _small_sizes():
    """engine_bench's 1,000 sizes: std::uniform_int_distribution<int64_t>
    (1024, 65536) over std::mt19937(1234) as libstdc++ draws it (one 32-bit
    draw times the range, redrawn below the threshold), bytes / 4."""
    import numpy as np
    gen = np.random.MT19937()
    gen._legacy_seeding(1234)  # init_genrand(1234), as std::mt19937(1234).
    low, high = 1024, 64 * 1024
    span = high - low + 1
    threshold = ((1 << 32) - span) % span
    sizes = []
    while len(sizes) < 1000:
        product = int(gen.random_raw()) * span
        if (product & 0xFFFFFFFF) < threshold:
            continue
        sizes.append((low + (product >> 32)) // 4)
    return sizes


def _resnet50_sizes():
    sizes = []
    with open(SHAPES) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                sizes.append(int(line.rstrip("\n").split("\t")[2]))
    return sizes


WORKLOADS = {"small": _small_sizes, "resnet50": _resnet50_sizes,
             "one1mib": lambda: [(1 << 20) // 4]}


# --- libraries (one rank) ----------------------------------------------------

class _Terse:
    def __init__(self, compression):
        import terse.torch as tt
        self.tt = tt
        tt.init()
        self.rank, self.size = tt.rank(), tt.size()
        self.grouped = compression == "grouped"
        self.compression = (None if compression in ("none", "autotune",
                                                    "unpipelined", "grouped")
                            else compression)

    def barrier(self):
        self.tt.barrier()

    def step(self, tensors, names):
        tt = self.tt
        if self.grouped:
            handle = tt.grouped_allreduce_async_(tensors, name="step",
                                                 op=tt.Sum)
            enqueued = time.perf_counter()
            tt.synchronize(handle)
            return enqueued
        handles = [tt.allreduce_async_(t, name=n, op=tt.Sum,
                                       compression=self.compression)
                   for t, n in zip(tensors, names)]
        enqueued = time.perf_counter()
        for h in handles:
            tt.synchronize(h)
        return enqueued

    def close(self):
        self.tt.shutdown()


class _Horovod:
    def __init__(self, compression):
        import torch
        import horovod.torch as hvd
        self.hvd, self.torch = hvd, torch
        hvd.init()
        self.rank, self.size = hvd.rank(), hvd.size()
        self.fp16 = compression == "fp16"
        self.grouped = compression == "grouped"
        if compression not in ("none", "fp16", "grouped"):
            raise SystemExit(f"horovod mode takes none, fp16 or grouped, "
                             f"not {compression!r}")

    def barrier(self):
        self.hvd.barrier()

    def step(self, tensors, names):
        hvd = self.hvd
        if self.grouped:
            handle = hvd.grouped_allreduce_async_(tensors, name="step",
                                                  op=hvd.Sum)
            enqueued = time.perf_counter()
            hvd.synchronize(handle)
            return enqueued
        if not self.fp16:
            handles = [hvd.allreduce_async_(t, name=n, op=hvd.Sum)
                       for t, n in zip(tensors, names)]
            enqueued = time.perf_counter()
            for h in handles:
                hvd.synchronize(h)
            return enqueued
        # Horovod's DistributedOptimizer with Compression.fp16: compress in
        # the gradient hook, reduce the half tensor, decompress when
        # synchronizing.
        half = self.hvd.Compression.fp16
        pending = []
        for t, n in zip(tensors, names):
            wire, ctx = half.compress(t)
            pending.append((hvd.allreduce_async_(wire, name=n, op=hvd.Sum),
                            wire, ctx, t))
        enqueued = time.perf_counter()
        for h, wire, ctx, t in pending:
            hvd.synchronize(h)
            t.copy_(half.decompress(wire, ctx))
        return enqueued

    def close(self):
        self.hvd.shutdown()


class _Mpi:
    """MPI_Allreduce through ctypes on Open MPI's libmpi (its handles are
    addresses of exported objects; MPI_IN_PLACE is (void*)1)."""

    def __init__(self, how):
        import ctypes
        self.ctypes = ctypes
        lib = ctypes.CDLL("libmpi.so.40", mode=ctypes.RTLD_GLOBAL)
        self.lib = lib

        def handle(symbol):
            return ctypes.c_void_p(ctypes.addressof(
                ctypes.c_char.in_dll(lib, symbol)))
        self.comm = handle("ompi_mpi_comm_world")
        self.float32 = handle("ompi_mpi_float")
        self.sum = handle("ompi_mpi_op_sum")
        self.in_place = ctypes.c_void_p(1)
        lib.MPI_Allreduce.argtypes = [ctypes.c_void_p] * 2 + [
            ctypes.c_int] + [ctypes.c_void_p] * 3
        provided = ctypes.c_int(0)
        if lib.MPI_Init_thread(None, None, 0, ctypes.byref(provided)) != 0:
            raise SystemExit("MPI_Init_thread failed")
        rank, size = ctypes.c_int(0), ctypes.c_int(0)
        lib.MPI_Comm_rank(self.comm, ctypes.byref(rank))
        lib.MPI_Comm_size(self.comm, ctypes.byref(size))
        self.rank, self.size = rank.value, size.value
        if how not in ("per_tensor", "flat"):
            raise SystemExit(f"mpi mode takes per_tensor or flat, not {how!r}")
        self.flat = how == "flat"
        self.buffer = None

    def barrier(self):
        self.lib.MPI_Barrier(self.comm)

    def _allreduce(self, t):
        if self.lib.MPI_Allreduce(self.in_place, t.data_ptr(), t.numel(),
                                  self.float32, self.sum, self.comm) != 0:
            raise SystemExit("MPI_Allreduce failed")

    def step(self, tensors, names):
        if self.flat:
            self._allreduce(self.buffer)
        else:
            for t in tensors:
                self._allreduce(t)
        return time.perf_counter()

    def close(self):
        self.lib.MPI_Finalize()


def worker(args):
    import torch
    torch.set_num_threads(1)
    library, _, variant = args.worker.partition(":")
    lib = {"terse": _Terse, "horovod": _Horovod, "mpi": _Mpi}[library](
        variant)
    want = lib.size * (lib.size + 1) / 2
    out = {"rank": lib.rank, "ranks": lib.size, "workloads": {}}
    tune = args.worker == "terse:autotune"
    for k, workload in enumerate(args.workloads.split(",")):
        if tune and k > 0:  # A fresh search for each workload.
            lib.close()
            lib = _Terse(variant)
        sizes = WORKLOADS[workload]()
        tensors = [torch.empty(n) for n in sizes]
        names = [f"{workload}.{i}" for i in range(len(sizes))]
        if getattr(lib, "flat", False):
            lib.buffer = torch.empty(sum(sizes))
            tensors = [lib.buffer]
        total, enqueue = [], []
        for s in range(args.autotune_steps if tune else 0):
            lib.barrier()
            lib.step(tensors, names)
        for s in range(args.warmup + args.steps):
            for t in tensors:
                t.fill_(lib.rank + 1)
            lib.barrier()
            start = time.perf_counter()
            enqueued = lib.step(tensors, names)
            end = time.perf_counter()
            if s >= args.warmup:
                total.append(end - start)
                enqueue.append(enqueued - start)
        for t in tensors:
            if t[0].item() != want or t[-1].item() != want:
                raise SystemExit(f"{args.worker} {workload}: got "
                                 f"{t[0].item()}, want {want}")
        out["workloads"][workload] = {"step_s": total, "enqueue_s": enqueue,
                                      "tensors": len(sizes),
                                      "bytes": 4 * sum(sizes)}
        lib.buffer = None
    mpi_launch.emit(out)
    lib.close()


# --- driver ------------------------------------------------------------------

def run_mode(args, mode, workloads):
    library = mode.split(":")[0]
    extra = ({"TERSE_AUTOTUNE": "1", "TERSE_AUTOTUNE_STEPS_PER_SAMPLE":
              str(args.autotune_steps_per_sample)}
             if mode == "terse:autotune" else
             {"TERSE_PIPELINE_CHUNK": "0"} if mode == "terse:unpipelined"
             else None)
    env = mpi_launch.job_env(args.np, library, extra)
    python = (mpi_launch.horovod_python() if library == "horovod"
              else sys.executable)
    program = [python, os.path.abspath(__file__), "--worker", mode,
               "--workloads", ",".join(workloads), "--warmup",
               str(args.warmup), "--steps", str(args.steps),
               "--autotune-steps", str(args.autotune_steps)]
    ranks = mpi_launch.run_job(args.np, args.transport, env, program,
                               args.timeout)
    per_workload = {}
    for w in workloads:
        steps = zip(*[r["workloads"][w]["step_s"] for r in ranks])
        enq = zip(*[r["workloads"][w]["enqueue_s"] for r in ranks])
        per_workload[w] = ([max(s) for s in steps], [max(e) for e in enq],
                           ranks[0]["workloads"][w])
    return per_workload


def _ms(v):
    return round(1000 * v, 2)


def driver(args):
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    for m in modes:
        library, _, variant = m.partition(":")
        ok = {"terse": None, "horovod": ("none", "fp16", "grouped"),
              "mpi": ("per_tensor", "flat")}
        if library not in ok or not variant or (
                ok[library] and variant not in ok[library]):
            raise SystemExit(f"unknown mode {m!r}: terse:<compressor>, "
                             "horovod:none|fp16|grouped, mpi:per_tensor|flat")
        if library == "horovod":
            mpi_launch.horovod_python()
    for w in workloads:
        if w not in WORKLOADS:
            raise SystemExit(f"unknown workload {w!r}: "
                             f"{', '.join(WORKLOADS)}")
    mpi_launch.check_transport(args.transport, args.np)
    if any(m.startswith("terse:") for m in modes):
        mpi_launch.build_terse()
    load_before = mpi_launch.load_average()
    print(f"py_allreduce_bench: {args.np} ranks, {args.rounds} rounds x "
          f"{args.steps} steps (+{args.warmup} warm-up) per mode and "
          f"workload; every mode on {mpi_launch.describe_transport(args.transport)}; "
          f"load average {load_before}", flush=True)
    steps = {(m, w): [] for m in modes for w in workloads}
    enqueue = {(m, w): [] for m in modes for w in workloads}
    info = {}
    for round_index in range(args.rounds):
        order = modes if round_index % 2 == 0 else list(reversed(modes))
        for mode in order:
            got = run_mode(args, mode, workloads)
            for w, (s, e, meta) in got.items():
                steps[(mode, w)] += s
                enqueue[(mode, w)] += e
                info[w] = (meta["tensors"], meta["bytes"])
                print(f"round {round_index + 1}/{args.rounds}  {w:<9} "
                      f"{mode:<16} median {_ms(statistics.median(s)):9.2f} ms"
                      f"  enqueue {_ms(statistics.median(e)):8.2f} ms",
                      flush=True)
    med = {k: statistics.median(v) for k, v in steps.items()}
    med_enq = {k: statistics.median(v) for k, v in enqueue.items()}
    print()
    print(f"{'workload':<9} {'mode':<16} {'median ms':>10} {'min ms':>8} "
          f"{'max ms':>8} {'enqueue ms':>11} {'us/tensor':>10} "
          f"{'vs horovod':>10}")
    summary = {"bench": "py_allreduce_bench", "ranks": args.np,
               "transport": mpi_launch.describe_transport(args.transport),
               "rounds": args.rounds, "steps": args.steps,
               "load_average_before": load_before,
               "load_average_after": mpi_launch.load_average(),
               "workloads": {}}
    for w in workloads:
        tensors, nbytes = info[w]
        entry = {"tensors": tensors, "bytes": nbytes, "median_ms": {},
                 "enqueue_ms": {}, "speed_vs_horovod": {}}
        for m in modes:
            lib_variant = m.split(":", 1)[1]
            if lib_variant in ("autotune", "unpipelined"):  # Horovod at its defaults.
                lib_variant = "none"
            hvd = med.get((f"horovod:{lib_variant}", w))
            ratio = hvd / med[(m, w)] if hvd else float("nan")
            print(f"{w:<9} {m:<16} {_ms(med[(m, w)]):10.2f} "
                  f"{_ms(min(steps[(m, w)])):8.2f} "
                  f"{_ms(max(steps[(m, w)])):8.2f} "
                  f"{_ms(med_enq[(m, w)]):11.2f} "
                  f"{1e6 * med[(m, w)] / tensors:10.1f} {ratio:10.2f}")
            entry["median_ms"][m] = _ms(med[(m, w)])
            entry["enqueue_ms"][m] = _ms(med_enq[(m, w)])
            if m.startswith("terse:") and hvd:
                entry["speed_vs_horovod"][m] = round(ratio, 3)
        per_tensor = med.get(("mpi:per_tensor", w))
        flat = med.get(("mpi:flat", w))
        for name, ref in (("speed_vs_mpi_per_tensor", per_tensor),
                          ("speed_vs_mpi_flat", flat)):
            if ref:
                entry[name] = {m: round(ref / med[(m, w)], 3) for m in modes
                               if not m.startswith("mpi:")}
        summary["workloads"][w] = entry
    print(json.dumps(summary), flush=True)


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.split("\n")[1:]))
    parser.add_argument("--np", type=int, default=4)
    parser.add_argument("--modes", default=DEFAULT_MODES)
    parser.add_argument("--workloads", default="small,resnet50")
    parser.add_argument("--transport", choices=mpi_launch.TRANSPORTS,
                        default="shm")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--autotune-steps", type=int, default=90,
                        help="terse:autotune: untimed steps of the search "
                        "(11 settings x (1 warm-up + 2) samples x "
                        "--autotune-steps-per-sample steps, and a margin)")
    parser.add_argument("--autotune-steps-per-sample", type=int, default=2)
    parser.add_argument("--timeout", type=int, default=600,
                        help="seconds per job")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
    else:
        driver(args)


if __name__ == "__main__":
    main()
