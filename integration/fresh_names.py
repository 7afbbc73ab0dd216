"""Memory held for tensor names that never come back: every step issues
--per-step allreduces under fresh names (no name= given, so the engine
names them 'allreduce.noname.N'), submitted together so that they share a
bucket and its fusion buffer, and synchronizes them; RSS is sampled every
--report steps. Without forgetting (TERSE_FORGET_AFTER_STEPS=0) every step
leaves a bucket and its buffer behind; with it the held state is bounded.

    tests/mpirun.sh 4 /usr/bin/python3 integration/fresh_names.py \\
        --steps 2000 --forget-after 0       # PYTHONPATH=bindings/python

Rank 0 prints one JSON line: RSS (MiB) at each report, and the growth from
the first report (after --report steps of warm-up) to the end.
"""

import argparse
import json
import os
import sys

import torch

import terse.torch as terse


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main():
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        # As the soak: freed blocks over 1 MiB go back to the system.
        os.environ["MALLOC_MMAP_THRESHOLD_"] = str(1 << 20)
        os.execv(sys.executable, [sys.executable] + sys.argv)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--per-step", type=int, default=4)
    p.add_argument("--elements", type=int, default=16384,
                   help="float32 elements per tensor")
    p.add_argument("--report", type=int, default=200)
    p.add_argument("--forget-after", type=int, default=None,
                   help="TERSE_FORGET_AFTER_STEPS (default: the engine's)")
    args = p.parse_args()
    torch.set_num_threads(1)
    config = {}
    if args.forget_after is not None:
        config["TERSE_FORGET_AFTER_STEPS"] = str(args.forget_after)
    terse.init(config=config)
    xs = [torch.ones(args.elements) for _ in range(args.per_step)]
    trace = []
    for step in range(1, args.steps + 1):
        handles = [terse.allreduce_async(x, op=terse.Sum) for x in xs]
        for h in handles:
            out = terse.synchronize(h)
            if float(out[0]) != terse.size():
                sys.exit(f"rank {terse.rank()}: step {step}: got {out[0]}")
        if step % args.report == 0:
            trace.append((step, round(rss_kib() / 1024, 1)))
    if terse.rank() == 0:
        first, last = trace[0][1], trace[-1][1]
        print("fresh_names: " + json.dumps({
            "ranks": terse.size(), "steps": args.steps,
            "per_step": args.per_step,
            "bytes_per_tensor": 4 * args.elements,
            "forget_after": args.forget_after, "rss_mib": trace,
            "growth_mib": round(last - first, 1),
            "growth_pct": round(100 * (last - first) / first, 2)}),
            flush=True)
    terse.shutdown()


if __name__ == "__main__":
    main()
