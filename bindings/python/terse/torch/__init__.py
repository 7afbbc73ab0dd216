"""terse for PyTorch (Horovod-style API).

    import terse.torch as terse
    terse.init()
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * terse.size())
    optimizer = terse.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters(),
        compression=terse.Compression.fp16)
    terse.broadcast_parameters(model.state_dict(), root_rank=0)
    terse.broadcast_optimizer_state(optimizer, root_rank=0)

Every error of the engine raises terse.torch.TerseError (a RuntimeError)
carrying the engine's message; any operation before init() raises one that
names init().
"""

from terse.basics import (barrier, bucket_reports, build_info, bytes_sent,
                          engine_compression, init, is_initialized, join,
                          load_compression_state,
                          local_rank, local_size, momentum_correction,
                          notify_learning_rate_drop,
                          rank, save_compression_state, shutdown, size)
from terse.compression import Compression, Compressor
from terse.torch.functions import (allgather_object, broadcast_object,
                                   broadcast_optimizer_state,
                                   broadcast_parameters)
from terse.torch.ops import (Average, Max, Min, Sum, TerseError, allgather,
                             allgather_async, allreduce, allreduce_,
                             allreduce_async, allreduce_async_, broadcast,
                             broadcast_, broadcast_async, broadcast_async_,
                             poll, synchronize)
from terse.torch.optimizer import DistributedOptimizer

__all__ = [
    "init", "shutdown", "is_initialized", "size", "rank", "local_rank",
    "local_size", "barrier", "join", "build_info",
    "bucket_reports", "bytes_sent", "notify_learning_rate_drop",
    "save_compression_state", "load_compression_state", "engine_compression",
    "momentum_correction",
    "Compression", "Compressor", "TerseError",
    "Sum", "Average", "Min", "Max",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "allgather", "allgather_async",
    "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "poll", "synchronize",
    "broadcast_parameters", "broadcast_optimizer_state", "broadcast_object",
    "allgather_object",
    "DistributedOptimizer",
]
