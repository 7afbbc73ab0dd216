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
bytes it reduced, and the compressor and CF of every bucket on its last step,
as the engine reports them. The last line is a JSON summary; with
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

    def report(self):
        return {}

    def shutdown(self):
        pass


class Terse:
    """terse.torch: ranks from mpirun/terserun."""

    def __init__(self, compression):
        import terse.torch as tt
        self.tt = tt
        tt.init(compression=compression)  # None: TERSE_COMPRESSION's.
        self.rank, self.size = tt.rank(), tt.size()

    def wrap(self, optimizer, model):
        self.tt.broadcast_parameters(model.state_dict(), root_rank=0)
        self.tt.broadcast_optimizer_state(optimizer, root_rank=0)
        self.optimizer = self.tt.DistributedOptimizer(
            optimizer, named_parameters=model.named_parameters())
        self.compression = self.tt.engine_compression()
        return self.optimizer

    def sum(self, values):
        t = torch.tensor(values, dtype=torch.float64)
        return self.tt.allreduce(t, name="metrics", op=self.tt.Sum).numpy()

    def report(self):
        """What the engine reports: bytes this rank sent, and per bucket the
        compressor and CF it used on its last step."""
        return {"bytes_sent": self.tt.bytes_sent(),
                "gradient_bytes_reduced": self.optimizer.terse_bytes_reduced,
                "policy": self.compression.spec(),
                "buckets": self.tt.bucket_reports()}

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


def format_report(report, previous):
    """One epoch's traffic (deltas against the previous report) and the
    compressor/CF each bucket used on its last step."""
    if not report:
        return ""
    sent = report["bytes_sent"] - previous.get("bytes_sent", 0)
    dense = (report["gradient_bytes_reduced"] -
             previous.get("gradient_bytes_reduced", 0))
    parts = [f"sent {sent / 1e6:.1f} MB/rank for {dense / 1e6:.1f} MB of "
             f"gradients (policy {report['policy']})"]
    for b in report["buckets"]:
        parts.append(f"bucket {b['bucket']} ({b['tensors']} tensors, "
                     f"{b['bytes'] / 1e3:.0f} kB): {b['compressor']} "
                     f"cf {b['cf']:g}")
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
