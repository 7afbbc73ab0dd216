"""terse for PyTorch: Horovod 0.28.1's horovod.torch API (docs/torch.md).

    import terse.torch as hvd
    hvd.init()
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size())
    optimizer = hvd.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters(),
        compression=hvd.Compression.fp16)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

Every error of the engine raises terse.torch.TerseError (a RuntimeError,
also exported as HorovodInternalError) carrying the engine's message; any
operation before init() raises one that names init(). docs/torch.md's
table "Horovod API -> terse" says, name by name, what is native, what is
composed from other operations, and what is not supported yet.
"""

from terse.basics import (bucket_reports, build_info, bytes_sent,
                          check_extension, engine_compression,
                          load_compression_state, momentum_correction,
                          notify_learning_rate_drop, save_compression_state)
from terse.compression import Compressor
# Horovod's op, reduction, process-set and introspection names: one list,
# terse.torch.mpi_ops's (as horovod.torch takes them from its mpi_ops).
from terse.torch.mpi_ops import *  # noqa: F401,F403
from terse.torch.functions import (allgather_object, broadcast_object,
                                   broadcast_optimizer_state,
                                   broadcast_parameters)
from terse.torch.ops import TerseError
from terse.torch.optimizer import DistributedOptimizer
from terse.torch.sync_batch_norm import SyncBatchNorm
from terse.torch import elastic  # noqa: E402 (needs the names above)
from terse.torch import compression, mpi_ops  # noqa: E402 Horovod's modules

__all__ = [
    "init", "shutdown", "is_initialized", "size", "rank", "local_rank",
    "local_size", "cross_rank", "cross_size", "is_homogeneous",
    "mpi_threads_supported", "mpi_enabled", "mpi_built", "gloo_enabled",
    "gloo_built", "nccl_built", "cuda_built", "rocm_built", "ddl_built",
    "ccl_built", "start_timeline", "stop_timeline",
    "barrier", "join", "build_info", "check_extension",
    "bucket_reports", "bytes_sent", "notify_learning_rate_drop",
    "save_compression_state", "load_compression_state", "engine_compression",
    "momentum_correction",
    "Compression", "Compressor", "TerseError", "HorovodInternalError",
    "ProcessSet", "global_process_set", "add_process_set",
    "remove_process_set",
    "Sum", "Average", "Min", "Max", "Product", "Adasum",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
    "grouped_allreduce_async_", "sparse_allreduce_async",
    "allgather", "allgather_async", "grouped_allgather",
    "grouped_allgather_async",
    "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "alltoall", "alltoall_async", "reducescatter", "reducescatter_async",
    "grouped_reducescatter", "grouped_reducescatter_async",
    "poll", "synchronize",
    "broadcast_parameters", "broadcast_optimizer_state", "broadcast_object",
    "allgather_object",
    "DistributedOptimizer", "SyncBatchNorm", "elastic", "compression",
    "mpi_ops",
]
