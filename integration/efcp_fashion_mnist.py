"""Fashion-MNIST with the EFCP optimizers against SGD and Adam (issue 8).

    PYTHONPATH=bindings/python /usr/bin/python3 integration/efcp_fashion_mnist.py

Trains the same MLP (784-128-10, ReLU) from the same initial weights on the
same batch order with each optimizer for the same number of epochs, one
process, and writes

  * docs/results/efcp.md: final and best test accuracy, time per optimizer
    step and per training step, and the optimizer's memory (for the EFCP
    optimizers: window, error-feedback buffer and small matrices from
    memory(); for SGD/Adam their state tensors);
  * docs/results/efcp_accuracy.png: test accuracy after every half epoch.

--seeds N trains every optimizer from N seeds (seed, seed + 1, ...: the
initial weights and the batch order both change with the seed) and reports
the mean and the spread over them for every optimizer alike; the default is
5, as the gaps at stake (half a point) are of the size of the seed-to-seed
noise of one run. The last line printed is a JSON summary; --json PATH keeps every result
(curves included), and --report-from PATH rewrites the report and plot from
such a file without training. --quick (one
epoch on 30,000 images, no report) is for trying settings; --only NAME,...
runs a subset; --lr NAME=VALUE and --damp NAME=VALUE override a learning
rate or an M-FAC damping.
"""

import argparse
import json
import math
import os
import platform
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))
from fashion_mnist_data import load  # noqa: E402

import terse.optim  # noqa: E402

MEAN, STD = 0.2860, 0.3530  # of the training images


