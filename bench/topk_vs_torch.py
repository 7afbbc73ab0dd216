#!/usr/bin/python3
"""Times torch.topk against terse's exact top-k, like for like.

Both sides get the same input (d = 2^24 Gaussian floats unless the C++ JSON
says otherwise), the same k (1%) and the same thread count N: torch runs
under torch.set_num_threads(N) and terse's kernel with num_threads = N
(compress_bench --threads=N; the same kernel the engine's topk compressor
runs, whose CompressorOptions.num_threads is 0 = the hardware threads
divided among the local ranks: the Python binding has no top-k call of its
own). N defaults to os.cpu_count(), what one process gets by default.

torch's side is torch.topk(a, k, sorted=False) on a = x.abs() computed
beforehand (outside the timed region), since terse's kernel selects by
magnitude and returns its k indices unsorted. For reference only, the table
also shows torch's side at 1 thread (does torch use the N threads on one 1-D
tensor?) and the old, unfair form torch.topk(x.abs(), k) (sorted, with the
abs() allocation timed).

terse's figure comes from compress_bench's final JSON line: pass it with
--json FILE (a file holding the bench output; its thread count is then
used for torch), or let this script run the binary (--bench PATH, default
bazel-bin/bench/compress_bench). Prints a table, then one JSON line with the
speedup (torch sorted=False / terse, same threads).

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
    cmd = [args.bench, "--threads=%d" % args.threads]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    sys.stdout.write(out.stdout)
    return last_json_line(out.stdout)


def median_ms(fn, reps):
    fn()  # Warm-up.
    times = []
    for _ in range(max(1, reps)):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="file with compress_bench output")
    parser.add_argument("--bench",
                        default=os.path.join(root, "bazel-bin", "bench",
                                             "compress_bench"))
    parser.add_argument("--threads", type=int, default=0,
                        help="threads for both (default: os.cpu_count())")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    args.threads = args.threads or os.cpu_count() or 1

    terse = terse_result(args)
    import torch  # After the bench ran, so it does not compete for memory.

    threads = int(terse["threads"])
    d, k = int(terse["d"]), int(terse["k"])
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(d, generator=gen)
    a = x.abs()  # Outside the timed region.
    torch.set_num_threads(1)
    torch_1t_ms = median_ms(lambda: torch.topk(a, k, sorted=False), args.reps)
    torch.set_num_threads(threads)
    torch_ms = median_ms(lambda: torch.topk(a, k, sorted=False), args.reps)
    torch_old_ms = median_ms(lambda: torch.topk(x.abs(), k), args.reps)
    terse_ms = float(terse["topk_ms"])
    speedup = torch_ms / terse_ms
    print("topk_vs_torch: d = %d, k = %d, threads = %d for both, torch %s" %
          (d, k, threads, torch.__version__))
    print("%-52s %10s" % ("operation", "ms"))
    print("%-52s %10.2f" % ("torch.topk(a, k, sorted=False), a = |x| given",
                            torch_ms))
    print("%-52s %10.2f" % ("terse exact top-k of |x| (compress_bench)",
                            terse_ms))
    print("%-52s %10.2f" % ("SPEEDUP (torch / terse), same threads", speedup))
    print("reference only:")
    print("%-52s %10.2f" % ("  torch.topk(a, k, sorted=False), 1 thread",
                            torch_1t_ms))
    print("%-52s %10.2f" % ("  torch.topk(x.abs(), k) (sorted, abs timed)",
                            torch_old_ms))
    print(json.dumps({
        "bench": "topk_vs_torch",
        "compares": "torch.topk(a, k, sorted=False) on precomputed |x| vs "
                    "terse exact top-k, same threads",
        "d": d,
        "k": k,
        "threads": threads,
        "torch_topk_ms": round(torch_ms, 3),
        "terse_topk_ms": round(terse_ms, 3),
        "speedup": round(speedup, 3),
        "reference": {
            "torch_topk_1thread_ms": round(torch_1t_ms, 3),
            "torch_topk_sorted_abs_timed_ms": round(torch_old_ms, 3),
        },
        "target_speedup": 20,
        "pass": speedup >= 20,
    }))


if __name__ == "__main__":
    main()
