"""Training throughput of the Fashion-MNIST demo CNN: terse against PyTorch
DDP over gloo and Horovod 0.28.1, same model, data, batch and optimizer, in
one invocation.

    /usr/bin/python3 bench/torch_step_bench.py               # 4 ranks
    /usr/bin/python3 bench/torch_step_bench.py --np 2 --modes ddp,terse:none
    /usr/bin/python3 bench/torch_step_bench.py --transport shm \
        --modes terse:none,horovod:none,terse:fp16,horovod:fp16

The driver (this script without --worker) launches one mpirun job per mode
and round (bench/mpi_launch.py: tools/terserun's command for every mode),
interleaving the modes round by round so that machine noise hits them
alike, and reports per mode the median images/s over rounds (each round:
--warmup steps untimed, then --steps timed), its ratio to DDP and to
Horovod's same compression, plus the CPU time all ranks spent per step
(process time, every thread: compute, communication and background threads),
which external load on a shared machine distorts much less than wall time.
A mode is `ddp`, `terse:<compressor>[:cf]` (the compressor goes to the engine
as TERSE_COMPRESSION / TERSE_CF for that job) or `horovod:none|fp16`
(horovod.torch.DistributedOptimizer with Compression.none / fp16, from the
environment bench/peers/horovod.sh builds). The last line is one JSON
object. Nothing is asserted: this is a measurement, not a test.

Transport: DDP's gloo always talks TCP over loopback. terse and Horovod
always share one mpirun command. By default (--transport tcp) it uses
`--mca btl self,tcp` (TCP and OOB on lo), so every mode pays the same
network stack. --transport shm is terserun's one-host default (shared memory
plus TCP on lo): terse and Horovod still compare like with like, DDP then
differs in transport as well as library, and the output says so.
--transport netns runs the MPI modes across integration/netns's namespaces.
With more ranks than cores, OMPI_MCA_mpi_yield_when_idle=1 is set for every
mode (waiting ranks yield their core).
"""

import argparse
import json
import os
import shlex
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mpi_launch  # noqa: E402

ROOT = mpi_launch.ROOT


# --- one rank ----------------------------------------------------------------

def worker(args):
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, os.path.join(ROOT, "integration"))
    from fashion_mnist_data import load, shard
    from torch_fashion_mnist import Net

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    if args.worker == "ddp":
        import torch.distributed as dist
        rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
        size = int(os.environ["OMPI_COMM_WORLD_SIZE"])
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank,
            world_size=size)
        model = torch.nn.parallel.DistributedDataParallel(model)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        done = dist.destroy_process_group
    elif args.worker.startswith("horovod:"):
        # Horovod's documented recipe, as its examples write it.
        import horovod.torch as hvd
        hvd.init()
        rank, size = hvd.rank(), hvd.size()
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        compression = {"none": hvd.Compression.none,
                       "fp16": hvd.Compression.fp16}[args.worker[8:]]
        optimizer = hvd.DistributedOptimizer(
            optimizer, named_parameters=model.named_parameters(),
            compression=compression)
        done = hvd.shutdown
    else:
        import terse.torch as tt
        tt.init()
        rank, size = tt.rank(), tt.size()
        tt.broadcast_parameters(model.state_dict(), root_rank=0)
        optimizer = tt.DistributedOptimizer(
            optimizer, named_parameters=model.named_parameters())
        done = tt.shutdown

    train_x, train_y, _, _ = load()
    x, y = shard(train_x, train_y, rank, size)
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(
        rank))
    batch = args.batch

    def step(i):
        j = (i * batch) % (len(x) - batch)
        idx = order[j:j + batch]
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        optimizer.step()
        return loss

    for i in range(args.warmup):
        step(i)
    start = time.perf_counter()
    cpu_start = time.process_time()  # Every thread of this rank.
    for i in range(args.warmup, args.warmup + args.steps):
        loss = step(i)
    loss.item()
    seconds = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    result = {"mode": args.worker, "rank": rank, "ranks": size,
              "seconds": seconds, "cpu_seconds": cpu}
    if rank == 0:
        result["images_per_s"] = args.steps * batch * size / seconds
        result["step_ms"] = 1000 * seconds / args.steps
    mpi_launch.emit(result)
    done()


# --- driver ------------------------------------------------------------------

def run_mode(args, mode):
    library = mode.split(":")[0]
    extra = {}
    if library == "terse":
        name, _, cf = mode[len("terse:"):].partition(":")
        extra["TERSE_COMPRESSION"] = name
        if cf:
            extra["TERSE_CF"] = cf
    elif mode not in ("ddp", "horovod:none", "horovod:fp16"):
        raise SystemExit(f"unknown mode {mode!r}: ddp, terse:<compressor>[:cf]"
                         " or horovod:none|fp16")
    env = mpi_launch.job_env(args.np, library, extra)
    if library == "terse" and not extra.get("TERSE_CF"):
        env.pop("TERSE_CF", None)
    python = (mpi_launch.horovod_python() if library == "horovod"
              else sys.executable)
    program = [python, os.path.abspath(__file__), "--worker", mode,
               "--port", str(mpi_launch.free_port()), "--batch",
               str(args.batch), "--warmup", str(args.warmup), "--steps",
               str(args.steps)]
    if args.verbose:
        cmd = mpi_launch.mpirun_command(args.np, args.transport, env)
        print("+ " + " ".join(shlex.quote(c) for c in cmd + program),
              flush=True)
    ranks = mpi_launch.run_job(args.np, args.transport, env, program,
                               args.timeout)
    result = ranks[0]
    # CPU of all ranks per step: what the mode costs, whatever else runs.
    result["cpu_ms_per_step"] = (1000 * sum(r["cpu_seconds"] for r in ranks)
                                 / args.steps)
    return result


