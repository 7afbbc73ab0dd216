"""Why GraVAC's gain test needs care across families: one process simulates
the 4 workers of integration/slow_network_mlp.py (same model, data shards,
batch order and SGD with momentum) with plain torch, no terse, once per
candidate compressor, each with error feedback per layer as terse runs it:

  none      dense
  fp16      values rounded to fp16, no error feedback
  topk:CF   per bucket (weight + bias of a layer, flat), k = ceil(d / CF),
            bf16 values, error feedback
  powersgd:R  layer-wise PowerSGD (Vogels et al.): each weight matrix its own
            n x m matrix, biases uncompressed, P and Q summed over workers,
            warm start, error feedback

and records, per step and averaged over workers and layers (by energy):

  step gain    ||C(g_ef)||^2 / ||g_ef||^2   (the paper's compression gain)
  window gain  1 - ||sum_w (g - sent)||^2 / ||sum_w g||^2 over the last
               `--window` steps: how much of the window's gradient got
               through, crediting what error feedback delivers late (with
               error feedback the deviation is the residual's change); what
               terse measures with TERSE_GRAVAC_GAIN=window
               (gravac/portfolio_policy.h), there over consecutive windows

then the test accuracy at the end. Prints one JSON line per candidate.

    /usr/bin/python3 integration/portfolio_gains.py --steps 300 --window 50 \\
        --candidates none,fp16,powersgd:1,powersgd:4,topk:10,topk:100

Results: docs/gravac_portfolio.md.
"""

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fashion_mnist_data import load, shard  # noqa: E402
from slow_network_mlp import build_model, evaluate  # noqa: E402


def topk_sparse(a, cf):
    k = min(a.numel(), max(1, math.ceil(a.numel() / cf)))
    idx = torch.topk(a.abs(), k, sorted=False).indices
    out = torch.zeros_like(a)
    out[idx] = a[idx].to(torch.bfloat16).to(torch.float32)
    return out


def orthonormalise(p):
    q, _ = torch.linalg.qr(p.double())
    return q.float()


class Candidate:
    """One compressor with per-worker error feedback over the layers."""

    def __init__(self, name, params, size):
        self.name = name
        self.family, _, level = name.partition(":")
        self.level = float(level) if level else 0
        self.size = size
        self.residual = [[None] * len(params) for _ in range(size)]
        self.q = {}

    def reduce(self, grads):
        """grads[w][p] -> (mean over workers per p, local sent[w][p])."""
        n_params = len(grads[0])
        sent = [[None] * n_params for _ in range(self.size)]
        a = [[None] * n_params for _ in range(self.size)]
        for w in range(self.size):
            for p in range(n_params):
                r = self.residual[w][p]
                a[w][p] = grads[w][p] if r is None else grads[w][p] + r
        for p in range(n_params):
            shape = a[0][p].shape
            if self.family == "none":
                for w in range(self.size):
                    sent[w][p] = a[w][p]
            elif self.family == "fp16":
                for w in range(self.size):
                    sent[w][p] = a[w][p].half().float()
            elif self.family == "topk":
                for w in range(self.size):
                    sent[w][p] = topk_sparse(a[w][p].reshape(-1), self.level).view(shape)
            elif self.family == "powersgd":
                rank = int(self.level)
                if len(shape) < 2:
                    for w in range(self.size):
                        sent[w][p] = a[w][p]
                else:
                    n, m = shape[0], a[0][p][0].numel()
                    r = min(rank, n, m)
                    if n * m / (r * (n + m)) < 2:
                        for w in range(self.size):
                            sent[w][p] = a[w][p]
                    else:
                        q = self.q.get(p)
                        if q is None:
                            g = torch.Generator().manual_seed(p)
                            q = torch.randn(m, r, generator=g)
                        mats = [a[w][p].reshape(n, m) for w in range(self.size)]
                        p_hat = orthonormalise(sum(mm @ q for mm in mats))
                        q_local = [mm.t() @ p_hat for mm in mats]
                        self.q[p] = sum(q_local)
                        for w in range(self.size):
                            sent[w][p] = (p_hat @ q_local[w].t()).view(shape)
            else:
                raise ValueError(self.name)
            if self.family in ("topk", "powersgd"):
                for w in range(self.size):
                    self.residual[w][p] = a[w][p] - sent[w][p]
        mean = [sum(sent[w][p] for w in range(self.size)) / self.size
                for p in range(n_params)]
        step_num = sum(float((sent[w][p] ** 2).sum()) for w in range(self.size)
                       for p in range(n_params))
        step_den = sum(float((a[w][p] ** 2).sum()) for w in range(self.size)
                       for p in range(n_params))
        return mean, sent, min(1.0, step_num / step_den)


