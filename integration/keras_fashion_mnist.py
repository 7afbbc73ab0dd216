"""Fashion-MNIST with a small CNN in Keras, data-parallel with terse.tensorflow.

    terserun -np 2 /opt/terse-tf-venv/bin/python integration/keras_fashion_mnist.py
    TERSE_COMPRESSION=fp16 terserun -np 4 /opt/terse-tf-venv/bin/python \
        integration/keras_fashion_mnist.py --epochs 3
    /opt/terse-tf-venv/bin/python integration/keras_fashion_mnist.py --local
                                       # 1 process, no terse: the reference

Each rank trains on its 1/size of the 60,000 training images (batch --batch
per rank, Adam, the last epoch at a lower learning rate), starting from rank
0's weights (BroadcastGlobalVariablesCallback);
terse's Keras DistributedOptimizer averages the gradients, compressed as the
TERSE_* variables select (TERSE_COMPRESSION, TERSE_CF, ...). Rank 0 prints
Keras' progress per epoch (loss and accuracy averaged over the ranks), the
test accuracy, and a last line of JSON; with --require-accuracy the exit
status says whether the test accuracy reached it.
"""

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fashion_mnist_data import load, shard  # noqa: E402


def make_model():
    """Two 3x3 conv layers (16, 32 channels) with pooling, then 128 -> 10:
    206,922 parameters (the network of torch_fashion_mnist.py)."""
    import tensorflow as tf
    layers = tf.keras.layers
    return tf.keras.Sequential([
        layers.Input((28, 28, 1)),
        layers.Conv2D(16, 3, padding="same", activation="relu"),
        layers.MaxPooling2D(2),
        layers.Conv2D(32, 3, padding="same", activation="relu"),
        layers.MaxPooling2D(2),
        layers.Flatten(),
        layers.Dense(128, activation="relu"),
        layers.Dense(10),
    ])


def FinalEpochLearningRate(args, hvd):
    """Lowers the learning rate for the last epoch (and tells terse, whose
    Accordion policy switches to its low compression factor then)."""
    import tensorflow as tf

    def schedule(epoch, lr):
        if epoch == args.epochs - 1:
            if hvd is not None:
                hvd.notify_learning_rate_drop()
            return args.lr * args.final_lr_scale
        return args.lr

    return tf.keras.callbacks.LearningRateScheduler(schedule)


def to_nhwc(x):
    """The loader's [N, 1, 28, 28] as Keras' channels-last [N, 28, 28, 1]."""
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64,
                        help="images per rank per step")
    parser.add_argument("--lr", type=float, default=2e-3,
                        help="Adam learning rate")
    parser.add_argument("--final-lr-scale", type=float, default=0.3,
                        help="the last epoch runs at lr times this (1: off)")
    parser.add_argument("--train-images", type=int, default=0,
                        help="use only the first N training images (0: all)")
    parser.add_argument("--threads", type=int, default=0,
                        help="TensorFlow threads per rank (0: cores / ranks)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--local", action="store_true",
                        help="one process without terse (the reference)")
    parser.add_argument("--require-accuracy", type=float, default=0.0,
                        help="exit 1 unless the test accuracy reaches this")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    start = time.time()
    import tensorflow as tf
    if args.local:
        rank, size, local_size = 0, 1, 1
        hvd = None
    else:
        import terse.tensorflow.keras as hvd
        hvd.init()
        rank, size, local_size = hvd.rank(), hvd.size(), hvd.local_size()
    threads = args.threads or max(1, (os.cpu_count() or 1) // local_size)
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(max(2, threads))
    # Each rank starts from its own weights: the broadcast must fix that.
    tf.keras.utils.set_random_seed(args.seed + rank)

    train_x, train_y, test_x, test_y = load()
    if args.train_images:
        train_x, train_y = train_x[:args.train_images], train_y[:args.train_images]
    x, y = shard(to_nhwc(train_x), train_y, rank, size)
    test_x = to_nhwc(test_x)

    model = make_model()
    optimizer = tf.keras.optimizers.Adam(args.lr)
    callbacks = []
    if hvd is not None:
        optimizer = hvd.DistributedOptimizer(optimizer)
        callbacks = [hvd.BroadcastGlobalVariablesCallback(0),
                     hvd.MetricAverageCallback()]
    if args.epochs > 1 and args.final_lr_scale != 1.0:
        callbacks.append(FinalEpochLearningRate(args, hvd))
    model.compile(
        optimizer=optimizer,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"])
    ready = time.time()
    history = model.fit(x, y, batch_size=args.batch, epochs=args.epochs,
                        shuffle=True, callbacks=callbacks,
                        verbose=2 if rank == 0 else 0)
    trained = time.time()
    # Every rank holds the same weights; each evaluates the whole test set.
    _, accuracy = model.evaluate(test_x, test_y, batch_size=500, verbose=0)
    compression = os.environ.get("TERSE_COMPRESSION", "none")
    if hvd is not None:
        hvd.shutdown()
    if rank == 0:
        steps = args.epochs * (len(x) // args.batch + (len(x) % args.batch > 0))
        summary = {
            "program": "keras_fashion_mnist",
            "ranks": size,
            "compression": "local" if args.local else compression,
            "epochs": args.epochs,
            "batch_per_rank": args.batch,
            "train_images": len(x) * size,
            "final_train_loss": round(float(history.history["loss"][-1]), 4),
            "test_accuracy": round(float(accuracy), 4),
            "train_seconds": round(trained - ready, 1),
            "images_per_second": round(
                steps * args.batch * size / max(trained - ready, 1e-9), 1),
            "total_seconds": round(time.time() - start, 1),
        }
        print(f"test accuracy {accuracy:.4f}", flush=True)
        print(json.dumps(summary), flush=True)
    if args.require_accuracy and accuracy < args.require_accuracy:
        if rank == 0:
            print(f"test accuracy {accuracy:.4f} is below the required "
                  f"{args.require_accuracy}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
