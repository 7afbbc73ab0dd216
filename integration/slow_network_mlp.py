"""One rank of the slow-network experiment: an MLP 784-1024-1024-10 (or, with
--model cnn, the README demo's CNN) on Fashion-MNIST, batch 64 per rank,
trained data-parallel either with terse (compression from TERSE_* variables)
or with PyTorch DDP over gloo (dense, or with DDP's fp16 or PowerSGD hook) as
outside references.

Launched by integration/gravac_experiment.py under mpirun (rank and size come
from Open MPI's environment for the DDP modes). Rank 0 appends one JSON object
per evaluation to --metrics-out:
  {"epoch", "step", "wall", "train_loss", "test_accuracy", "step_time",
   "bytes_sent_per_step", "bytes_sent_total", "policy", "cf_changes",
   "choice_changes"}
"wall" is training time on rank 0 (evaluation excluded). "cf_changes" lists
[step, bucket, cf] whenever a bucket's CF changes, "choice_changes"
[step, bucket, compressor, cf] whenever its compressor or CF changes (the
compressor as the engine reports it: "none" dense, "topk", "powersgd:4", ...).
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fashion_mnist_data import load, shard  # noqa: E402
from fashion_mnist_models import MODELS, build_model  # noqa: E402,F401


def evaluate(model, x, y):
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(x), 2000):
            correct += (model(x[i:i + 2000]).argmax(1) == y[i:i + 2000]).sum().item()
    model.train()
    return correct / len(x)


class DdpRunner:
    """torch.distributed over gloo; rank/size from Open MPI's environment."""

    def __init__(self, model, lr, powersgd_rank=0, fp16=False):
        import torch.distributed as dist
        self.rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
        self.size = int(os.environ["OMPI_COMM_WORLD_SIZE"])
        dist.init_process_group("gloo", rank=self.rank, world_size=self.size)
        # PowerSGD under gloo needs one bucket, or ranks issue collectives in
        # different orders and fail. DDP's first bucket has its own 1 MiB cap
        # (torch 1.13 reads it from this module attribute), so raise both.
        dist._DEFAULT_FIRST_BUCKET_BYTES = 256 * 1024 * 1024
        self.model = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=256)
        if powersgd_rank > 0:
            from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
            state = powerSGD_hook.PowerSGDState(
                process_group=None, matrix_approximation_rank=powersgd_rank,
                start_powerSGD_iter=2, min_compression_rate=2,
                use_error_feedback=True, warm_start=True)
            self.model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
            # Bytes are estimated from the factor shapes: the hook views each
            # parameter of 2+ dimensions as shape[0] x rest and compresses it
            # when that saves min_compression_rate (2x); vectors go dense.
            def estimate(p):
                if p.dim() < 2:
                    return p.numel()
                n, m = p.shape[0], p.numel() // p.shape[0]
                factors = (n + m) * min(powersgd_rank, n, m)
                return factors if n * m >= 2 * factors else p.numel()
            self.bytes_per_step = 4 * sum(estimate(p) for p in model.parameters())
        elif fp16:
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
            self.model.register_comm_hook(None, default_hooks.fp16_compress_hook)
            self.bytes_per_step = 2 * sum(p.numel() for p in model.parameters())
        else:
            self.bytes_per_step = 4 * sum(p.numel() for p in model.parameters())
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=lr, momentum=0.9)

    def policy(self):
        return "ddp"

    def bytes_sent_total(self, steps):
        return self.bytes_per_step * steps

    def choices_now(self):
        return {}

    def shutdown(self):
        import torch.distributed as dist
        # Every rank past its last step first: rank 0 evaluates after the
        # others finish, and a gloo group torn down under it can leave it
        # waiting for ever (seen once with the fp16 hook).
        dist.barrier()
        # No destroy_process_group: with a Python comm hook (PowerSGD) torch
        # 1.13's ~ProcessGroupGloo joins a gloo worker thread that waits for
        # the GIL its caller holds, for ever (seen 2026-12-04: main thread in
        # thread::join, the worker in PyEval_AcquireThread). Everything is
        # written; leave without the teardown.
        sys.stdout.flush()
        os._exit(0)


