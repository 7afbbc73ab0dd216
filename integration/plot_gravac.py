"""Turns the slow-network experiment's metrics into docs/results/gravac.md and
PNG plots (accuracy against wall time; compressor, level and CF per bucket
against step).

    /usr/bin/python3 integration/plot_gravac.py --results docs/results/gravac
    /usr/bin/python3 integration/plot_gravac.py --results docs/results/gravac_cnn

Reads <results>/<rate>/<config>.jsonl and <results>/<rate>/meta.json as
written by gravac_experiment.py; writes <results>.md and <name>_*.png beside
the results folder (<name> its base name: gravac.md and gravac_*.png for
docs/results/gravac). Every figure in the document comes from those files;
nothing is typed in by hand.
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
# Static runs of any family (information: the best of them is named too).
STATIC_ANY = STATIC + ["fp16", "powersgd-1", "powersgd-4"]
GRAVAC = ["gravac-topk", "gravac-dgc", "gravac-dgc-eps0.3", "gravac-portfolio"]
# Runs whose compressor or CF changes during training: their traces and plots.
ADAPTIVE = GRAVAC + ["gravac-topk-eps0.9", "accordion", "accordion-powersgd"]
ORDER = ["dense", "fp16", "topk-10", "topk-100", "topk-1000", "dgc-100", "topk-100-mc",
         "powersgd-1", "powersgd-4", "accordion", "accordion-powersgd",
         "gravac-topk", "gravac-dgc", "gravac-dgc-eps0.3", "gravac-topk-eps0.9",
         "gravac-portfolio", "ddp", "ddp-fp16", "ddp-powersgd-1", "ddp-powersgd-4"]
# Targets of issue 7 at a rate limit: ratio bounds on time to target.
TIME_TARGETS = [("dense", "dense", 0.1), ("DDP + PowerSGD rank 4", "ddp-powersgd-4", 1.0),
                ("best static CF", "best-static", 1.1), ("Accordion", "accordion", 0.8),
                ("Accordion over PowerSGD ranks", "accordion-powersgd", 0.8)]
# Families whose level is a CF (their choice reads "topk:100").
SPARSIFIERS = ("topk", "dgc", "redsync", "randomk", "threshold")
# Families from weak to strong compression, for the order of a plot's axis.
FAMILY_ORDER = {"none": 0, "fp16": 1, "bf16": 1, "qsgd": 2, "efsignsgd": 2, "powersgd": 3}
MODELS = {"mlp": "MLP 784-1024-1024-10", "cnn": "the README demo's CNN (206,922 parameters)"}
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


def choice_label(compressor, cf):
    """What a bucket sent, as TERSE_GRAVAC_CANDIDATES spells it: "none",
    "fp16", "powersgd:4" (the engine reports the rank), "topk:100"."""
    cf = cf or 1
    if not compressor or compressor == "none":
        return "none"
    if ":" in compressor:
        return compressor
    if compressor in SPARSIFIERS:
        return f"{compressor}:{cf:g}" if cf > 1 else "none"
    return compressor


def choice_key(label):
    family, _, level = label.partition(":")
    try:
        level = float(level or 0)
    except ValueError:
        level = 0
    # PowerSGD and QSGD: a higher level (rank, bits) compresses less.
    strength = -level if family in ("powersgd", "qsgd") else level
    return (FAMILY_ORDER.get(family, 4), family, strength)


def choice_series(records):
    """bucket -> [(step, choice label)] at every change, plus the last step.
    Runs recorded before "choice_changes" existed had one sparsifier family
    per bucket: their CF changes, with the family the bucket reported at any
    evaluation (or its policy names: "gravac dgc ...")."""
    series, family = {}, {}
    for r in records:
        for p in r.get("policy", []):
            if not isinstance(p, dict):
                continue
            words = p.get("policy", "").split()
            named = words[1] if len(words) > 1 else None
            if p.get("compressor", "none") != "none":
                family[p["bucket"]] = p["compressor"]
            elif named in SPARSIFIERS:
                family.setdefault(p["bucket"], named)
    for r in records:
        if "choice_changes" in r:
            for step, bucket, compressor, cf in r["choice_changes"]:
                series.setdefault(bucket, []).append((step, choice_label(compressor, cf)))
            continue
        for step, bucket, cf in r.get("cf_changes", []):
            compressor = family.get(bucket, "?") if (cf or 1) > 1 else "none"
            series.setdefault(bucket, []).append((step, choice_label(compressor, cf)))
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


def rate_section(rate, runs, meta, figure_dir, prefix):
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
    lines += plots(rate, runs, meta, target, figure_dir, prefix)
    return lines


def limited_verdicts(runs, target):
    lines = []
    ttt = {n: time_to(r, target) for n, r in runs.items()}
    statics = {s: ttt[s] for s in STATIC if ttt.get(s) is not None}
    best_static = min(statics, key=statics.get) if statics else None
    ttt["best-static"] = statics.get(best_static)
    lines += [f"Best static CF by time to target: {best_static or 'none reached the target'}"
              f" ({fmt(ttt['best-static'], '.1f')} s).", ""]
    any_static = {s: ttt[s] for s in STATIC_ANY if ttt.get(s) is not None}
    if any(s in runs for s in STATIC_ANY if s not in STATIC):
        best_any = min(any_static, key=any_static.get) if any_static else None
        lines += [f"Best static run of any family ({', '.join(s for s in STATIC_ANY if s in runs)})"
                  f" by time to target: {best_any or 'none reached the target'}"
                  f" ({fmt(any_static.get(best_any), '.1f')} s; information, not a target).", ""]
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
    for name in ADAPTIVE:
        if name not in runs:
            continue
        series = choice_series(runs[name])
        if not series:
            continue
        lines += [f"Compressor sent per bucket, {name} (step: choice at each change; "
                  "`topk:100` = top-k at CF 100, `powersgd:4` = PowerSGD rank 4, "
                  "none = dense):", ""]
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
                         f"`{info.get('policy', '?')}`): share of steps per choice " +
                         ", ".join(f"{c}: {100 * n / total:.0f}%"
                                   for c, n in sorted(share.items(),
                                                      key=lambda kv: choice_key(kv[0]))) +
                         f"; {len(changes)} changes: " +
                         ", ".join(f"{s}: {c}" for s, c in shown))
        lines.append("")
    return lines


def plots(rate, runs, meta, target, figure_dir, prefix):
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
    model = meta.get("model", "mlp")
    ax.set_title(f"Fashion-MNIST {model.upper()}, 4 ranks, {rate} per link")
    ax.legend(fontsize=7, ncol=2)
    acc_png = f"{prefix}_accuracy_{rate}.png"
    fig.savefig(os.path.join(figure_dir, acc_png), dpi=90, bbox_inches="tight")
    plt.close(fig)
    lines += [f"![accuracy vs time]({acc_png})", ""]

    adaptive = [n for n in ADAPTIVE if choice_series(runs.get(n, []))]
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
            series = choice_series(runs[name])
            # One row per choice this run made, weak to strong compression;
            # buckets drawn slightly apart so that equal choices stay visible.
            labels = sorted({c for points in series.values() for _, c in points},
                            key=choice_key)
            row = {c: i for i, c in enumerate(labels)}
            for k, (bucket, points) in enumerate(sorted(series.items())):
                offset = 0.08 * (k - (len(series) - 1) / 2)
                ax.step([p[0] for p in points], [row[p[1]] + offset for p in points],
                        where="post", label=f"bucket {bucket}")
            ax.set_yticks(range(len(labels)))
            ax.set_yticklabels(labels, fontsize=7)
            ax.set_ylim(-0.5, len(labels) - 0.5)
            ax.set_ylabel("sent")
            ax.set_title(name, fontsize=9)
            ax.legend(fontsize=7, loc="upper left")
        axes[-1, 0].set_xlabel("step")
        fig.suptitle(f"Compressor and level sent per bucket (topk:CF, powersgd:rank; "
                     f"none = dense), {rate} per link", fontsize=10)
        fig.tight_layout()
        cf_png = f"{prefix}_cf_{rate}.png"
        fig.savefig(os.path.join(figure_dir, cf_png), dpi=90, bbox_inches="tight")
        lines += [f"![compressor per bucket vs step]({cf_png})", ""]
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
    results = os.path.abspath(args.results).rstrip(os.sep)
    figure_dir, prefix = os.path.dirname(results), os.path.basename(results)
    rates = [d for d in sorted(glob.glob(os.path.join(results, "*"))) if os.path.isdir(d)]
    rates.sort(key=lambda d: os.path.basename(d) == "none")  # Limited rates first.
    metas = [load(d)[1] for d in rates]
    model = next((m["model"] for m in metas if "model" in m), "mlp")
    lines = [f"# GraVAC on a slow network{'' if model == 'mlp' else ': ' + model.upper()}", "",
             f"Fashion-MNIST, {MODELS.get(model, model)}, batch 64 per rank, 4 ranks in 4 network "
             "namespaces joined by a bridge, `tc tbf` on both ends of every link. Produced by "
             "`integration/gravac_experiment.py`; this page and the plots by "
             "`integration/plot_gravac.py` from the metrics under "
             f"`{prefix}/<rate>/`.", ""]
    if args.preamble:
        with open(args.preamble) as f:
            lines += [f.read().rstrip(), ""]
    for rate_dir in rates:
        runs, meta = load(rate_dir)
        lines += rate_section(os.path.basename(rate_dir), runs, meta, figure_dir, prefix)
    if args.epilogue:
        with open(args.epilogue) as f:
            lines += [f.read().rstrip(), ""]
    page = os.path.join(figure_dir, f"{prefix}.md")
    with open(page, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote", page)


if __name__ == "__main__":
    main()
