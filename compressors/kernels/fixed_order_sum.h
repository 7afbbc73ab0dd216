// A sum in double whose rounding order is fixed and independent of the
// hardware, so that the CPU compressors, the simulated device and the CUDA
// kernels (compressors/device/dense_codecs_cuda.cu) produce the same bits: the
// per-block scale of EF-signSGD (mean |x|) and the per-bucket norm of QSGD
// (sum x^2). The order is shaped like a GPU reduction so that the GPU can
// run it in parallel and stay exact:
//
//   1. The n terms are split into chunks of kFixedSumChunk consecutive terms
//      (the last one may be shorter).
//   2. In a chunk, lane l (0 <= l < 32) adds, from +0.0 and in index order,
//      the terms whose offset in the chunk is l, l + 32, l + 64, ...
//   3. The 32 lane sums are folded pairwise as __shfl_down_sync does with
//      offsets 16, 8, 4, 2, 1: lane[l] += lane[l + offset] for l < offset;
//      lane[0] is the chunk's sum.
//   4. The chunk sums are added, from +0.0, in chunk order.
//
// THE CUDA KERNELS MIRROR THIS FUNCTION (dense_codecs_cuda.cu, ChunkSum and
// its callers): a change here without the same change there breaks the
// bitwise agreement between CPU and GPU ranks.
//
// Terms are expected to be non-negative or NaN (|x|, x^2): then a NaN term
// makes the sum NaN and an infinite one +inf, whatever the order. Each add
// must be a separate IEEE double add: the CUDA side uses __dadd_rn and
// __dmul_rn; the host relies on the default x86-64 target, which has no FMA
// to contract x * x + sum into (a -march with FMA needs -ffp-contract=off).
#ifndef TERSE_COMPRESSORS_KERNELS_FIXED_ORDER_SUM_H_
#define TERSE_COMPRESSORS_KERNELS_FIXED_ORDER_SUM_H_

#include <cstdint>

namespace terse {
namespace kernels {

inline constexpr int kFixedSumLanes = 32;
// Terms per chunk: a whole number of lane rounds. A block or bucket of at
// most this many terms is one chunk (one warp on the GPU).
inline constexpr int64_t kFixedSumChunk = 4096;

// The sum of term(i) for i in [0, n) in the order above. `term` maps an
// index to a double and is called exactly once per index, in index order.
template <typename Term>
double FixedOrderSum(int64_t n, Term&& term) {
  double total = 0;
  for (int64_t chunk = 0; chunk < n; chunk += kFixedSumChunk) {
    const int64_t end = n - chunk < kFixedSumChunk ? n : chunk + kFixedSumChunk;
    double lane[kFixedSumLanes] = {};
    for (int64_t i = chunk; i < end; ++i) {
      lane[(i - chunk) % kFixedSumLanes] += term(i);
    }
    for (int offset = kFixedSumLanes / 2; offset > 0; offset /= 2) {
      for (int l = 0; l < offset; ++l) lane[l] += lane[l + offset];
    }
    total += lane[0];
  }
  return total;
}

}  // namespace kernels
}  // namespace terse

#endif  // TERSE_COMPRESSORS_KERNELS_FIXED_ORDER_SUM_H_
