// Fork-join helpers shared by the CPU kernels.
//
// ParallelFor runs fn(t) for t in [0, n) and returns when all are done: t = 0
// on the calling thread, the others on the process's persistent pool
// (thread_pool.h; the caller takes indices no worker is free for). fn(t) must
// not wait for another index: any thread may run any index, in any order.
// Thread-safe; a parallel phase costs a wake-up, not a thread start, but the
// kernels still go parallel only above a work threshold.
#ifndef TERSE_COMPRESSORS_KERNELS_PARALLEL_H_
#define TERSE_COMPRESSORS_KERNELS_PARALLEL_H_

#include <algorithm>
#include <cstdint>

#include "compressors/kernels/thread_pool.h"

namespace terse {
namespace kernels {

// The number of threads to use for `work` items: `requested` (0 means
// DefaultThreads(): the hardware threads divided among this host's ranks, at
// most 8), capped so that every thread gets at least
// `min_per_thread` items, and at least 1.
inline int ResolveThreads(int requested, int64_t work, int64_t min_per_thread) {
  int threads = requested;
  if (threads <= 0) threads = DefaultThreads();
  int64_t by_work = min_per_thread > 0 ? work / min_per_thread : work;
  if (by_work < threads)
    threads = static_cast<int>(std::max<int64_t>(by_work, 1));
  return std::max(threads, 1);
}

// Start of chunk t when [0, d) is cut into n near-equal contiguous chunks.
inline int64_t ChunkBegin(int64_t d, int n, int t) {
  return static_cast<int64_t>((static_cast<unsigned __int128>(d) * t) / n);
}

template <typename Fn>
void ParallelFor(int n, Fn&& fn) {
  ThreadPool::Default().Run(n, fn);
}

}  // namespace kernels
}  // namespace terse

#endif  // TERSE_COMPRESSORS_KERNELS_PARALLEL_H_
