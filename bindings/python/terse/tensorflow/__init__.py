"""terse for TensorFlow 2 (Horovod-style API).

    import terse.tensorflow as terse
    terse.init()
    terse.broadcast_variables(model.variables, root_rank=0)
    with tf.GradientTape() as tape:
        loss = ...
    tape = terse.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)

The collectives are TensorFlow ops (eager and inside tf.function). Keras:
terse.tensorflow.keras (or terse.keras). init(), rank() and the other
process-wide calls are terse.basics', shared with terse.torch: one engine
per process. docs/tensorflow.md maps every name of horovod.tensorflow to
terse's.
"""

from terse import basics as _basics
from terse.basics import (barrier, bucket_reports, build_info, bytes_sent,
                          check_extension, init, is_initialized, join, load_compression_state,
                          local_rank, local_size, notify_learning_rate_drop,
                          rank, save_compression_state, shutdown, size)
from terse.tensorflow.composed import (alltoall, grouped_reducescatter,
                                       reducescatter)
from terse.tensorflow.compression import Compression, Compressor
from terse.tensorflow.functions import (allgather_object, broadcast_,
                                        broadcast_global_variables,
                                        broadcast_object, broadcast_object_fn,
                                        broadcast_variables, grouped_allgather,
                                        grouped_allreduce, reduce_gradients)
from terse.tensorflow.legacy import (BroadcastGlobalVariablesHook,
                                     DistributedOptimizer)
from terse.tensorflow.gradient_tape import (DistributedGradientTape,
                                            PartialDistributedGradientTape)
from terse.helpers import (check_num_rank_power_of_2,
                           handle_average_backwards_compatibility)
from terse.tensorflow.ops import (FLOAT_DTYPES, INT_DTYPES, MOVED_DTYPES,
                                  SUPPORTED_DTYPES, Adasum, Average, Max, Min,
                                  Product, Sum, allgather, allreduce,
                                  broadcast, global_process_set,
                                  local_rank_op, local_size_op,
                                  process_set_included_op, rank_op, size_op)
from terse.tensorflow.sync_batch_norm import SyncBatchNormalization
from terse.tensorflow import elastic  # noqa: E402  (needs the above)

# Framework-neutral introspection, defined in terse.basics (read from there
# when asked for, so this module imports where basics lacks one).
BASICS_FORWARDED = (
    "cross_rank", "cross_size", "is_homogeneous", "mpi_threads_supported",
    "mpi_enabled", "mpi_built", "gloo_enabled", "gloo_built", "nccl_built",
    "cuda_built", "rocm_built", "ddl_built", "ccl_built", "start_timeline",
    "stop_timeline")


# Horovod's process-set API, from terse.process_sets.
PROCESS_SETS_FORWARDED = ("ProcessSet", "add_process_set",
                          "remove_process_set")


def __getattr__(name):
    if name in PROCESS_SETS_FORWARDED:
        try:
            from terse import process_sets
        except ImportError:
            raise AttributeError(
                f"terse.tensorflow.{name} is terse.process_sets.{name}, "
                "which this build of terse does not have") from None
        return getattr(process_sets, name)
    if name == "TerseError":
        from terse._native import lib
        return lib().TerseError
    if name in BASICS_FORWARDED:
        try:
            return getattr(_basics, name)
        except AttributeError:
            raise AttributeError(
                f"terse.tensorflow.{name} is terse.basics.{name}, which this "
                "build of terse does not have") from None
    raise AttributeError(
        f"module 'terse.tensorflow' has no attribute {name!r}")


__all__ = [
    "init", "shutdown", "is_initialized", "size", "rank", "local_rank",
    "local_size", "barrier", "join", "build_info", "check_extension",
    "bucket_reports",
    "bytes_sent", "notify_learning_rate_drop", "save_compression_state",
    "load_compression_state", "Compression", "Compressor", "TerseError",
    "Sum", "Average", "Min", "Max", "Product", "Adasum", "SUPPORTED_DTYPES",
    "MOVED_DTYPES", "global_process_set",
    "allreduce", "allgather", "broadcast", "grouped_allreduce",
    "grouped_allgather", "reducescatter", "grouped_reducescatter", "alltoall",
    "broadcast_", "broadcast_variables", "broadcast_global_variables",
    "broadcast_object", "broadcast_object_fn", "allgather_object",
    "rank_op", "size_op", "local_rank_op", "local_size_op",
    "process_set_included_op", "ProcessSet", "add_process_set",
    "remove_process_set",
    "reduce_gradients", "DistributedGradientTape",
    "PartialDistributedGradientTape", "SyncBatchNormalization",
    "DistributedOptimizer", "BroadcastGlobalVariablesHook", "elastic",
    "handle_average_backwards_compatibility", "check_num_rank_power_of_2",
] + [n for n in BASICS_FORWARDED if hasattr(_basics, n)]
