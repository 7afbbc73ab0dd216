// Fork-join helpers shared by the CPU kernels.
//
// ParallelFor runs fn(t) for t in [0, n): t = 0 on the calling thread and the
// others on freshly started std::threads, joined before it returns (blocking).
// No state outlives a call, so the helpers are thread-safe; the kernels pay a
// thread start (tens of microseconds) per parallel phase, which is why they go
// parallel only above a work threshold.
#ifndef TERSE_COMPRESSORS_KERNELS_PARALLEL_H_
#define TERSE_COMPRESSORS_KERNELS_PARALLEL_H_

#include <algorithm>
#include <cstdint>
#include <thread>
#include <utility>
#include <vector>

namespace terse {
namespace kernels {

// The number of threads to use for `work` items: `requested` (0 means
// min(hardware concurrency, 8)), capped so that every thread gets at least
// `min_per_thread` items, and at least 1.
inline int ResolveThreads(int requested, int64_t work, int64_t min_per_thread) {
  int threads = requested;
  if (threads <= 0) {
    threads = static_cast<int>(std::thread::hardware_concurrency());
    threads = std::min(std::max(threads, 1), 8);
  }
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
  if (n <= 1) {
    fn(0);
    return;
  }
  std::vector<std::thread> threads;
  threads.reserve(n - 1);
  for (int t = 1; t < n; ++t) threads.emplace_back([&fn, t] { fn(t); });
  fn(0);
  for (std::thread& th : threads) th.join();
}

}  // namespace kernels
}  // namespace terse

#endif  // TERSE_COMPRESSORS_KERNELS_PARALLEL_H_
