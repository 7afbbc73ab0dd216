// Exact top-k by magnitude over a float array (CPU).
//
// The selection is a multithreaded radix select on the 31-bit magnitude keys
// (the float bit pattern with the sign cleared). A first histogram pass
// (top 11 bits, each thread counting its own contiguous chunk) finds the bin
// holding the k-th largest key. When that bin is small (<= d / 8 entries,
// the usual case for gradients) one more pass gathers the entries above it
// and the bin's candidates, the rest of the selection runs on the
// candidates alone, and two ascending lists are merged: two passes over x.
// Otherwise two more histogram passes (10 + 10 bits) fix the k-th largest
// key T and one pass writes the indices, every thread at an offset known
// from the histograms: four passes. Ordering of keys is the ordering of |x|
// for every non-NaN float; NaN keys are above +inf, so NaN counts as larger
// than every number (NaNs with different payloads order by payload bits).
// -0 and +0 are equal.
//
// Ties: among entries whose key equals T, the lowest indices are taken, so
// the result is a function of the input only (not of the thread count) and is
// identical on every run and every rank.
//
// Thread-safety: reentrant; the call blocks until the threads it starts have
// joined. It allocates per-thread histograms and, on the two-pass path,
// 4 bytes per entry above the bin plus 8 per candidate.
#ifndef TERSE_COMPRESSORS_KERNELS_TOPK_H_
#define TERSE_COMPRESSORS_KERNELS_TOPK_H_

#include <cstdint>

namespace terse {
namespace kernels {

// Writes exactly k indices of the k largest |x[i]| into `indices`, ascending.
// Preconditions (the caller's, not checked at run time beyond a debug
// assert): 0 <= k <= d, d < 2^32, `indices` has room for k entries.
// num_threads 0 = DefaultThreads() (parallel.h); small inputs use fewer.
void TopK(const float* x, int64_t d, int64_t k, uint32_t* indices,
          int num_threads = 0);

// The magnitude key TopK orders by: the float bits with the sign cleared.
inline uint32_t MagnitudeKey(uint32_t float_bits) {
  return float_bits & 0x7fffffffu;
}

// The k-th largest magnitude key of x (the threshold TopK selects at) and
// the number of entries with that key TopK takes (the lowest-index ones).
// Preconditions as TopK with 1 <= k <= d.
struct TopKThreshold {
  uint32_t key = 0;
  int64_t ties_taken = 0;
};
TopKThreshold TopKThresholdKey(const float* x, int64_t d, int64_t k,
                               int num_threads = 0);

}  // namespace kernels
}  // namespace terse

#endif  // TERSE_COMPRESSORS_KERNELS_TOPK_H_
