#include "efcp/parallel_for.h"

#include <algorithm>
#include <thread>
#include <vector>

namespace terse {
namespace efcp {

int ResolveNumThreads(int requested) {
  if (requested <= 0) {
    const int hardware = static_cast<int>(std::thread::hardware_concurrency());
    return std::max(1, std::min(hardware, 8));
  }
  return std::min(requested, 64);
}

void ParallelFor(int64_t n, int num_threads, int64_t min_chunk, int64_t align,
                 const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  align = std::max<int64_t>(align, 1);
  min_chunk = std::max<int64_t>(min_chunk, 1);
  int64_t chunks = std::min<int64_t>(std::max(num_threads, 1),
                                     std::max<int64_t>(n / min_chunk, 1));
  // Round each chunk up to a multiple of `align`.
  int64_t per = (n + chunks - 1) / chunks;
  per = (per + align - 1) / align * align;
  chunks = (n + per - 1) / per;
  if (chunks <= 1) {
    fn(0, n);
    return;
  }
  std::vector<std::thread> workers;
  workers.reserve(chunks - 1);
  for (int64_t c = 1; c < chunks; ++c) {
    const int64_t begin = c * per;
    const int64_t end = std::min(n, begin + per);
    workers.emplace_back([&fn, begin, end] { fn(begin, end); });
  }
  fn(0, std::min(n, per));
  for (std::thread& worker : workers) worker.join();
}

}  // namespace efcp
}  // namespace terse