class TerseRunner:
    def __init__(self, model, lr):
        import terse.torch as tt
        self.tt = tt
        tt.init()
        self.rank, self.size = tt.rank(), tt.size()
        self.model = model
        tt.broadcast_parameters(model.state_dict(), root_rank=0)
        # With TERSE_MOMENTUM_CORRECTION terse applies the momentum (DGC's
        # momentum correction), so the optimizer itself runs plain SGD.
        momentum = 0.0 if tt.momentum_correction() > 0 else 0.9
        optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
        self.optimizer = tt.DistributedOptimizer(
            optimizer, named_parameters=model.named_parameters())

    def policy(self):
        return [{"bucket": r["bucket"], "policy": r["policy"],
                 "compressor": r["compressor"], "cf": r["cf"],
                 "bytes": r["bytes"], "bytes_sent": r["bytes_sent"]}
                for r in self.tt.bucket_reports()]

    def bytes_sent_total(self, steps):
        return self.tt.bytes_sent()

    def choices_now(self):
        """bucket -> (compressor, cf) it sent on its last step."""
        return {r["bucket"]: (r["compressor"], r["cf"]) for r in self.tt.bucket_reports()}

    def shutdown(self):
        self.tt.shutdown()


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mode", choices=["terse", "ddp", "ddp-fp16", "ddp-powersgd"],
                        default="terse")
    parser.add_argument("--model", choices=MODELS, default="mlp")
    parser.add_argument("--powersgd-rank", type=int, default=4)
    parser.add_argument("--epochs", type=float, default=3)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--eval-every", type=int, default=100, help="steps")
    parser.add_argument("--max-steps", type=int, default=0, help="0: no cap")
    parser.add_argument("--metrics-out", default="")
    parser.add_argument("--seed", type=int, default=0,
                        help="model initialisation and data order; 0 is the "
                             "seed every published run before session 10 used")
    args = parser.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    model = build_model(args.model)
    if args.mode == "terse":
        runner = TerseRunner(model, args.lr)
    else:
        runner = DdpRunner(model, args.lr,
                           powersgd_rank=args.powersgd_rank if args.mode == "ddp-powersgd" else 0,
                           fp16=args.mode == "ddp-fp16")
    train_x, train_y, test_x, test_y = load()
    x, y = shard(train_x, train_y, runner.rank, runner.size)
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    test_x, test_y = torch.from_numpy(test_x), torch.from_numpy(test_y)

    steps_per_epoch = len(x) // args.batch
    total_steps = int(args.epochs * steps_per_epoch)
    if args.max_steps:
        total_steps = min(total_steps, args.max_steps)
    # Each rank draws its own order; seed 0 keeps the historical 1 + rank.
    generator = torch.Generator().manual_seed(1 + runner.rank + 1000 * args.seed)
    out = open(args.metrics_out, "a") if (args.metrics_out and runner.rank == 0) else None
    start = time.time()
    eval_seconds = 0.0  # Excluded from "wall": time to accuracy is training time.
    step_times, losses = [], []
    bytes_at_eval, step_at_eval = runner.bytes_sent_total(0), 0
    cf_last, cf_changes = {}, []  # [step, bucket, cf] whenever a bucket's CF changes.
    choice_last, choice_changes = {}, []  # [step, bucket, compressor, cf]
    order = torch.randperm(len(x), generator=generator)
    for step in range(total_steps):
        i = step % steps_per_epoch
        if i == 0 and step > 0:
            order = torch.randperm(len(x), generator=generator)
        idx = order[i * args.batch:(i + 1) * args.batch]
        t0 = time.time()
        runner.optimizer.zero_grad()
        loss = F.cross_entropy(runner.model(x[idx]), y[idx])
        loss.backward()
        runner.optimizer.step()
        step_times.append(time.time() - t0)
        losses.append(loss.item())
        if runner.rank == 0:
            for bucket, (compressor, cf) in runner.choices_now().items():
                if cf_last.get(bucket) != cf:
                    cf_changes.append([step + 1, bucket, cf])
                    cf_last[bucket] = cf
                if choice_last.get(bucket) != (compressor, cf):
                    choice_changes.append([step + 1, bucket, compressor, cf])
                    choice_last[bucket] = (compressor, cf)
        last = step == total_steps - 1
        if (step + 1) % args.eval_every == 0 or last:
            if runner.rank == 0:
                wall = time.time() - start - eval_seconds
                eval_start = time.time()
                accuracy = evaluate(model, test_x, test_y)
                eval_seconds += time.time() - eval_start
                sent = runner.bytes_sent_total(step + 1)
                window = step + 1 - step_at_eval
                record = {
                    "epoch": (step + 1) / steps_per_epoch, "step": step + 1,
                    "wall": wall,
                    "train_loss": float(np.mean(losses[-window:])),
                    "test_accuracy": accuracy,
                    # Median over the steps since the last evaluation.
                    "step_time": float(np.median(step_times[-window:])),
                    # This rank's payload bytes (what it contributes to the
                    # reductions, before the collective's own fan-out).
                    "bytes_sent_per_step": (sent - bytes_at_eval) / window,
                    "bytes_sent_total": sent,
                    "policy": runner.policy(),
                    "cf_changes": cf_changes,
                    "choice_changes": choice_changes,
                }
                bytes_at_eval, step_at_eval = sent, step + 1
                cf_changes, choice_changes = [], []
                print(json.dumps(record), flush=True)
                if out:
                    out.write(json.dumps(record) + "\n")
                    out.flush()
    runner.shutdown()


if __name__ == "__main__":
    main()
