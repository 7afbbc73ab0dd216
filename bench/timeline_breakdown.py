"""Sums a terse timeline (TERSE_TIMELINE, Chrome trace events) by phase:
where the engine's time went, per rank, without a sampling profiler.

    TERSE_TIMELINE=/tmp/tl.json mpirun ... python bench/py_allreduce_bench.py \\
        --worker terse:fp16 --workloads small --warmup 0 --steps 4
    /usr/bin/python3 bench/timeline_breakdown.py /tmp/tl.json --steps 4

Prints, per rank (trace pid) and phase (NEGOTIATE, QUEUE, FUSE, COMPRESS,
COMMUNICATE, DECOMPRESS, UNFUSE, ...), the number of events, the total
milliseconds and the milliseconds per step (total / --steps). Phases of
different buckets can overlap in time, so the per-phase sums can exceed the
step's wall time. A trace cut short (no closing "]") is read up to its last
whole event. Not a test.
"""

import argparse
import collections
import json


def events(path):
    with open(path) as f:
        for line in f:
            line = line.strip().rstrip(",")
            if not line or line in ("[", "]"):
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue  # A line cut short by a crash.


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trace")
    parser.add_argument("--steps", type=int, default=1,
                        help="steps the trace holds (to divide by)")
    args = parser.parse_args()
    total = collections.defaultdict(float)
    count = collections.Counter()
    for e in events(args.trace):
        if e.get("ph") == "X":
            key = (e.get("pid", 0), e.get("name", "?"))
            total[key] += float(e.get("dur", 0)) / 1000
            count[key] += 1
    print(f"{'rank':>4} {'phase':<14} {'events':>8} {'total ms':>10} "
          f"{'ms/step':>9}")
    for (pid, name), ms in sorted(total.items()):
        print(f"{pid:>4} {name:<14} {count[(pid, name)]:8d} {ms:10.1f} "
              f"{ms / args.steps:9.2f}")


if __name__ == "__main__":
    main()
