"""Training throughput of the Fashion-MNIST demo CNN: terse against PyTorch
DDP over gloo, same model, data, batch and optimizer, in one invocation.

    /usr/bin/python3 bench/torch_step_bench.py               # 4 ranks
    /usr/bin/python3 bench/torch_step_bench.py --np 2 --modes ddp,terse:none

The driver (this script without --worker) launches one `terserun -np N` job
per mode and round, interleaving the modes round by round so that machine
noise hits them alike, and reports per mode the median images/s over rounds
(each round: --warmup steps untimed, then --steps timed) and its ratio to
DDP, plus the CPU time all ranks spent per step (process time, every
thread: compute, communication and background threads), which external
load on a shared machine distorts much less than wall time. A mode is `ddp` or `terse:<compressor>[:cf]` (the compressor goes to
the engine as TERSE_COMPRESSION / TERSE_CF for that job). The last line is
one JSON object. Nothing is asserted: this is a measurement, not a test.

Transport: DDP's gloo always talks TCP over loopback. By default
(--transport tcp) terse's MPI does too (`--mca btl self,tcp`, TCP and OOB on
lo), so every mode pays the same network stack and the comparison is of
the libraries. --transport shm lets terse use Open MPI's shared memory
(vader) as tools/terserun does by default on one host: faster for terse, but
then the modes differ in transport as well as library, and the output says
so. With more ranks than cores, OMPI_MCA_mpi_yield_when_idle=1 is set for
every mode (waiting ranks yield their core).
"""

import argparse
import json
import os
import shlex
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULT_TAG = "BENCH_RESULT "


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    # One write per line: mpirun interleaves the ranks' output otherwise.
    sys.stdout.write(RESULT_TAG + json.dumps(result) + "\n")
    sys.stdout.flush()
    done()


# --- driver ------------------------------------------------------------------

def _pythonpath():
    parts = [os.path.join(ROOT, "bindings", "python"),
             os.path.join(ROOT, "bazel-bin", "bindings", "python")]
    if os.environ.get("PYTHONPATH"):
        parts.append(os.environ["PYTHONPATH"])
    return os.pathsep.join(parts)


def _results(text):
    """Every JSON object that follows a RESULT_TAG in `text`."""
    decoder = json.JSONDecoder()
    out, start = [], text.find(RESULT_TAG)
    while start >= 0:
        try:
            obj, _ = decoder.raw_decode(text, start + len(RESULT_TAG))
            out.append(obj)
        except json.JSONDecodeError:
            pass
        start = text.find(RESULT_TAG, start + 1)
    return out


def _mpirun_command(args, env):
    """tools/terserun's mpirun command for -np N (its defaults for one
    host), with the btl list set to self,tcp for --transport tcp. (mpirun
    rejects an MCA parameter given twice, so --mpi-args cannot override
    terserun's btl list: the list is edited instead.)"""
    from importlib.machinery import SourceFileLoader
    terserun = SourceFileLoader(
        "terserun", os.path.join(ROOT, "tools", "terserun")).load_module()
    launch = argparse.Namespace(np=args.np, hosts=None, hostfile=None,
                                mpi_args="", command=[])
    cmd = terserun.build_command(launch, env, os.geteuid(),
                                 os.cpu_count() or 1)
    if args.transport == "tcp":
        at = [i for i in range(len(cmd) - 2)
              if cmd[i] == "--mca" and cmd[i + 1] == "btl"]
        if len(at) != 1:
            raise SystemExit(f"terserun gave no single btl list: {cmd}")
        cmd[at[0] + 2] = "self,tcp"
    return cmd


def run_mode(args, mode):
    env = dict(os.environ, PYTHONPATH=_pythonpath())
    worker_mode = mode
    if mode.startswith("terse:"):
        name, _, cf = mode[len("terse:"):].partition(":")
        env["TERSE_COMPRESSION"] = name
        if cf:
            env["TERSE_CF"] = cf
        else:
            env.pop("TERSE_CF", None)
        worker_mode = "terse"
    elif mode != "ddp":
        raise SystemExit(f"unknown mode {mode!r}: ddp or terse:<compressor>")
    if args.np > (os.cpu_count() or 1):
        env["OMPI_MCA_mpi_yield_when_idle"] = "1"
    cmd = _mpirun_command(args, env) + [
        sys.executable, os.path.abspath(__file__), "--worker", worker_mode,
        "--port", str(_free_port()), "--batch", str(args.batch), "--warmup",
        str(args.warmup), "--steps", str(args.steps)]
    if args.verbose:
        print("+ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                          timeout=args.timeout)
    ranks = _results(proc.stdout)
    if proc.returncode != 0 or len(ranks) != args.np:
        raise RuntimeError(f"mode {mode} failed (exit {proc.returncode}):\n"
                           f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    result = next(r for r in ranks if r["rank"] == 0)
    # CPU of all ranks per step: what the mode costs, whatever else runs.
    result["cpu_ms_per_step"] = (1000 * sum(r["cpu_seconds"] for r in ranks)
                                 / args.steps)
    return result


def transport_of(args, mode):
    if mode == "ddp":
        return "gloo, TCP on lo"
    if args.transport == "tcp":
        return "Open MPI btl self,tcp, TCP on lo"
    return "Open MPI btl self,vader,tcp (shared memory)"


def driver(args):
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    transports = {m: transport_of(args, m) for m in modes}
    same = len(set(t.split(",")[-1].strip() for t in transports.values())) == 1
    print("transport: " + "; ".join(f"{m}: {t}" for m, t in transports.items()))
    if not same:
        print("NOTE: the modes do not share a transport (terse over shared "
              "memory, DDP over TCP): the ratios compare transports as well "
              "as libraries; --transport tcp compares like with like.")
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
    print()
    print(f"{'mode':<18} {'images/s (median)':>18} {'min':>8} {'max':>8} "
          f"{'vs ddp':>7} {'CPU ms/step':>12} {'vs ddp':>7}")
    for m in modes:
        ratio = medians[m] / reference if reference else float("nan")
        cpu_ratio = (cpu_medians[m] / cpu_reference if cpu_reference
                     else float("nan"))
        print(f"{m:<18} {medians[m]:18.0f} {min(results[m]):8.0f} "
              f"{max(results[m]):8.0f} {ratio:7.2f} {cpu_medians[m]:12.1f} "
              f"{cpu_ratio:7.2f}")
    summary = {
        "bench": "torch_step_bench", "ranks": args.np, "batch": args.batch,
        "steps": args.steps, "rounds": args.rounds,
        "transport": transports, "same_transport": same,
        "images_per_s": {m: round(v, 1) for m, v in medians.items()},
        "ratio_vs_ddp": ({m: round(v / reference, 3)
                          for m, v in medians.items()} if reference else {}),
        "cpu_ms_per_step": {m: round(v, 1) for m, v in cpu_medians.items()},
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
    parser.add_argument("--transport", choices=("tcp", "shm"), default="tcp",
                        help="terse's MPI transport: tcp (default, like "
                        "gloo's) or shm (shared memory; not like gloo's)")
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
