#!/usr/bin/env python3
"""terse's CUDA exact top-k against torch.topk on the same GPU, same run.

terse's figures come from the TopK benchmark that tools/gpu_check.sh builds
with nvcc and runs just before this (its log lines
`PASS TopK d=2^N k=K: T ms/call, ...`); pass that log with --log. torch's
side is torch.topk(a, k, sorted=False) on a = |x| computed beforehand
(outside the timed region, as terse's kernel selects by magnitude and
returns its indices unsorted), x uniform in [-1, 1) like the benchmark's
input (the values differ: the benchmark draws them with xorshift on the
host). Timed with CUDA events, the median of --reps calls after a warm-up.

Prints a table, then one JSON line: {"bench": "topk_cuda_vs_torch", rows:
[{log2_d, k, terse_ms, torch_ms, speedup}]}. Without a CUDA torch it prints
"skipped: no device" and exits 0.
"""
import argparse
import json
import re
import statistics
import sys

import torch


def terse_figures(path):
    rows = {}
    pattern = re.compile(r"^PASS TopK d=2\^(\d+) k=(\d+): ([0-9.]+) ms/call")
    with open(path) as f:
        for line in f:
            m = pattern.match(line)
            if m:
                rows[int(m.group(1))] = (int(m.group(2)), float(m.group(3)))
    return rows


def torch_ms(log2_d, k, reps):
    x = torch.rand(1 << log2_d, device="cuda") * 2 - 1
    a = x.abs()
    torch.topk(a, k, sorted=False)  # warm-up
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        torch.topk(a, k, sorted=False)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", required=True,
                        help="the TopK benchmark's output")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("skipped: no device")
        return 0
    figures = terse_figures(args.log)
    if not figures:
        print(f"no passing TopK rows in {args.log}")
        return 1
    rows = []
    print(f"{'d':>6} {'k':>9} {'terse ms':>9} {'torch ms':>9} {'torch/terse':>11}")
    for log2_d, (k, terse) in sorted(figures.items()):
        theirs = torch_ms(log2_d, k, args.reps)
        rows.append({"log2_d": log2_d, "k": k, "terse_ms": terse,
                     "torch_ms": round(theirs, 4),
                     "speedup": round(theirs / terse, 3)})
        print(f"{'2^%d' % log2_d:>6} {k:>9} {terse:>9.3f} {theirs:>9.3f} "
              f"{theirs / terse:>10.2f}x")
    print(json.dumps({"bench": "topk_cuda_vs_torch",
                      "device": torch.cuda.get_device_name(),
                      "torch": torch.__version__, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
