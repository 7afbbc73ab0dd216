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
                          ccl_built, check_extension, cross_rank, cross_size, cuda_built,
                          ddl_built, engine_compression, gloo_built,
                          gloo_enabled, init, is_homogeneous, is_initialized,
                          load_compression_state, local_rank, local_size,
                          momentum_correction, mpi_built, mpi_enabled,
                          mpi_threads_supported, nccl_built,
                          notify_learning_rate_drop, rank, rocm_built,
                          save_compression_state, shutdown, size,
                          start_timeline, stop_timeline)
from terse.compression import Compression, Compressor
from terse.process_sets import (ProcessSet, add_process_set,
                                global_process_set, remove_process_set)
from terse.torch.composed import (alltoall, alltoall_async,
                                  grouped_allgather, grouped_allgather_async,
                                  grouped_allreduce, grouped_allreduce_,
                                  grouped_allreduce_async,
                                  grouped_allreduce_async_,
                                  grouped_reducescatter,
                                  grouped_reducescatter_async, reducescatter,
                                  reducescatter_async, sparse_allreduce_async)
from terse.torch.functions import (allgather_object, broadcast_object,
                                   broadcast_optimizer_state,
                                   broadcast_parameters)
from terse.torch.ops import (Adasum, Average, HorovodInternalError, Max, Min,
                             Product, Sum, TerseError, allgather,
                             allgather_async, allreduce, allreduce_,
                             allreduce_async, allreduce_async_, barrier,
                             broadcast, broadcast_, broadcast_async,
                             broadcast_async_, join, poll, synchronize)
from terse.torch.optimizer import DistributedOptimizer
from terse.torch.sync_batch_norm import SyncBatchNorm
from terse.torch import elastic  # noqa: E402 (needs the names above)
from terse.torch import compression, mpi_ops  # noqa: E402 (Horovod's modules)

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
