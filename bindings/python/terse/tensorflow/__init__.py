"""terse for TensorFlow 2 (Horovod-style API).

    import terse.tensorflow as terse
    terse.init()
    terse.broadcast_variables(model.variables, root_rank=0)
    with tf.GradientTape() as tape:
        loss = ...
    tape = terse.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)

The collectives are TensorFlow ops (eager and inside tf.function). Keras:
terse.tensorflow.keras.DistributedOptimizer and its callbacks. init(),
rank() and the other process-wide calls are terse.basics', shared with
terse.torch: one engine per process.
"""

from terse.basics import (barrier, bucket_reports, build_info, bytes_sent,
                          init, is_initialized, join, load_compression_state,
                          local_rank, local_size, notify_learning_rate_drop,
                          rank, save_compression_state, shutdown, size)
from terse.compression import Compression, Compressor
from terse.tensorflow.functions import broadcast_variables, reduce_gradients
from terse.tensorflow.gradient_tape import DistributedGradientTape
from terse.tensorflow.ops import (SUPPORTED_DTYPES, Average, Max, Min, Sum,
                                  allgather, allreduce, broadcast)


def __getattr__(name):
    if name == "TerseError":
        from terse._native import lib
        return lib().TerseError
    raise AttributeError(
        f"module 'terse.tensorflow' has no attribute {name!r}")


__all__ = [
    "init", "shutdown", "is_initialized", "size", "rank", "local_rank",
    "local_size", "barrier", "join", "build_info", "bucket_reports",
    "bytes_sent", "notify_learning_rate_drop", "save_compression_state",
    "load_compression_state", "Compression", "Compressor", "TerseError",
    "Sum", "Average", "Min", "Max", "SUPPORTED_DTYPES",
    "allreduce", "allgather", "broadcast",
    "broadcast_variables", "reduce_gradients", "DistributedGradientTape",
]
