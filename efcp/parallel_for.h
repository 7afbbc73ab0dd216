// A minimal fork-join loop over an index range for the dense window kernels.
//
// ParallelFor splits [0, n) into contiguous chunks, runs `fn(begin, end)` on
// each (one chunk on the calling thread, the others on short-lived threads)
// and returns once every chunk has finished. It never throws and owns no
// state, so concurrent calls are independent. `fn` must be safe to run
// concurrently on disjoint ranges.
#ifndef TERSE_EFCP_PARALLEL_FOR_H_
#define TERSE_EFCP_PARALLEL_FOR_H_

#include <cstdint>
#include <functional>

namespace terse {
namespace efcp {

// 0 means min(hardware threads, 8); anything else is clamped to [1, 64].
int ResolveNumThreads(int requested);

// Runs fn over [0, n) in at most `num_threads` chunks of at least
// `min_chunk` indices each (so small ranges stay on the calling thread).
// Chunk boundaries are multiples of `align` (except the end), which lets a
// caller keep blocks of columns whole. n <= 0 does nothing.
void ParallelFor(int64_t n, int num_threads, int64_t min_chunk, int64_t align,
                 const std::function<void(int64_t, int64_t)>& fn);

}  // namespace efcp
}  // namespace terse

#endif  // TERSE_EFCP_PARALLEL_FOR_H_
