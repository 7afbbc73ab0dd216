#!/usr/bin/python3
"""Times torch.topk(x.abs(), k) against terse's exact top-k (compress_bench).

Same size (d = 2^24 floats unless the C++ JSON says otherwise), same k (1%),
same thread count. terse's figure comes from compress_bench's final JSON
line: pass it with --json FILE (a file holding the bench output), or let
this script run the binary (--bench PATH, default bazel-bin/bench/
compress_bench). Prints a table, then one JSON line with the speedup.
Target: terse >= 20x faster than torch.topk.

Usage: /usr/bin/python3 bench/topk_vs_torch.py [--json F | --bench PATH]
           [--threads N] [--reps R]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def last_json_line(text):
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            return json.loads(line)
    raise ValueError("no JSON line in the bench output")


def terse_result(args):
    if args.json:
        with open(args.json) as f:
            return last_json_line(f.read())
    cmd = [args.bench]
    if args.threads:
        cmd.append("--threads=%d" % args.threads)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    sys.stdout.write(out.stdout)
    return last_json_line(out.stdout)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="file with compress_bench output")
    parser.add_argument("--bench",
                        default=os.path.join(root, "bazel-bin", "bench",
                                             "compress_bench"))
    parser.add_argument("--threads", type=int, default=0,
                        help="threads (default: the bench's)")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()

    terse = terse_result(args)
    import torch  # After the bench ran, so it does not compete for memory.

    threads = args.threads or int(terse["threads"])
    d, k = int(terse["d"]), int(terse["k"])
    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(d, generator=gen)
    torch.topk(x.abs(), k)  # Warm-up.
    times = []
    for _ in range(max(1, args.reps)):
        t0 = time.perf_counter()
        torch.topk(x.abs(), k)
        times.append((time.perf_counter() - t0) * 1e3)
    torch_ms = statistics.median(times)
    terse_ms = float(terse["topk_ms"])
    speedup = torch_ms / terse_ms
    print("topk_vs_torch: d = %d, k = %d, threads = %d, torch %s" %
          (d, k, threads, torch.__version__))
    print("%-36s %10s" % ("operation", "ms"))
    print("%-36s %10.2f" % ("torch.topk(x.abs(), k)", torch_ms))
    print("%-36s %10.2f" % ("terse exact top-k (compress_bench)", terse_ms))
    print("%-36s %10.2f" % ("speedup (torch / terse)", speedup))
    print(json.dumps({
        "bench": "topk_vs_torch",
        "d": d,
        "k": k,
        "threads": threads,
        "torch_topk_ms": round(torch_ms, 3),
        "terse_topk_ms": round(terse_ms, 3),
        "speedup": round(speedup, 3),
        "target_speedup": 20,
        "pass": speedup >= 20,
    }))


if __name__ == "__main__":
    main()
