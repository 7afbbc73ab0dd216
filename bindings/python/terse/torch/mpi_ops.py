"""horovod.torch.mpi_ops's public names in terse, for code that imports
them from the module rather than the package (`from horovod.torch.mpi_ops
import allreduce_async_` becomes `from terse.torch.mpi_ops import ...`).
Every name is the same object as terse.torch's.

Not here, as they are Horovod's internals: the autograd Function classes
(HorovodAllreduce, HorovodAllgather, ...; terse's ops carry their own
gradients), mpi_lib (Horovod's extension module; terse's is _terse, see
check_extension), get_average_backwards_compatibility_fun (the factory
behind handle_average_backwards_compatibility) and check_installed_version
(terse does not compile against torch, so no torch version is built in)."""

from terse.basics import (ccl_built, cross_rank, cross_size, cuda_built,
                          ddl_built, gloo_built, gloo_enabled, init,
                          is_homogeneous, is_initialized, local_rank,
                          local_size, mpi_built, mpi_enabled,
                          mpi_threads_supported, nccl_built, rank,
                          rocm_built, shutdown, size, start_timeline,
                          stop_timeline)
from terse.compression import Compression
from terse.helpers import (handle_average_backwards_compatibility,
                           num_rank_is_power_2)
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
from terse.torch.ops import (Adasum, Average, HorovodInternalError, Max, Min,
                             Product, Sum, allgather, allgather_async,
                             allreduce, allreduce_, allreduce_async,
                             allreduce_async_, barrier, broadcast, broadcast_,
                             broadcast_async, broadcast_async_, join, poll,
                             synchronize)


__all__ = [
    "init", "shutdown", "is_initialized", "size", "rank", "local_rank",
    "local_size", "cross_rank", "cross_size", "is_homogeneous",
    "mpi_threads_supported", "mpi_enabled", "mpi_built", "gloo_enabled",
    "gloo_built", "nccl_built", "cuda_built", "rocm_built", "ddl_built",
    "ccl_built", "start_timeline", "stop_timeline", "gpu_available",
    "handle_average_backwards_compatibility", "num_rank_is_power_2",
    "Compression", "HorovodInternalError", "ProcessSet", "global_process_set",
    "add_process_set", "remove_process_set",
    "Sum", "Average", "Min", "Max", "Product", "Adasum",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
    "grouped_allreduce_async_", "sparse_allreduce_async",
    "allgather", "allgather_async", "grouped_allgather",
    "grouped_allgather_async",
    "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "alltoall", "alltoall_async", "reducescatter", "reducescatter_async",
    "grouped_reducescatter", "grouped_reducescatter_async",
    "join", "barrier", "poll", "synchronize",
]


def gpu_available(ext_base_name, verbose=False):
    """Horovod's check that its `ext_base_name` extension was built with
    GPU support: whether terse's one extension can reach a CUDA runtime
    (basics.cuda_built). `verbose` prints the answer, as Horovod does."""
    from terse.basics import cuda_built as _cuda_built
    available = bool(_cuda_built())
    if verbose:
        print(f"terse ({ext_base_name}): GPU "
              f"{'available' if available else 'not available'}")
    return available
