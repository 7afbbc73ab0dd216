"""Turns the slow-network experiment's metrics into docs/results/gravac.md and
PNG plots (accuracy against wall time, CF per bucket against step).

    /usr/bin/python3 integration/plot_gravac.py --results docs/results/gravac

Reads <results>/<rate>/<config>.jsonl and <results>/<rate>/meta.json as
written by gravac_experiment.py. Every figure in the document comes from those
files; nothing is typed in by hand.
"""

import argparse
import glob
import json
import os
import re

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# The static sweep GraVAC is compared with ("best static CF").
STATIC = ["topk-10", "topk-100", "topk-1000", "dgc-100", "topk-100-mc"]
GRAVAC = ["gravac-topk", "gravac-dgc", "gravac-dgc-eps0.3"]
ORDER = ["dense", "fp16", "topk-10", "topk-100", "topk-1000", "dgc-100", "topk-100-mc",
         "accordion", "gravac-topk", "gravac-dgc", "gravac-dgc-eps0.3", "gravac-topk-eps0.9",
         "ddp", "ddp-powersgd-1", "ddp-powersgd-4"]
# Targets of issue 7 at a rate limit: ratio bounds on time to target.
TIME_TARGETS = [("dense", "dense", 0.1), ("DDP + PowerSGD rank 4", "ddp-powersgd-4", 1.0),
                ("best static CF", "best-static", 1.1), ("Accordion", "accordion", 0.8)]
ACCURACY_SLACK = 0.005  # 0.5 points
UNLIMITED_STEP_BOUND = 1.05


def load(rate_dir):
    runs = {}
    for path in glob.glob(os.path.join(rate_dir, "*.jsonl")):
        with open(path) as f:
            records = [json.loads(line) for line in f if line.strip()]
        if records:
            runs[os.path.basename(path)[:-len(".jsonl")]] = records
    meta = {}
    if os.path.exists(os.path.join(rate_dir, "meta.json")):
        with open(os.path.join(rate_dir, "meta.json")) as f:
            meta = json.load(f)
    ordered = {n: runs[n] for n in ORDER if n in runs}
    ordered.update({n: r for n, r in sorted(runs.items()) if n not in ordered})
    return ordered, meta


def time_to(records, target):
    for r in records:
        if r["test_accuracy"] >= target:
            return r["wall"]
    return None


def fmt(v, spec):
    return "—" if v is None else format(v, spec)


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def mean_step(records):
    return records[-1]["wall"] / records[-1]["step"]


def bytes_per_step(records):
    last = records[-1]
    if last.get("bytes_sent_total") is None:
        return last.get("bytes_sent_per_step")
    return last["bytes_sent_total"] / last["step"]


def cf_series(records):
    """bucket -> [(step, cf sent)] at every change (cf 1 = dense)."""
    series = {}
    for r in records:
        for step, bucket, cf in r.get("cf_changes", []):
            series.setdefault(bucket, []).append((step, cf or 1))
    if series:
        last = records[-1]["step"]
        for points in series.values():
            points.append((last, points[-1][1]))
    return series


def gain_series(records):
    """bucket -> [(step, gain_min, gain_cand)] from GraVAC's policy lines."""
    series = {}
    for r in records:
        for p in r.get("policy", []):
            if not isinstance(p, dict):
                continue
            m = re.search(r"gain_min=([0-9.e-]+) gain_cand=([0-9.e-]+)", p.get("policy", ""))
            if m:
                series.setdefault(p["bucket"], []).append(
                    (r["step"], float(m.group(1)), float(m.group(2))))
    return series


def verdict(ok):
    return "**met**" if ok else "**not met**"


