"""Time to target over several seeds (integration/gravac_experiment.py --seed).

One seed gives one accuracy curve per configuration, and where two
configurations train alike the step at which each first reaches the target
(dense's final accuracy minus 0.5 points, evaluated every 25 steps) is
decided by a few test images. This script reads the runs of several seeds,
each seed's target from its own dense run at --rate none, and prints per
seed and over the seeds (median, and the seeds on which the bound holds)
the ratios of issue 16's time-to-target targets:

    /usr/bin/python3 integration/seed_summary.py --results /tmp/seeds \
        --seeds 0,1,2,3,4 --rate 100mbit [--plot accuracy.png]

It expects <results>/none/dense@sS.jsonl and <results>/<rate>/NAME@sS.jsonl
for NAME in ddp-powersgd-4, powersgd-4, gravac-portfolio. Prints a markdown
table and one JSON line; --plot writes test accuracy against training time,
one panel per seed, with its target.
"""

import argparse
import json
import os
import statistics
import sys

from plot_gravac import ACCURACY_SLACK, fmt, time_to

RUNS = ("ddp-powersgd-4", "powersgd-4", "gravac-portfolio")
# (numerator, denominator, bound): issue 16's targets on time to target.
BOUNDS = (("powersgd-4", "ddp-powersgd-4", 1.0),
          ("gravac-portfolio", "ddp-powersgd-4", 1.0),
          ("gravac-portfolio", "powersgd-4", 1.1))


def load(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        records = [json.loads(line) for line in f if line.strip()]
    return records or None


def plot(curves, rate, path):
    import matplotlib.pyplot as plt  # Agg, chosen by plot_gravac.
    fig, axes = plt.subplots(1, len(curves), figsize=(4 * len(curves), 3.6),
                             sharey=True, squeeze=False)
    for ax, (seed, target, runs) in zip(axes[0], curves):
        for name, records in runs.items():
            ax.plot([r["wall"] for r in records],
                    [r["test_accuracy"] for r in records], label=name, lw=1.2)
        ax.axhline(target, color="grey", ls="--", lw=0.8)
        ax.set_title(f"seed {seed} (target {target:.4f})", fontsize=9)
        ax.set_xlabel("training time (s)")
        ax.set_ylim(0.80, 0.87)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("test accuracy")
    axes[0][0].legend(fontsize=7, loc="lower right")
    fig.suptitle(f"MLP at {rate}: time to target over seeds", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", required=True)
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--rate", default="100mbit")
    parser.add_argument("--plot", default="", help="PNG of the curves")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]

    rows, ratios = [], {b: [] for b in BOUNDS}
    curves = []  # (seed, target, {name: records})
    for seed in seeds:
        dense = load(os.path.join(args.results, "none", f"dense@s{seed}.jsonl"))
        if dense is None:
            sys.exit(f"seed {seed}: no dense run at --rate none under {args.results}")
        target = dense[-1]["test_accuracy"] - ACCURACY_SLACK
        runs = {n: load(os.path.join(args.results, args.rate, f"{n}@s{seed}.jsonl"))
                for n in RUNS}
        missing = [n for n, r in runs.items() if r is None]
        if missing:
            sys.exit(f"seed {seed}: no runs {missing} under {args.results}/{args.rate}")
        ttt = {n: time_to(r, target) for n, r in runs.items()}
        curves.append((seed, target, runs))
        row = {"seed": seed, "target": target,
               "time_to_target": ttt,
               "final": {n: r[-1]["test_accuracy"] for n, r in runs.items()},
               "dense_final": dense[-1]["test_accuracy"],
               "ms_per_step": {n: 1000 * r[-1]["wall"] / r[-1]["step"]
                               for n, r in runs.items()}}
        for num, den, bound in BOUNDS:
            value = (ttt[num] / ttt[den]
                     if ttt[num] is not None and ttt[den] is not None else None)
            row[f"{num}/{den}"] = value
            ratios[(num, den, bound)].append(value)
        rows.append(row)

    print("| seed | target | " + " | ".join(f"{n} s (final, ms/step)" for n in RUNS)
          + " | " + " | ".join(f"{n}/{d}" for n, d, _ in BOUNDS) + " |")
    print("|---" * (2 + len(RUNS) + len(BOUNDS)) + "|")
    for row in rows:
        cells = [f"{fmt(row['time_to_target'][n], '.1f')} ({row['final'][n]:.4f}, "
                 f"{row['ms_per_step'][n]:.1f})" for n in RUNS]
        cells += [f"{fmt(row[f'{n}/{d}'], '.3f')}×" for n, d, _ in BOUNDS]
        print(f"| {row['seed']} | {row['target']:.4f} | " + " | ".join(cells) + " |")
    summary = {}
    print()
    for (num, den, bound), values in ratios.items():
        known = [v for v in values if v is not None]
        median = statistics.median(known) if known else None
        held = sum(1 for v in known if v <= bound)
        summary[f"{num}/{den}"] = {"bound": bound, "median": median, "values": values,
                                   "seeds_within_bound": held, "seeds": len(values)}
        print(f"{num} / {den}: median {fmt(median, '.3f')}× over {len(known)} seeds "
              f"(bound {bound}×; held on {held} of {len(values)})")
    if args.plot:
        plot(curves, args.rate, args.plot)
    print(json.dumps({"seeds": seeds, "rate": args.rate, "runs": rows, "summary": summary},
                     sort_keys=True))


if __name__ == "__main__":
    main()
