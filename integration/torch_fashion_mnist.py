"""Fashion-MNIST with a small CNN, data-parallel with terse.torch.

    terserun -np 4 /usr/bin/python3 integration/torch_fashion_mnist.py
    /usr/bin/python3 integration/torch_fashion_mnist.py --local   # 1 process,
                                                  # no terse: the reference

Each rank trains on its 1/size of the 60,000 training images (batch --batch
per rank; the global batch is batch * size), gradients averaged by terse's
DistributedOptimizer with the process-wide compression policy (TERSE_*
variables; --compression sets it for this run). Rank 0 prints per epoch: mean
training loss and accuracy over all ranks, test accuracy, images/s over all
ranks (evaluation excluded), the bytes this rank sent against the gradient
bytes it reduced, and for every bucket what the engine reports: the
compressor and level it sent on what share of the epoch's steps ("topk:10" =
top-k at CF 10, "powersgd:4" = PowerSGD rank 4, "none" = dense), the bytes
it sent against its dense bytes, and why: its policy's own line (GraVAC's
names its gains and measured throughputs T_c). The last line is a JSON
summary; with
--require-accuracy the exit status says whether the final test accuracy
reached it.
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fashion_mnist_data import load, shard  # noqa: E402
from fashion_mnist_models import Net  # noqa: E402,F401


class Local:
    """One process, no communication: the single-process reference."""

    rank, size = 0, 1

    def wrap(self, optimizer, model):
        return optimizer

    def sum(self, values):
        return np.asarray(values, dtype=np.float64)

    def after_step(self):
        pass

    def report(self):
        return {}

    def shutdown(self):
        pass


# Families whose level is a compression factor (their choice reads "topk:10").
SPARSIFIERS = ("topk", "dgc", "redsync", "randomk", "threshold")


def choice_label(compressor, cf):
    """What a bucket sent, spelt as TERSE_GRAVAC_CANDIDATES spells it:
    "none" (dense), "fp16", "powersgd:4" (the engine names the rank),
    "topk:10" (a sparsifier at CF 10)."""
    if not compressor or compressor == "none":
        return "none"
    if ":" not in compressor and compressor in SPARSIFIERS:
        return f"{compressor}:{cf:g}" if cf > 1 else "none"
    return compressor


class BucketTally:
    """Per bucket over an epoch, from the engine's reports after each step:
    how many steps sent each choice, bytes sent and dense bytes."""

    def __init__(self):
        self.seen_steps = {}
        self.reset()

    def reset(self):
        self.buckets = {}

    def skip(self, reports):
        """Marks what the buckets did so far as seen without counting it (the
        metrics' own allreduces between epochs are no training step)."""
        for r in reports:
            self.seen_steps[r["bucket"]] = r["steps"]

    def observe(self, reports):
        for r in reports:
            b = r["bucket"]
            if self.seen_steps.get(b) == r["steps"]:
                continue  # The bucket did not run since the last look.
            self.seen_steps[b] = r["steps"]
            t = self.buckets.setdefault(b, {"choices": {}, "sent": 0, "dense": 0})
            label = choice_label(r["compressor"], r["cf"])
            t["choices"][label] = t["choices"].get(label, 0) + 1
            t["sent"] += r["bytes_sent"]
            t["dense"] += r["bytes"]


class Terse:
    """terse.torch: ranks from mpirun/terserun."""

    def __init__(self, compression):
        import terse.torch as tt
        self.tt = tt
        tt.init(compression=compression)  # None: TERSE_COMPRESSION's.
        self.rank, self.size = tt.rank(), tt.size()
        self.tally = BucketTally()

    def after_step(self):
        """Rank 0 tallies what each bucket sent (every rank decides alike)."""
        if self.rank == 0:
            self.tally.observe(self.tt.bucket_reports())

    def wrap(self, optimizer, model):
        self.tt.broadcast_parameters(model.state_dict(), root_rank=0)
        self.tt.broadcast_optimizer_state(optimizer, root_rank=0)
        self.optimizer = self.tt.DistributedOptimizer(
            optimizer, named_parameters=model.named_parameters())
        self.compression = self.tt.engine_compression()
        return self.optimizer

    def sum(self, values):
        t = torch.tensor(values, dtype=torch.float64)
        out = self.tt.allreduce(t, name="metrics", op=self.tt.Sum).numpy()
        if self.rank == 0:
            self.tally.skip(self.tt.bucket_reports())
        return out

    def report(self):
        """What the engine reports: bytes this rank sent, and per bucket the
        compressor and CF it used on its last step."""
        report = {"bytes_sent": self.tt.bytes_sent(),
                  "gradient_bytes_reduced": self.optimizer.terse_bytes_reduced,
                  "policy": self.compression.spec(),
                  "buckets": self.tt.bucket_reports(),
                  "epoch": self.tally.buckets}
        self.tally.reset()
        return report

    def shutdown(self):
        self.tt.shutdown()


def evaluate(model, x, y, rank, size, comm):
    """Test accuracy over the whole test set, each rank scoring a shard."""
    xs, ys = shard(x, y, rank, size)
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(xs), 1000):
            logits = model(torch.from_numpy(xs[i:i + 1000]))
            correct += int((logits.argmax(1).numpy() == ys[i:i + 1000]).sum())
    model.train()
    total_correct, total = comm.sum([correct, len(xs)])
    return total_correct / total


def ratio_text(dense, sent):
    if sent == dense:
        return "dense"
    return f"{dense / sent:.1f}x less" if sent > 0 else "nothing sent"


def share_text(n, total):
    share = 100 * n / total
    return "<1%" if 0 < share < 1 else f"{share:.0f}%"