class MLP(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.fc1 = nn.Linear(784, hidden)
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


# name -> (label, factory(params, lr, args), default lr). The learning rates
# come from a one-epoch sweep (--quick) over powers of ~3; see the report.
def _optimizers(args):
    m, r, density = args.m, args.window, args.density

    def damp(name):
        return float(args.damp_for.get(name, args.damp))

    return {
        "sgd": ("SGD (momentum 0.9)",
                lambda p, lr: torch.optim.SGD(p, lr=lr, momentum=0.9), 0.03),
        "adam": ("Adam", lambda p, lr: torch.optim.Adam(p, lr=lr), 1e-3),
        "mfac": (f"MFAC (m={m})",
                 lambda p, lr: terse.optim.MFAC(p, lr=lr,
                                                damp=damp("mfac"), m=m),
                 1e-2),
        "sparse_mfac": (
            f"SparseMFAC (m={m}, 1%, u32+fp32)",
            lambda p, lr: terse.optim.SparseMFAC(
                p, lr=lr, damp=damp("sparse_mfac"), m=m, density=density,
                storage="u32_fp32"), 1e-2),
        "sparse_mfac_bf16": (
            f"SparseMFAC (m={m}, 1%, block16+bf16)",
            lambda p, lr: terse.optim.SparseMFAC(
                p, lr=lr, damp=damp("sparse_mfac_bf16"), m=m,
                density=density, storage="block16_bf16"), 1e-2),
        "ggt": (f"GGT (r={r})",
                lambda p, lr: terse.optim.GGT(p, lr=lr, window=r,
                                              eps=args.eps), 0.3),
        "sparse_ggt": (
            f"SparseGGT (r={r}, 1%)",
            lambda p, lr: terse.optim.SparseGGT(p, lr=lr, window=r,
                                                eps=args.eps,
                                                density=density), 0.3),
    }


def state_bytes(optimizer):
    """Bytes of an optimizer's state: memory() for terse.optim, else the
    tensors in optimizer.state."""
    if hasattr(optimizer, "memory"):
        return optimizer.memory()
    total = 0
    for state in optimizer.state.values():
        for value in state.values():
            if torch.is_tensor(value):
                total += value.numel() * value.element_size()
    return {"window": 0, "error": 0, "small": 0, "scratch": total,
            "total": total}


def evaluate(model, x, y):
    model.eval()
    with torch.no_grad():
        correct = 0
        for i in range(0, len(x), 2000):
            correct += (model(x[i:i + 2000]).argmax(1) ==
                        y[i:i + 2000]).sum().item()
    model.train()
    return correct / len(x)


def train(name, label, make, lr, data, args, seed):
    train_x, train_y, test_x, test_y = data
    torch.manual_seed(seed)
    model = MLP(args.hidden)
    optimizer = make(model.parameters(), lr)
    order = torch.Generator().manual_seed(seed + 1)
    n = len(train_x)
    steps_per_epoch = n // args.batch
    checkpoints = max(1, steps_per_epoch // 2)
    curve = [(0.0, evaluate(model, test_x, test_y))]
    step_time = train_time = 0.0
    steps = 0
    diverged = False
    for epoch in range(args.epochs):
        perm = torch.randperm(n, generator=order)
        for i in range(steps_per_epoch):
            idx = perm[i * args.batch:(i + 1) * args.batch]
            start = time.perf_counter()
            optimizer.zero_grad()
            loss = F.cross_entropy(model(train_x[idx]), train_y[idx])
            loss.backward()
            middle = time.perf_counter()
            if not math.isfinite(loss.item()):
                diverged = True
                break
            optimizer.step()
            end = time.perf_counter()
            step_time += end - middle
            train_time += end - start
            steps += 1
            if steps % checkpoints == 0:
                curve.append((steps / steps_per_epoch,
                               evaluate(model, test_x, test_y)))
        if diverged:
            break
        print(f"  {name} seed {seed} epoch {epoch + 1}: test accuracy "
              f"{curve[-1][1]:.4f}", flush=True)
    memory = state_bytes(optimizer)
    return {
        "name": name,
        "label": label,
        "lr": lr,
        "seed": seed,
        "diverged": diverged,
        "final_accuracy": curve[-1][1],
        "best_accuracy": max(a for _, a in curve),
        # The last three evaluations (the last 1.5 epochs): less noisy than
        # the final one at a constant learning rate.
        "tail_accuracy": sum(a for _, a in curve[-3:]) / len(curve[-3:]),
        "curve": curve,
        "step_ms": 1e3 * step_time / max(steps, 1),
        "train_step_ms": 1e3 * train_time / max(steps, 1),
        "memory": memory,
        "params": sum(p.numel() for p in model.parameters()),
    }


def mib(b):
    return f"{b / 2**20:.2f}"


def aggregate(runs):
    """One optimizer's runs (one per seed) -> means and spreads."""
    def stats(key):
        xs = [100 * r[key] for r in runs]
        mean = sum(xs) / len(xs)
        std = (sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)
               if len(xs) > 1 else 0.0) ** 0.5
        return {"mean": mean, "std": std, "min": min(xs), "max": max(xs),
                "all": xs}
    first = runs[0]
    return {
        "name": first["name"], "label": first["label"], "lr": first["lr"],
        "seeds": [r["seed"] for r in runs],
        "diverged": any(r["diverged"] for r in runs),
        "final": stats("final_accuracy"), "tail": stats("tail_accuracy"),
        "best": stats("best_accuracy"),
        "step_ms": sum(r["step_ms"] for r in runs) / len(runs),
        "train_step_ms": sum(r["train_step_ms"] for r in runs) / len(runs),
        "memory": first["memory"], "params": first["params"],
        "curves": [r["curve"] for r in runs],
    }


def spread(st):
    return (f"{st['mean']:.2f}% ± {st['std']:.2f} "
            f"({st['min']:.2f}-{st['max']:.2f})")


def write_report(agg, args, wall_s, path):
    by_name = {r["name"]: r for r in agg}
    d = agg[0]["params"]
    k = max(1, int(args.density * d))
    seeds = agg[0]["seeds"]
    lines = [
        "# EFCP optimizers on Fashion-MNIST",
        "",
        "Generated by `integration/efcp_fashion_mnist.py` "
        f"({time.strftime('%Y-%m-%d')}, {platform.node() or 'host'}, "
        f"{os.cpu_count()} CPUs shared with other jobs, torch "
        f"{torch.__version__}, {torch.get_num_threads()} torch threads). "
        f"Whole run: {wall_s / 60:.1f} min.",
        "",
        "## Setup",
        "",
        f"* Model: MLP 784-{args.hidden}-10 with ReLU, d = {d:,} parameters."
        f" Every optimizer is trained from each of {len(seeds)} seeds "
        f"({', '.join(str(x) for x in seeds)}); a seed fixes the initial "
        "weights and the batch order, which are the same for every "
        "optimizer under that seed.",
        f"* Data: Fashion-MNIST, {args.train_size:,} training / "
        f"{args.test_size:,} test images, normalised; batch {args.batch}, "
        f"{args.epochs} epochs, no augmentation, constant learning rate.",
        f"* M-FAC: m = {args.m} gradients, damp = {args.damp}. "
        f"SparseMFAC: density {args.density:.0%} (k = {k:,} entries per "
        "gradient), error feedback, both window storages. GGT: window r = "
        f"{args.window}, eps = {args.eps}; SparseGGT the same over the "
        f"{args.density:.0%} top-k window.",
        "* Why this size: the whole comparison must run in well under an "
        "hour on a shared 2-core machine. "
        "A 100k-parameter MLP keeps one training "
        "step at a few milliseconds, so the preconditioner dominates the "
        f"step; m = {args.m} keeps the dense M-FAC window at "
        f"{mib(args.m * d * 4)} MiB and its O(m d) step at tens of ms; GGT's "
        f"O(r^3) eigendecomposition per step bounds r = {args.window}.",
        "* Hyper-parameters: from one-epoch runs (`--quick`, 30,000 images,"
        " seed 0)."
        " Learning rates over roughly powers of 3 per optimizer (listed "
        "below). The M-FAC damping was swept over {1e-6, 1e-4, 1e-3, 1e-2, "
        "3e-2, 1e-1} x lr {3e-3, 1e-2, 3e-2}: at the issue's default 1e-4 "
        "SparseMFAC trailed MFAC by 3 points after one epoch; from 1e-2 on "
        "both reached 83-84%, so all M-FAC runs share damp = 1e-2 and "
        "lr = 1e-2 (dense and sparse differ only in the compression). "
        "(m*damp = 1.28 is of the order of |g|^2 here, so the "
        "preconditioner still acts; with damp 0.1 M-FAC tends to SGD with "
        "lr/damp.)",
        "* Time per step: wall time of `optimizer.step()` alone, and of "
        "zero_grad + forward + backward + step, averaged over all steps and "
        "seeds (evaluation excluded). Noisy: other jobs share the two cores "
        "(1-min load average at the start of each run: "
        + ", ".join(f"{x:.1f}" for x in args.loads) +
        "), so wall times can be several times "
        "the CPU time; compare within this table only. torch runs one "
        "intra-op thread: with two, a forward+backward took 108 ms instead "
        "of 15 ms on the oversubscribed cores. The EFCP preconditioners use "
        "their default of min(cores, 8) = 2 worker threads.",
        "* Optimizer memory: for terse.optim the `memory()` report (window ="
        " the gradient history; error = the error-feedback buffer; small = "
        "the m x m / r x r matrices; scratch = momentum/update and the flat "
        "parameter and gradient copies); for SGD and Adam the state tensors.",
        "",
        "## Results",
        "",
        f"Test accuracy over the {len(seeds)} seeds: mean ± sample standard "
        "deviation (min-max).",
        "",
        "| optimizer | lr | final test acc. | mean of last 3 evaluations | "
        "best | step ms | train step ms | window MiB | optimizer total MiB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in agg:
        mem = r["memory"]
        acc = "diverged" if r["diverged"] else spread(r["final"])
        lines.append(
            f"| {r['label']} | {r['lr']:g} | {acc} | "
            f"{r['tail']['mean']:.2f}% | {r['best']['mean']:.2f}% | "
            f"{r['step_ms']:.2f} | {r['train_step_ms']:.2f} | "
            f"{mib(mem['window'])} | {mib(mem['total'])} |")
    lines += ["", "Final test accuracy per seed:", "",
              "| optimizer | " + " | ".join(f"seed {x}" for x in seeds) +
              " |", "|---|" + "---|" * len(seeds)]
    for r in agg:
        lines.append(f"| {r['label']} | " +
                     " | ".join(f"{x:.2f}%" for x in r["final"]["all"]) +
                     " |")
    lines += ["", "## Target: SparseMFAC within 0.5 points of MFAC at <= 1% "
              "of its window memory", ""]
    dense = by_name.get("mfac")
    for name in ("sparse_mfac_bf16", "sparse_mfac"):
        sparse = by_name.get(name)
        if dense is None or sparse is None:
            continue
        gap = dense["final"]["mean"] - sparse["final"]["mean"]
        gaps = [a - b for a, b in zip(dense["final"]["all"],
                                      sparse["final"]["all"])]
        tail_gap = dense["tail"]["mean"] - sparse["tail"]["mean"]
        ratio = sparse["memory"]["window"] / dense["memory"]["window"]
        met = gap <= 0.5 and ratio <= 0.01

        def versus(points):
            return (f"{abs(points):.2f} points "
                    f"{'below' if points > 0 else 'above'} MFAC")
        within = sum(1 for x in gaps if x <= 0.5)
        lines.append(
            f"* {sparse['label']}: mean final accuracy {versus(gap)} "
            "(SparseMFAC minus MFAC per seed: " +
            ", ".join(f"{-x:+.2f}" for x in gaps) +
            f"; {within} of {len(gaps)} seeds within 0.5 points; mean of "
            f"the last 3 evaluations: {versus(tail_gap)}), window "
            f"{100 * ratio:.4f}% of MFAC's "
            f"({mem_bytes(sparse)} vs {mem_bytes(dense)} bytes); error "
            f"buffer {mib(sparse['memory']['error'])} MiB on top. Target "
            f"{'met' if met else 'NOT met'}"
            f"{'' if ratio <= 0.01 else ' (window above 1%)'}"
            f"{'' if gap <= 0.5 else ' (mean final-accuracy gap above 0.5 points)'}"
            ".")
    lines += ["", "The verdict uses the final test accuracy, as the issue "
              f"states the target, averaged over the {len(seeds)} seeds "
              "(the same seeds for every optimizer). With a constant "
              "learning rate the test accuracy moves by up to about a point "
              "between evaluations and between seeds (see the plot and the "
              "per-seed table), so the spread is shown next to every mean; "
              "a gap smaller than the spread is not resolved by this run. "
              "Window memory counts everything the window keeps: u32+fp32 "
              "8 bytes per kept entry (2k/d of dense); block16+bf16 "
              "4 bytes per slot, k slots a row, nothing else (k/d = "
              f"{100 * k / d:.4f}% of dense). A block16 slot holds an entry "
              "or, where the next block is not implied by a descent of the "
              "16-bit relative index, a jump marker; a row whose markers "
              "leave no slot for its smallest entries keeps those in the "
              "error buffer (docs: efcp/sparse_window.h). The "
              "error-feedback buffer (d floats) is reported separately, as "
              "the issue's target is about the window."]
    lines += ["", "![test accuracy](efcp_accuracy.png)", "",
              "Reproduce: `bazel build //bindings/python:_efcp.so && "
              "PYTHONPATH=bindings/python /usr/bin/python3 "
              f"integration/efcp_fashion_mnist.py --seeds {len(seeds)} "
              "--json docs/results/efcp_runs.json` (the results of this run "
              "are in that file; `--report-from` it rewrites this page).",
              ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def mem_bytes(r):
    return f"{r['memory']['window']:,}"


def plot(agg, path, epochs):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=120)
    for r in agg:
        # From the first evaluation after training started (the initial
        # ~10% would flatten the plot). Mean over seeds, min-max shaded.
        curves = [c[1:] for c in r["curves"]]
        n = min(len(c) for c in curves)
        xs = [curves[0][i][0] for i in range(n)]
        ys = [[100 * c[i][1] for c in curves] for i in range(n)]
        mean = [sum(y) / len(y) for y in ys]
        line, = ax.plot(xs, mean, marker=".", label=r["label"])
        if len(curves) > 1:
            ax.fill_between(xs, [min(y) for y in ys], [max(y) for y in ys],
                            color=line.get_color(), alpha=0.12)
    ax.set_xlabel("epoch")
    ax.set_ylabel("test accuracy (%)")
    ax.set_xlim(0, epochs)
    finals = [r["final"]["mean"] for r in agg if not r["diverged"]]
    if finals:
        ax.set_ylim(max(0.0, min(finals) - 8), min(100.0, max(finals) + 2))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    n_seeds = len(agg[0]["seeds"])
    ax.set_title("Fashion-MNIST, MLP 784-128-10: test accuracy "
                 f"(mean of {n_seeds} seeds, min-max shaded)")
    fig.tight_layout()
    fig.savefig(path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--torch-threads", type=int, default=1,
                        help="torch intra-op threads (1: see the report)")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--m", type=int, default=128)
    parser.add_argument("--damp", type=float, default=1e-2,
                        help="M-FAC damping (lambda) of every M-FAC run")
    parser.add_argument("--damp-for", action="append", default=[],
                        help="NAME=VALUE damping override")
    parser.add_argument("--window", type=int, default=64)
    parser.add_argument("--eps", type=float, default=1e-5)
    parser.add_argument("--density", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0,
                        help="the first seed")
    parser.add_argument("--seeds", type=int, default=5,
                        help="seeds per optimizer (seed, seed + 1, ...)")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--only", default=None,
                        help="comma-separated optimizer names")
    parser.add_argument("--lr", action="append", default=[],
                        help="NAME=VALUE learning-rate override")
    parser.add_argument("--quick", action="store_true",
                        help="1 epoch on 30,000 images; no report")
    parser.add_argument("--out-md", default=os.path.join(
        ROOT, "docs", "results", "efcp.md"))
    parser.add_argument("--json", default=None,
                        help="also write every result (curves included)")
    parser.add_argument("--out-png", default=os.path.join(
        ROOT, "docs", "results", "efcp_accuracy.png"))
    parser.add_argument("--report-from", default=None,
                        help="rewrite the report and plot from a --json file "
                        "of an earlier run (no training)")
    args = parser.parse_args()
    if args.report_from:
        with open(args.report_from) as f:
            saved = json.load(f)
        run_args = argparse.Namespace(**saved["args"])
        write_report(saved["results"], run_args, saved["wall_s"],
                     args.out_md)
        plot(saved["results"], args.out_png, run_args.epochs)
        print(f"wrote {args.out_md} and {args.out_png} from "
              f"{args.report_from}")
        return
    torch.set_num_threads(args.torch_threads)
    args.damp_for = dict(item.split("=", 1) for item in args.damp_for)

    train_x, train_y, test_x, test_y = load(args.data_dir)
    if args.quick:
        args.epochs = 1
        train_x, train_y = train_x[:30000], train_y[:30000]
    prepare = (lambda a: torch.from_numpy(
        ((a.reshape(len(a), -1) - MEAN) / STD).astype(np.float32)))
    data = (prepare(train_x), torch.from_numpy(train_y.astype(np.int64)),
            prepare(test_x), torch.from_numpy(test_y.astype(np.int64)))
    args.train_size, args.test_size = len(train_x), len(test_x)

    table = _optimizers(args)
    names = args.only.split(",") if args.only else list(table)
    overrides = dict(item.split("=", 1) for item in args.lr)
    start = time.time()
    seeds = [args.seed + i for i in range(max(1, args.seeds))]
    agg = []
    args.loads = []
    for name in names:
        label, make, lr = table[name]
        lr = float(overrides.get(name, lr))
        runs = []
        for seed in seeds:
            args.loads.append(os.getloadavg()[0])
            print(f"{label}, lr {lr:g}, seed {seed}", flush=True)
            runs.append(train(name, label, make, lr, data, args, seed))
            r = runs[-1]
            print(f"  -> final {r['final_accuracy']:.4f}, step "
                  f"{r['step_ms']:.2f} ms, memory "
                  f"{mib(r['memory']['total'])} MiB", flush=True)
        agg.append(aggregate(runs))
    wall = time.time() - start
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "wall_s": wall,
                       "results": agg}, f)
    if not args.quick:
        os.makedirs(os.path.dirname(args.out_md), exist_ok=True)
        write_report(agg, args, wall, args.out_md)
        plot(agg, args.out_png, args.epochs)
        print(f"wrote {args.out_md} and {args.out_png}")
    print(json.dumps({
        "wall_s": round(wall, 1),
        "seeds": seeds,
        "results": {r["name"]: {
            "lr": r["lr"],
            "final_accuracy_mean": round(r["final"]["mean"] / 100, 4),
            "final_accuracy_std": round(r["final"]["std"] / 100, 4),
            "final_accuracy": [round(x / 100, 4) for x in r["final"]["all"]],
            "step_ms": round(r["step_ms"], 3),
            "window_bytes": r["memory"]["window"],
            "memory_bytes": r["memory"]["total"]} for r in agg}}))


if __name__ == "__main__":
    main()
