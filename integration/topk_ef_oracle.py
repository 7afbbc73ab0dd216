"""Independent oracle for static top-k with error feedback on the slow-network
MLP: one process simulates the 4 workers of integration/slow_network_mlp.py
(same model, initial weights, data shards, batch order and optimizer) with
plain torch, no terse. Each worker keeps a residual per bucket; per step
  a = g + residual; sent = top-k of a by magnitude (k = ceil(d / cf)), values
  rounded to bf16 as terse's payload does; residual = a - sent
and the workers' sent tensors are averaged and handed to SGD (lr 0.05,
momentum 0.9) — what terse does with TERSE_COMPRESSION=topk. Buckets below
TERSE_MIN_COMPRESS_BYTES (64 KiB) go dense, as in the engine.

--momentum-correction switches to DGC's momentum correction (Lin et al.,
2018): each worker accumulates u = m*u + g and v = v + u locally, compresses
v, clears the sent entries of u and v (momentum factor masking), and the
averaged sparse update is applied by plain SGD (no optimizer momentum);
buckets that go dense send their whole velocity u and keep it. This is what
terse does with TERSE_MOMENTUM_CORRECTION=0.9 (engine/momentum_correction.h).

Prints one JSON line per evaluation: {"step", "test_accuracy", "train_loss"}.

    /usr/bin/python3 integration/topk_ef_oracle.py --cf 100 --steps 468
    /usr/bin/python3 integration/topk_ef_oracle.py --cf 0 --steps 468   # dense
"""

import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fashion_mnist_data import load, shard  # noqa: E402
from slow_network_mlp import build_model, evaluate  # noqa: E402

MIN_COMPRESS_BYTES = 65536


def bf16_round(x):
    """Round-to-nearest-even to bfloat16, as terse's payload encoder does."""
    return x.to(torch.bfloat16).to(torch.float32)


def topk_sparse(a, cf):
    """Top-k of a 1-D tensor by magnitude, k = ceil(d / cf), bf16 values."""
    k = min(a.numel(), max(1, math.ceil(a.numel() / cf)))
    idx = torch.topk(a.abs(), k, sorted=False).indices
    out = torch.zeros_like(a)
    out[idx] = bf16_round(a[idx])
    return out


def buckets_of(params, layout):
    """Groups of parameter indices, each reduced as one flat bucket."""
    n = len(params)
    if layout == "tensor":  # TERSE_FUSION_THRESHOLD=0: one bucket each.
        return [[i] for i in range(n)]
    if layout == "layer":  # weight + bias of each Linear.
        return [list(range(i, min(i + 2, n))) for i in range(0, n, 2)]
    # "global": the last layer (41 KB, dense) and everything else.
    return [list(range(0, n - 2)), [n - 2, n - 1]]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cf", type=float, default=100, help="0: dense")
    parser.add_argument("--steps", type=int, default=468)
    parser.add_argument("--size", type=int, default=4)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument("--layout", choices=["tensor", "layer", "global"], default="layer")
    parser.add_argument("--momentum-correction", action="store_true")
    args = parser.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = build_model()
    params = list(model.parameters())
    buckets = buckets_of(params, args.layout)
    dgc = args.momentum_correction
    optimizer = torch.optim.SGD(params, lr=args.lr, momentum=0.0 if dgc else 0.9)

    train_x, train_y, test_x, test_y = load()
    test_x, test_y = torch.from_numpy(test_x), torch.from_numpy(test_y)
    workers = []
    for rank in range(args.size):
        x, y = shard(train_x, train_y, rank, args.size)
        workers.append({
            "x": torch.from_numpy(x), "y": torch.from_numpy(y),
            "gen": torch.Generator().manual_seed(1 + rank),
            "residual": [None] * len(buckets),
            "u": [None] * len(buckets)})
    steps_per_epoch = len(workers[0]["x"]) // args.batch
    for w in workers:
        w["order"] = torch.randperm(len(w["x"]), generator=w["gen"])

    losses = []
    for step in range(args.steps):
        i = step % steps_per_epoch
        summed = [None] * len(buckets)
        for w in workers:
            if i == 0 and step > 0:
                w["order"] = torch.randperm(len(w["x"]), generator=w["gen"])
            idx = w["order"][i * args.batch:(i + 1) * args.batch]
            model.zero_grad()
            loss = F.cross_entropy(model(w["x"][idx]), w["y"][idx])
            loss.backward()
            losses.append(loss.item())
            for b, members in enumerate(buckets):
                g = torch.cat([params[p].grad.reshape(-1) for p in members])
                compress = args.cf >= 1 and g.numel() * 4 >= MIN_COMPRESS_BYTES
                if not compress and dgc:
                    # A dense bucket keeps its whole velocity (momentum SGD),
                    # as terse's TERSE_MOMENTUM_CORRECTION does.
                    u = w["u"][b] if w["u"][b] is not None else torch.zeros_like(g)
                    w["u"][b] = sent = 0.9 * u + g
                elif not compress:
                    sent = g
                elif dgc:
                    u = w["u"][b] if w["u"][b] is not None else torch.zeros_like(g)
                    v = w["residual"][b] if w["residual"][b] is not None else torch.zeros_like(g)
                    u = 0.9 * u + g
                    v = v + u
                    sent = topk_sparse(v, args.cf)
                    mask = sent != 0
                    w["u"][b] = u.masked_fill(mask, 0.0)
                    # Sent entries leave both accumulators (their bf16
                    # rounding error is dropped with them).
                    w["residual"][b] = (v - sent).masked_fill(mask, 0.0)
                else:
                    r = w["residual"][b]
                    a = g if r is None else g + r
                    sent = topk_sparse(a, args.cf)
                    w["residual"][b] = a - sent
                summed[b] = sent if summed[b] is None else summed[b] + sent
        for b, members in enumerate(buckets):
            avg = summed[b] / args.size
            at = 0
            for p in members:
                n = params[p].numel()
                params[p].grad = avg[at:at + n].view_as(params[p]).clone()
                at += n
        optimizer.step()
        if (step + 1) % args.eval_every == 0 or step == args.steps - 1:
            acc = evaluate(model, test_x, test_y)
            print(json.dumps({"step": step + 1, "test_accuracy": acc,
                              "train_loss": float(np.mean(losses[-args.size * args.eval_every:]))}),
                  flush=True)


if __name__ == "__main__":
    main()