def format_report(report, previous):
    """One epoch's traffic (deltas against the previous report) and, per
    bucket, the choices it sent over the epoch, its bytes against dense, and
    its policy's line (why)."""
    if not report:
        return ""
    sent = report["bytes_sent"] - previous.get("bytes_sent", 0)
    dense = (report["gradient_bytes_reduced"] -
             previous.get("gradient_bytes_reduced", 0))
    parts = [f"sent {sent / 1e6:.1f} MB/rank for {dense / 1e6:.1f} MB of "
             f"gradients ({ratio_text(dense, sent)}; policy "
             f"{report['policy']})"]
    epoch = report.get("epoch", {})
    for b in report["buckets"]:
        t = epoch.get(b["bucket"])
        if epoch and not t:
            continue  # Not a gradient bucket of this epoch (the metrics').
        head = (f"bucket {b['bucket']} ({b['tensors']} tensors, "
                f"{b['bytes'] / 1e3:.0f} kB): ")
        if t:
            steps = sum(t["choices"].values())
            shares = sorted(t["choices"].items(), key=lambda kv: -kv[1])
            head += ", ".join(f"{label} {share_text(n, steps)}"
                              for label, n in shares)
            head += (f" of {steps} steps; sent {t['sent'] / 1e6:.2f} MB "
                     f"against {t['dense'] / 1e6:.2f} MB dense "
                     f"({ratio_text(t['dense'], t['sent'])})")
        else:
            head += (f"{choice_label(b['compressor'], b['cf'])} on its "
                     f"last step")
        parts.append(head)
        parts.append(f"    why: {b['policy']}")
    return "\n    " + "\n    ".join(parts)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32,
                        help="images per rank per step")
    parser.add_argument("--lr", type=float, default=5e-3,
                        help="peak learning rate (Adam, one-cycle schedule)")
    parser.add_argument("--compression", default=None,
                        help="compressor name[:cf]; default: TERSE_* policy")
    parser.add_argument("--local", action="store_true",
                        help="one process without terse (reference run)")
    parser.add_argument("--global-batch-of", type=int, default=0,
                        help="with --local: use batch * N images per step, "
                             "the global batch of an N-rank run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--require-accuracy", type=float, default=0.0,
                        help="exit 1 if the final test accuracy is lower")
    args = parser.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    comm = Local() if args.local else Terse(args.compression)
    batch = args.batch * (args.global_batch_of or 1) if args.local \
        else args.batch

    train_x, train_y, test_x, test_y = load()
    x, y = shard(train_x, train_y, comm.rank, comm.size)
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    steps_per_epoch = len(x) // batch
    total_steps = args.epochs * steps_per_epoch

    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    optimizer = comm.wrap(optimizer, model)
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=args.lr, total_steps=total_steps)

    if comm.rank == 0:
        print(f"Fashion-MNIST CNN: {comm.size} rank(s), "
              f"{sum(p.numel() for p in model.parameters()):,} parameters, "
              f"batch {batch}/rank ({batch * comm.size} global), "
              f"{steps_per_epoch} steps/epoch", flush=True)
    generator = torch.Generator().manual_seed(args.seed * 1000 + comm.rank)
    train_seconds = 0.0
    accuracy = 0.0
    last_report = {}
    for epoch in range(1, args.epochs + 1):
        order = torch.randperm(len(x), generator=generator)
        loss_sum = correct = 0.0
        start = time.perf_counter()
        for step in range(steps_per_epoch):
            idx = order[step * batch:(step + 1) * batch]
            optimizer.zero_grad()
            logits = model(x[idx])
            loss = F.cross_entropy(logits, y[idx])
            loss.backward()
            optimizer.step()
            comm.after_step()
            schedule.step()
            loss_sum += loss.item()
            correct += (logits.argmax(1) == y[idx]).sum().item()
        seconds = time.perf_counter() - start
        train_seconds += seconds
        images = steps_per_epoch * batch
        report = comm.report()  # Before the metrics' own allreduces.
        # Steps are collective, so rank 0's epoch time is every rank's.
        loss_total, correct_total, images_total = comm.sum(
            [loss_sum, correct, images])
        accuracy = evaluate(model, test_x, test_y, comm.rank, comm.size, comm)
        if comm.rank == 0:
            line = (f"epoch {epoch}/{args.epochs}  "
                    f"loss {loss_total / (steps_per_epoch * comm.size):.4f}  "
                    f"train acc {correct_total / images_total:.4f}  "
                    f"test acc {accuracy:.4f}  "
                    f"{images_total / seconds:,.0f} images/s  "
                    f"{seconds:.1f} s")
            print(line + format_report(report, last_report), flush=True)
        last_report = report

    summary = {"ranks": comm.size, "epochs": args.epochs,
               "global_batch": batch * comm.size,
               "test_accuracy": round(accuracy, 4),
               "train_seconds": round(train_seconds, 1)}
    final = comm.report()
    if final:
        summary.update({"bytes_sent": final["bytes_sent"],
                        "gradient_bytes_reduced":
                            final["gradient_bytes_reduced"],
                        "policy": final["policy"],
                        "buckets": [{k: b[k] for k in ("bucket", "compressor",
                                                        "cf", "bytes")}
                                    for b in final["buckets"]]})
    if comm.rank == 0:
        print(json.dumps(summary), flush=True)
    comm.shutdown()
    if accuracy < args.require_accuracy:
        if comm.rank == 0:
            print(f"test accuracy {accuracy:.4f} is below the required "
                  f"{args.require_accuracy}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
