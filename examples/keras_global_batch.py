"""Keras with terse, checked against one process on the global batch.

    mpirun -np 2 /opt/terse-tf-venv/bin/python examples/keras_global_batch.py
    /opt/terse-tf-venv/bin/python examples/keras_global_batch.py \
        --reference-only

A Horovod-style Keras program (terse.keras in place of horovod.keras): a
784-128-10 MLP on Fashion-MNIST, SGD with momentum, the
DistributedOptimizer averaging gradients, BroadcastGlobalVariablesCallback
and MetricAverageCallback. Global batch k of the (seeded, shuffled)
training images is split across the ranks: rank r trains on rows
[k G + r B, k G + (r + 1) B) (B = --batch per rank, G = size B), so the
data-parallel run takes the same steps as one process training on batches
of G. Every rank then trains that single-process reference itself, without
terse, from the same initial weights, and both models are evaluated on the
10,000 test images. The last line is JSON; with --tolerance the exit status
says whether the two test accuracies are within that many points.
"""

import argparse
import json
import os
import sys

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(_HERE), "integration"))
from fashion_mnist_data import load  # noqa: E402


def make_model(tf, seed):
    tf.keras.utils.set_random_seed(seed)
    return tf.keras.Sequential([
        tf.keras.layers.Input((784,)),
        tf.keras.layers.Dense(128, activation="relu"),
        tf.keras.layers.Dense(10),
    ])


def compile_model(tf, model, optimizer):
    model.compile(
        optimizer=optimizer,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"])


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32,
                        help="images per rank and step")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--train-images", type=int, default=12000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tolerance", type=float, default=0.0,
                        help="points of test accuracy allowed between the "
                             "terse run and the reference (0: no check)")
    parser.add_argument("--reference-only", action="store_true",
                        help="one process, no terse")
    return parser.parse_args(argv)


def global_batches(args, size):
    """The training rows in order, cut to whole global batches."""
    train_x, train_y, test_x, test_y = load()
    order = np.random.RandomState(args.seed).permutation(len(train_x))
    order = order[:args.train_images]
    g = args.batch * size
    order = order[:len(order) // g * g]
    return (train_x[order].reshape(len(order), -1), train_y[order],
            test_x.reshape(len(test_x), -1), test_y)


def rank_rows(x, size, rank, batch):
    """Rank `rank`'s share of every global batch, in step order."""
    steps = len(x) // (size * batch)
    shaped = x.reshape((steps, size, batch) + x.shape[1:])
    return shaped[:, rank].reshape((steps * batch,) + x.shape[1:])


def reference(tf, args, size, x, y, test_x, test_y):
    model = make_model(tf, args.seed)
    compile_model(tf, model, tf.keras.optimizers.SGD(args.lr, momentum=0.9))
    model.fit(x, y, batch_size=args.batch * size, epochs=args.epochs,
              shuffle=False, verbose=0)
    return float(model.evaluate(test_x, test_y, verbose=0)[1])


def main(argv=None):
    args = parse_args(argv)
    import tensorflow as tf
    tf.config.threading.set_inter_op_parallelism_threads(2)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    if args.reference_only:
        x, y, test_x, test_y = global_batches(args, 1)
        acc = reference(tf, args, 1, x, y, test_x, test_y)
        print(json.dumps({"reference_accuracy": acc}))
        return 0

    import terse.keras as hvd
    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    x, y, test_x, test_y = global_batches(args, size)
    model = make_model(tf, args.seed + 1 + rank)  # differs: the callback
    compile_model(tf, model, hvd.DistributedOptimizer(         # syncs it
        tf.keras.optimizers.SGD(args.lr, momentum=0.9)))
    if rank == 0:  # rank 0 starts from the reference's weights
        model.set_weights(make_model(tf, args.seed).get_weights())
    history = model.fit(
        rank_rows(x, size, rank, args.batch),
        rank_rows(y, size, rank, args.batch), batch_size=args.batch,
        epochs=args.epochs, shuffle=False, verbose=0,
        callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                   hvd.callbacks.MetricAverageCallback()])
    terse_acc = float(model.evaluate(test_x, test_y, verbose=0)[1])
    ref_acc = reference(tf, args, size, x, y, test_x, test_y)
    result = {"rank": rank, "size": size, "terse_accuracy": terse_acc,
              "reference_accuracy": ref_acc,
              "difference_points": 100.0 * (terse_acc - ref_acc),
              "train_loss": history.history["loss"]}
    if rank == 0:
        print(json.dumps(result), flush=True)
    hvd.shutdown()
    if args.tolerance > 0 and abs(result["difference_points"]) > \
            args.tolerance:
        print(f"rank {rank}: terse {terse_acc:.4f} vs reference "
              f"{ref_acc:.4f}: more than {args.tolerance} points apart",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