def transport_of(args, mode):
    if mode == "ddp":
        return "gloo, TCP on lo"
    return mpi_launch.describe_transport(args.transport)


def _kind_of_transport(args, mode):
    if mode == "ddp" or args.transport == "tcp":
        return "tcp-lo"
    return args.transport


def _horovod_peer(mode):
    """The Horovod mode `mode` is compared with: terse:none with
    horovod:none, terse:fp16 with horovod:fp16; None for the others."""
    if mode in ("terse:none", "terse:fp16"):
        return "horovod:" + mode.split(":")[1]
    return None


def driver(args):
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if args.transport == "netns" and "ddp" in modes:
        raise SystemExit("ddp (gloo on 127.0.0.1) cannot run across "
                         "namespaces: drop it with --transport netns")
    if any(m.startswith("horovod:") for m in modes):
        mpi_launch.horovod_python()
    mpi_launch.check_transport(args.transport, args.np)
    if any(m.startswith("terse:") for m in modes):
        mpi_launch.build_terse()
    transports = {m: transport_of(args, m) for m in modes}
    same = len(set(_kind_of_transport(args, m) for m in modes)) == 1
    load_before = mpi_launch.load_average()
    print(f"torch_step_bench: {args.np} ranks, load average {load_before}")
    print("transport: " + "; ".join(f"{m}: {t}" for m, t in transports.items()))
    if not same:
        print("NOTE: the modes do not share a transport (MPI over shared "
              "memory, DDP's gloo over TCP): ratios to ddp compare transports "
              "as well as libraries (--transport tcp compares like with "
              "like); terse and horovod share the mpirun command.")
    results = {m: [] for m in modes}
    cpu = {m: [] for m in modes}
    for round_index in range(args.rounds):
        order = modes if round_index % 2 == 0 else list(reversed(modes))
        for mode in order:
            r = run_mode(args, mode)
            results[mode].append(r["images_per_s"])
            cpu[mode].append(r["cpu_ms_per_step"])
            print(f"round {round_index + 1}/{args.rounds}  {mode:<18} "
                  f"{r['images_per_s']:9.0f} images/s  "
                  f"{r['step_ms']:7.2f} ms/step  "
                  f"{r['cpu_ms_per_step']:7.1f} CPU ms/step (all ranks)",
                  flush=True)
    medians = {m: statistics.median(v) for m, v in results.items()}
    cpu_medians = {m: statistics.median(v) for m, v in cpu.items()}
    reference = medians.get("ddp")
    cpu_reference = cpu_medians.get("ddp")
    nan = float("nan")
    print()
    print(f"{'mode':<18} {'images/s (median)':>18} {'min':>8} {'max':>8} "
          f"{'vs ddp':>7} {'vs horovod':>10} {'CPU ms/step':>12} "
          f"{'vs ddp':>7} {'vs horovod':>10}")
    vs_horovod, cpu_vs_horovod = {}, {}
    for m in modes:
        peer = _horovod_peer(m)
        if peer in medians:
            vs_horovod[m] = medians[m] / medians[peer]
            cpu_vs_horovod[m] = cpu_medians[m] / cpu_medians[peer]
        ratio = medians[m] / reference if reference else nan
        cpu_ratio = cpu_medians[m] / cpu_reference if cpu_reference else nan
        print(f"{m:<18} {medians[m]:18.0f} {min(results[m]):8.0f} "
              f"{max(results[m]):8.0f} {ratio:7.2f} "
              f"{vs_horovod.get(m, nan):10.2f} {cpu_medians[m]:12.1f} "
              f"{cpu_ratio:7.2f} {cpu_vs_horovod.get(m, nan):10.2f}")
    summary = {
        "bench": "torch_step_bench", "ranks": args.np, "batch": args.batch,
        "steps": args.steps, "rounds": args.rounds,
        "transport": transports, "same_transport": same,
        "load_average_before": load_before,
        "load_average_after": mpi_launch.load_average(),
        "images_per_s": {m: round(v, 1) for m, v in medians.items()},
        "ratio_vs_ddp": ({m: round(v / reference, 3)
                          for m, v in medians.items()} if reference else {}),
        "ratio_vs_horovod": {m: round(v, 3) for m, v in vs_horovod.items()},
        "cpu_ms_per_step": {m: round(v, 1) for m, v in cpu_medians.items()},
        "cpu_ratio_vs_horovod": {m: round(v, 3)
                                 for m, v in cpu_vs_horovod.items()},
    }
    print(json.dumps(summary), flush=True)


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.split("\n")[1:]))
    parser.add_argument("--np", type=int, default=4)
    parser.add_argument("--modes",
                        default="ddp,terse:none,terse:fp16,terse:topk:100")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--transport", choices=mpi_launch.TRANSPORTS,
                        default="tcp",
                        help="the MPI modes' transport: tcp (default, like "
                        "gloo's), shm (terserun's: shared memory; not like "
                        "gloo's) or netns (integration/netns; no ddp)")
    parser.add_argument("--batch", type=int, default=32,
                        help="images per rank per step")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--timeout", type=int, default=600,
                        help="seconds per job")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
    else:
        driver(args)


if __name__ == "__main__":
    main()
