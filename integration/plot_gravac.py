"""Turns the slow-network experiment's metrics into docs/results/gravac.md and
PNG plots (accuracy against wall time, CF per bucket against step).

    /usr/bin/python3 integration/plot_gravac.py --results docs/results/gravac

Reads <results>/<rate>/<config>.jsonl as written by gravac_experiment.py.
"""

import argparse
import glob
import json
import os

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STATIC = ["topk-10", "topk-100", "topk-1000", "dgc-100"]


def load(rate_dir):
    runs = {}
    for path in sorted(glob.glob(os.path.join(rate_dir, "*.jsonl"))):
        with open(path) as f:
            records = [json.loads(line) for line in f if line.strip()]
        if records:
            runs[os.path.basename(path)[:-len(".jsonl")]] = records
    return runs


def time_to(records, target):
    for r in records:
        if r["test_accuracy"] >= target:
            return r["wall"]
    return None


def fmt(v, spec):
    return "—" if v is None else format(v, spec)


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def rate_section(rate, runs, figure_dir):
    lines = [f"## {rate}", ""]
    dense = runs.get("dense") or runs.get("ddp")
    if dense is None:
        return lines + ["(no dense run)", ""]
    target = dense[-1]["test_accuracy"] - 0.005
    lines += [f"Target accuracy: {target:.4f} (dense final minus 0.5 points).", "",
              "| run | time to target (s) | final accuracy | step time (s) | bytes sent / step | steps |",
              "|---|---|---|---|---|---|"]
    ttt = {}
    for name, records in runs.items():
        ttt[name] = time_to(records, target)
        last = records[-1]
        lines.append(f"| {name} | {fmt(ttt[name], '.1f')} | {last['test_accuracy']:.4f} | "
                     f"{last['step_time']:.3f} | {fmt(last.get('bytes_sent_per_step'), ',')} | "
                     f"{last['step']} |")
    lines.append("")
    for g in ("gravac-topk", "gravac-dgc"):
        if g not in runs:
            continue
        statics = [ttt[s] for s in STATIC if ttt.get(s) is not None]
        best_static = min(statics) if statics else None
        lines.append(f"{g}: time to target / dense {fmt(ratio(ttt[g], ttt.get('dense')), '.3f')}, "
                     f"/ DDP+PowerSGD-4 {fmt(ratio(ttt[g], ttt.get('ddp-powersgd-4')), '.3f')}, "
                     f"/ best static {fmt(ratio(ttt[g], best_static), '.3f')}, "
                     f"/ Accordion {fmt(ratio(ttt[g], ttt.get('accordion')), '.3f')}; "
                     f"final accuracy − dense {runs[g][-1]['test_accuracy'] - dense[-1]['test_accuracy']:+.4f}; "
                     f"step time / dense {fmt(ratio(runs[g][-1]['step_time'], dense[-1]['step_time']), '.3f')}.")
    lines.append("")

    fig, ax = plt.subplots(figsize=(8, 5))
    for name, records in runs.items():
        ax.plot([r["wall"] for r in records], [r["test_accuracy"] for r in records],
                label=name, marker="." if name.startswith("gravac") else None)
    ax.axhline(target, color="grey", linestyle=":", label="target")
    ax.set_xlabel("training time (s)")
    ax.set_ylabel("test accuracy")
    ax.set_title(f"Fashion-MNIST MLP, 4 ranks, {rate} per link")
    ax.legend(fontsize=7)
    acc_png = f"gravac_accuracy_{rate}.png"
    fig.savefig(os.path.join(figure_dir, acc_png), dpi=110, bbox_inches="tight")
    plt.close(fig)
    lines += [f"![accuracy vs time]({acc_png})", ""]

    fig, ax = plt.subplots(figsize=(8, 4))
    drew = False
    for name in ("gravac-topk", "gravac-dgc", "accordion"):
        for bucket_series in cf_series(runs.get(name, [])).items():
            (bucket, points) = bucket_series
            ax.step([p[0] for p in points], [p[1] for p in points], where="post",
                    label=f"{name} bucket {bucket}")
            drew = True
    if drew:
        ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.set_ylabel("compression factor sent")
        ax.legend(fontsize=7)
        cf_png = f"gravac_cf_{rate}.png"
        fig.savefig(os.path.join(figure_dir, cf_png), dpi=110, bbox_inches="tight")
        lines += [f"![CF per bucket vs step]({cf_png})", ""]
    plt.close(fig)
    return lines


def cf_series(records):
    series = {}
    for r in records:
        policy = r.get("policy")
        if not isinstance(policy, list):
            continue
        for b in policy:
            series.setdefault(b.get("bucket"), []).append((r["step"], b.get("cf") or 1))
    return series


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--results", required=True)
    args = parser.parse_args()
    figure_dir = os.path.dirname(os.path.abspath(args.results))
    lines = ["# GraVAC on a slow network", "",
             "Fashion-MNIST, MLP 784-1024-1024-10, batch 64 per rank, 4 ranks in 4 network "
             "namespaces joined by a bridge, `tc tbf` on both ends of every link. Produced by "
             "`integration/gravac_experiment.py`; plots by `integration/plot_gravac.py`.", ""]
    for rate_dir in sorted(glob.glob(os.path.join(args.results, "*"))):
        if os.path.isdir(rate_dir):
            lines += rate_section(os.path.basename(rate_dir), load(rate_dir), figure_dir)
    with open(os.path.join(figure_dir, "gravac.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote", os.path.join(figure_dir, "gravac.md"))


if __name__ == "__main__":
    main()