def summary_table(runs, meta, target):
    lines = ["| run | time to target (s) | final accuracy | mean step time (s) | "
             "median step time, last window (s) | bytes sent / step / rank | steps | "
             "load (1-min avg, mean / max) | finished |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, records in runs.items():
        last = records[-1]
        m = meta.get("configs", {}).get(name, {})
        load_s = (f"{m['load1_mean']:.1f} / {m['load1_max']:.1f}"
                  if "load1_mean" in m else "—")
        lines.append(
            f"| {name} | {fmt(time_to(records, target) if target else None, '.1f')} | "
            f"{last['test_accuracy']:.4f} | {mean_step(records):.3f} | "
            f"{last['step_time']:.3f} | {fmt(bytes_per_step(records), ',.0f')} | "
            f"{last['step']} | {load_s} | {m.get('finished', '—')} |")
    return lines + [""]


def meta_knob(meta, name, knob, default):
    return meta.get("configs", {}).get(name, {}).get("knobs", {}).get(knob, default)


def rate_section(rate, runs, meta, figure_dir):
    lines = [f"## Rate limit: {rate}", ""]
    configs = meta.get("configs", {})
    epochs = sorted({c.get("epochs") for c in configs.values()} - {None})
    max_steps = sorted({c.get("max_steps") for c in configs.values()} - {None})
    lines += [f"Runs: {', '.join(runs)}; epochs {epochs}, step cap {max_steps} "
              "(0 = none). Failed runs: "
              f"{[n for n, c in configs.items() if c.get('returncode') != 0] or 'none'}.", ""]
    dense = runs.get("dense")
    target = dense[-1]["test_accuracy"] - ACCURACY_SLACK if dense else None
    if target is not None:
        lines += [f"Target accuracy: {target:.4f} (dense final "
                  f"{dense[-1]['test_accuracy']:.4f} minus 0.5 points).", ""]
    lines += summary_table(runs, meta, target)
    if rate == "none":
        lines += unlimited_verdicts(runs)
    elif target is not None:
        lines += limited_verdicts(runs, target)
    lines += gravac_traces(runs)
    lines += plots(rate, runs, meta, target, figure_dir)
    return lines


def limited_verdicts(runs, target):
    lines = []
    ttt = {n: time_to(r, target) for n, r in runs.items()}
    statics = {s: ttt[s] for s in STATIC if ttt.get(s) is not None}
    best_static = min(statics, key=statics.get) if statics else None
    ttt["best-static"] = statics.get(best_static)
    lines += [f"Best static CF by time to target: {best_static or 'none reached the target'}"
              f" ({fmt(ttt['best-static'], '.1f')} s).", ""]
    dense_final = runs["dense"][-1]["test_accuracy"]
    for g in GRAVAC:
        if g not in runs:
            continue
        lines += [f"### {g}: targets", "",
                  "| target | measured | verdict |", "|---|---|---|"]
        lines.append(f"| reaches {target:.4f} | "
                     f"{'at ' + format(ttt[g], '.1f') + ' s' if ttt[g] is not None else 'never'} | "
                     f"{verdict(ttt[g] is not None)} |")
        for label, ref, bound in TIME_TARGETS:
            r = ratio(ttt[g], ttt.get(ref))
            if r is None:
                lines.append(f"| time to target ≤ {bound}× {label} | "
                             f"{unreached(g, ttt[g], ref, runs, bound)} |")
            else:
                lines.append(f"| time to target ≤ {bound}× {label} | {r:.3f}× "
                             f"({ttt[g]:.1f} s vs {ttt[ref]:.1f} s) | {verdict(r <= bound)} |")
        diff = runs[g][-1]["test_accuracy"] - dense_final
        lines.append(f"| final accuracy within 0.5 points of dense | {100 * diff:+.2f} points | "
                     f"{verdict(diff >= -ACCURACY_SLACK)} |")
        lines.append("")
    return lines


def unreached(g, g_time, ref, runs, bound):
    """The measured and verdict cells when GraVAC or the reference did not
    reach the target. A reference that never reached it within its run needs
    longer than its whole run, so GraVAC meets the bound for sure only when
    its time is within `bound` times that run's length."""
    if g_time is None:
        return f"— ({g} never reached the target) | **not met**"
    if ref == "best-static":
        return ("— (no static CF reached the target) | **met** (GraVAC did)")
    if ref not in runs:
        return f"— ({ref} did not run) | not measured"
    length = runs[ref][-1]["wall"]
    if g_time <= bound * length:
        return (f"< {g_time / length:.3f}× ({ref} never reached the target; its whole "
                f"run took {length:.1f} s, GraVAC {g_time:.1f} s) | **met**")
    return (f"— ({ref} never reached the target within its {length:.1f} s run, GraVAC took "
            f"{g_time:.1f} s: the ratio is below {g_time / length:.3f}× but may be above "
            f"{bound}×) | **undetermined**")


def repetitions(runs, name):
    """[records] of NAME and its interleaved repetitions NAME~2, NAME~3, ..."""
    out, i = [], 1
    while (name if i == 1 else f"{name}~{i}") in runs:
        out.append(runs[name if i == 1 else f"{name}~{i}"])
        i += 1
    return out


def unlimited_verdicts(runs):
    """Step time of each GraVAC run over dense's, pair by pair (repetition i
    of both ran back to back), and over all pairs: the ratio of the summed
    training times over the summed steps (the verdict)."""
    lines = []
    dense = repetitions(runs, "dense")
    for g in GRAVAC:
        ours = repetitions(runs, g)
        pairs = list(zip(ours, dense))
        if not pairs:
            continue
        each = [ratio(mean_step(a), mean_step(b)) for a, b in pairs]
        total = ratio(sum(a[-1]["wall"] for a, _ in pairs) / sum(a[-1]["step"] for a, _ in pairs),
                      sum(b[-1]["wall"] for _, b in pairs) / sum(b[-1]["step"] for _, b in pairs))
        r_med = ratio(ours[0][-1]["step_time"], dense[0][-1]["step_time"])
        lines += [f"{g} step time / dense without a rate limit: "
                  f"{', '.join(f'{r:.3f}×' for r in each)} in {len(pairs)} interleaved "
                  f"pair(s), {total:.3f}× over all of them (mean step time; the median of "
                  f"the last window of the first pair {r_med:.3f}×); target ≤ "
                  f"{UNLIMITED_STEP_BOUND}×: {verdict(total <= UNLIMITED_STEP_BOUND)}.",
                  ""]
    return lines


def gravac_traces(runs):
    lines = []
    for name in GRAVAC + ["gravac-topk-eps0.9", "accordion"]:
        if name not in runs:
            continue
        series = cf_series(runs[name])
        if not series:
            continue
        lines += [f"CF sent per bucket, {name} (step: CF at each change; 1 = dense):", ""]
        last_policy = {p["bucket"]: p for p in runs[name][-1].get("policy", [])
                       if isinstance(p, dict)}
        for bucket, points in sorted(series.items()):
            changes = points[:-1]
            shown = changes if len(changes) <= 16 else changes[:8] + [("…", "…")] + changes[-7:]
            info = last_policy.get(bucket, {})
            share = {}
            for (s0, c), (s1, _) in zip(points[:-1], points[1:]):
                share[c] = share.get(c, 0) + (s1 - s0)
            total = sum(share.values()) or 1
            lines.append(f"- bucket {bucket} ({fmt(info.get('bytes'), ',')} bytes; at the end "
                         f"`{info.get('policy', '?')}`): share of steps per CF " +
                         ", ".join(f"{c:g}: {100 * n / total:.0f}%"
                                   for c, n in sorted(share.items())) +
                         f"; {len(changes)} changes: " +
                         ", ".join(f"{s}: {c}" for s, c in shown))
        lines.append("")
    return lines


def plots(rate, runs, meta, target, figure_dir):
    lines = []
    fig, ax = plt.subplots(figsize=(8, 5))
    colors = plt.get_cmap("tab20").colors
    for name, records in runs.items():
        style = "-" if name.startswith(("gravac", "dense", "ddp")) else "--"
        color = colors[ORDER.index(name) % len(colors)] if name in ORDER else None
        ax.plot([r["wall"] for r in records], [r["test_accuracy"] for r in records],
                style, label=name, color=color,
                linewidth=2 if name.startswith("gravac") else 1)
    if target is not None:
        ax.axhline(target, color="grey", linestyle=":", label="target")
    ax.set_xscale("log")
    ax.set_ylim(0.6, 0.92)
    ax.set_xlabel("training time (s, log scale)")
    ax.set_ylabel("test accuracy")
    ax.set_title(f"Fashion-MNIST MLP, 4 ranks, {rate} per link")
    ax.legend(fontsize=7, ncol=2)
    acc_png = f"gravac_accuracy_{rate}.png"
    fig.savefig(os.path.join(figure_dir, acc_png), dpi=90, bbox_inches="tight")
    plt.close(fig)
    lines += [f"![accuracy vs time]({acc_png})", ""]

    adaptive = [n for n in GRAVAC + ["gravac-topk-eps0.9", "accordion"]
                if cf_series(runs.get(n, []))]
    gains = [n for n in adaptive if gain_series(runs[n])]
    if adaptive:
        rows = len(adaptive) + len(gains)
        fig, axes = plt.subplots(rows, 1, figsize=(8, 1.8 * rows + 0.6),
                                 sharex=True, squeeze=False)
        for ax, name in zip(axes[len(adaptive):, 0], gains):
            epsilon = float(meta_knob(meta, name, "TERSE_GRAVAC_EPSILON", 0.9))
            for bucket, points in sorted(gain_series(runs[name]).items()):
                steps = [p[0] for p in points]
                ax.plot(steps, [p[1] for p in points], label=f"bucket {bucket} gain at θ_min")
                ax.plot(steps, [p[2] for p in points], "--",
                        label=f"bucket {bucket} gain at candidate")
            ax.axhline(epsilon, color="grey", linestyle=":", label=f"ε = {epsilon}")
            ax.set_ylim(0, 1.05)
            ax.set_ylabel("gain (EWMA)")
            ax.set_title(f"{name}: compression gains at the evaluations", fontsize=9)
            ax.legend(fontsize=6, loc="lower left", ncol=3)
        for ax, name in zip(axes[:, 0], adaptive):
            for bucket, points in sorted(cf_series(runs[name]).items()):
                ax.step([p[0] for p in points], [p[1] for p in points], where="post",
                        label=f"bucket {bucket}")
            ax.set_yscale("log")
            ax.set_ylim(0.8, 2000)
            ax.set_ylabel("CF")
            ax.set_title(name, fontsize=9)
            ax.legend(fontsize=7, loc="upper left")
        axes[-1, 0].set_xlabel("step")
        fig.suptitle(f"CF sent per bucket (1 = dense), {rate} per link", fontsize=10)
        fig.tight_layout()
        cf_png = f"gravac_cf_{rate}.png"
        fig.savefig(os.path.join(figure_dir, cf_png), dpi=90, bbox_inches="tight")
        lines += [f"![CF per bucket vs step]({cf_png})", ""]
    plt.close(fig)
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--results", required=True)
    parser.add_argument("--preamble", default="",
                        help="a Markdown file inserted after the title (setup, decisions)")
    parser.add_argument("--epilogue", default="",
                        help="a Markdown file appended at the end (reading the results)")
    args = parser.parse_args()
    figure_dir = os.path.dirname(os.path.abspath(args.results))
    lines = ["# GraVAC on a slow network", "",
             "Fashion-MNIST, MLP 784-1024-1024-10, batch 64 per rank, 4 ranks in 4 network "
             "namespaces joined by a bridge, `tc tbf` on both ends of every link. Produced by "
             "`integration/gravac_experiment.py`; this page and the plots by "
             "`integration/plot_gravac.py` from the metrics under "
             f"`{os.path.relpath(args.results, figure_dir)}/<rate>/`.", ""]
    if args.preamble:
        with open(args.preamble) as f:
            lines += [f.read().rstrip(), ""]
    rates = [d for d in sorted(glob.glob(os.path.join(args.results, "*"))) if os.path.isdir(d)]
    rates.sort(key=lambda d: os.path.basename(d) == "none")  # Limited rates first.
    for rate_dir in rates:
        runs, meta = load(rate_dir)
        lines += rate_section(os.path.basename(rate_dir), runs, meta, figure_dir)
    if args.epilogue:
        with open(args.epilogue) as f:
            lines += [f.read().rstrip(), ""]
    with open(os.path.join(figure_dir, "gravac.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote", os.path.join(figure_dir, "gravac.md"))


if __name__ == "__main__":
    main()