def run(name, args, data):
    torch.manual_seed(0)
    model = build_model()
    params = list(model.parameters())
    optimizer = torch.optim.SGD(params, lr=args.lr, momentum=0.9)
    train_x, train_y, test_x, test_y = data
    workers = []
    for rank in range(args.size):
        x, y = shard(train_x, train_y, rank, args.size)
        gen = torch.Generator().manual_seed(1 + rank)
        workers.append({"x": torch.from_numpy(x), "y": torch.from_numpy(y),
                        "gen": gen, "order": torch.randperm(len(x), generator=gen)})
    steps_per_epoch = len(workers[0]["x"]) // args.batch
    cand = Candidate(name, params, args.size)
    step_gains, window_gains = [], []
    g_window, d_window = [], []  # per step: summed grads, summed (g - sent)
    g_rank_window, d_rank_window = [], []  # per step and worker
    rank_window_gains = []
    start = time.time()
    for step in range(args.steps):
        i = step % steps_per_epoch
        grads = []
        for w in workers:
            if i == 0 and step > 0:
                w["order"] = torch.randperm(len(w["x"]), generator=w["gen"])
            idx = w["order"][i * args.batch:(i + 1) * args.batch]
            model.zero_grad()
            F.cross_entropy(model(w["x"][idx]), w["y"][idx]).backward()
            grads.append([p.grad.detach().clone() for p in params])
        mean, sent, gain = cand.reduce(grads)
        step_gains.append(gain)
        g_window.append([sum(grads[w][p] for w in range(args.size))
                         for p in range(len(params))])
        d_window.append([sum(grads[w][p] - sent[w][p] for w in range(args.size))
                         for p in range(len(params))])
        g_rank_window.append(grads)
        d_rank_window.append([[grads[w][p] - sent[w][p] for p in range(len(params))]
                              for w in range(args.size)])
        if len(g_window) > args.window:
            g_window.pop(0)
            d_window.pop(0)
            g_rank_window.pop(0)
            d_rank_window.pop(0)
        if len(g_window) == args.window:
            g_sum = sum(float((sum(s[p] for s in g_window) ** 2).sum())
                        for p in range(len(params)))
            d_sum = sum(float((sum(s[p] for s in d_window) ** 2).sum())
                        for p in range(len(params)))
            window_gains.append(max(0.0, 1 - d_sum / g_sum))
            # The same ratio from each worker's own sums, averaged over
            # workers (numerator and denominator separately).
            g_rank = sum(float((sum(s[w][p] for s in g_rank_window) ** 2).sum())
                         for w in range(args.size) for p in range(len(params)))
            d_rank = sum(float((sum(s[w][p] for s in d_rank_window) ** 2).sum())
                         for w in range(args.size) for p in range(len(params)))
            rank_window_gains.append(max(0.0, 1 - d_rank / g_rank))
        for p, g in zip(params, mean):
            p.grad = g.clone()
        optimizer.step()
    acc = evaluate(model, torch.from_numpy(test_x), torch.from_numpy(test_y))
    tail = max(1, len(step_gains) // 2)
    return {"candidate": name, "steps": args.steps,
            "step_gain": sum(step_gains[-tail:]) / tail,
            "window_gain": (sum(window_gains[-tail:]) / min(tail, len(window_gains))
                            if window_gains else None),
            "test_accuracy": acc, "seconds": round(time.time() - start, 1),
            **({"window_gain_trace": {
                str(args.window + i): round(g, 3)
                for i, g in enumerate(window_gains)
                if (args.window + i) % args.trace == 0},
                "per_worker_window_gain_trace": {
                str(args.window + i): round(g, 3)
                for i, g in enumerate(rank_window_gains)
                if (args.window + i) % args.trace == 0}} if args.trace else {})}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--candidates",
                        default="none,fp16,powersgd:1,powersgd:4,topk:10,topk:100")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--window", type=int, default=20)
    parser.add_argument("--size", type=int, default=4)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--trace", type=int, default=0,
                        help="also print the window gain ending at every "
                        "N-th step (how long a trial needs to level off)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = load()
    for name in args.candidates.split(","):
        print(json.dumps(run(name, args, data)), flush=True)


if __name__ == "__main__":
    main()
