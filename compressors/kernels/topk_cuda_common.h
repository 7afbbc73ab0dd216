// Device helpers shared by the CUDA selection kernels (topk_cuda.cu,
// topk_filter_cuda.cu). Device code: include only from .cu files (nvcc).
#ifndef TERSE_COMPRESSORS_KERNELS_TOPK_CUDA_COMMON_H_
#define TERSE_COMPRESSORS_KERNELS_TOPK_CUDA_COMMON_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace terse {
namespace kernels {
namespace cuda {

constexpr uint32_t kFullMask = 0xffffffffu;
// A bin number no histogram has: lanes without an entry to count.
constexpr uint32_t kNoBin = 0xffffffffu;

// The selection key of an entry: its magnitude's bit pattern (the sign bit
// cleared), ordered as the magnitudes are, NaNs above infinity. topk.cc uses
// the same key, so ties and NaNs select alike on both sides.
__device__ __forceinline__ uint32_t KeyAt(const float* x, int64_t i) {
  return __float_as_uint(x[i]) & 0x7fffffffu;
}
__device__ __forceinline__ uint32_t KeyOf(float v) {
  return __float_as_uint(v) & 0x7fffffffu;
}

// Exclusive prefix sum over a block of kBlock threads (a multiple of 32, at
// most 1024); *total receives the block's sum. Every thread of the block must
// call it (it holds __syncthreads). `warp_sums` is shared, kBlock / 32 long,
// and may be reused as soon as this returns (it ends on a barrier).
template <int kBlock>
__device__ uint64_t BlockExclusiveScan(uint64_t v, uint64_t* warp_sums,
                                       uint64_t* total) {
  static_assert(kBlock % 32 == 0 && kBlock <= 1024, "block size");
  constexpr int kNumWarps = kBlock / 32;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  uint64_t incl = v;
  for (int o = 1; o < 32; o <<= 1) {
    const uint64_t up = __shfl_up_sync(kFullMask, incl, o);
    if (lane >= o) incl += up;
  }
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    // Lane w reads and then overwrites only warp_sums[w].
    uint64_t w_incl = lane < kNumWarps ? warp_sums[lane] : 0;
    for (int o = 1; o < 32; o <<= 1) {
      const uint64_t up = __shfl_up_sync(kFullMask, w_incl, o);
      if (lane >= o) w_incl += up;
    }
    if (lane < kNumWarps) warp_sums[lane] = w_incl;
  }
  __syncthreads();
  const uint64_t before = (warp > 0 ? warp_sums[warp - 1] : 0) + incl - v;
  *total = warp_sums[kNumWarps - 1];
  __syncthreads();  // Everyone has read warp_sums: the caller may reuse it.
  return before;
}

// Adds the lanes' entries to a shared histogram, one atomic per distinct bin
// in the warp: level 0 bins are exponent bits, so real data crowds a few
// bins and plain per-lane atomics would serialise on them. The whole warp
// must call it (converged); `hit` says whether this lane has an entry.
__device__ __forceinline__ void WarpAddToBin(uint32_t* local, bool hit,
                                             uint32_t bin, int lane) {
  if (!__any_sync(kFullMask, hit)) return;  // Warp-uniform: common above L0.
  // Lanes without an entry all carry kNoBin, which no hit lane has.
  const uint32_t peers = __match_any_sync(kFullMask, hit ? bin : kNoBin);
  if (hit && lane == __ffs(peers) - 1) atomicAdd(&local[bin], __popc(peers));
}

// A histogram bin chosen by ChooseBin.
struct BinChoice {
  uint32_t bin;
  int64_t above;  // Entries in the bins above `bin`.
  int64_t count;  // Entries in `bin`.
};

// Called by every thread of a block of kBlock threads; all get the same
// answer: the bin of `hist` (`bins` bins, a multiple of kBlock, at most
// kMaxBins) that holds the need-th largest entry, i.e. the highest bin whose
// count plus the counts above it reaches `need` (bin 0 when none does).
// Thread t takes bins-1 - t*per downwards, so one block scan gives each bin
// the count above it. `hist` may come from other blocks' atomics: it is read
// through L2.
template <int kBlock, int kMaxBins>
__device__ BinChoice ChooseBin(const uint32_t* hist, int bins, int64_t need) {
  constexpr int kMaxPer = kMaxBins / kBlock;
  __shared__ uint64_t warp_sums[kBlock / 32];
  __shared__ BinChoice chosen;
  const int per = bins / kBlock;
  const int top = bins - 1 - static_cast<int>(threadIdx.x) * per;
  uint64_t counts[kMaxPer];
  uint64_t mine = 0;
#pragma unroll
  for (int j = 0; j < kMaxPer; ++j) {
    counts[j] = j < per ? __ldcg(&hist[top - j]) : 0;
    mine += counts[j];
  }
  uint64_t unused_total;
  uint64_t above = BlockExclusiveScan<kBlock>(mine, warp_sums, &unused_total);
  // Bin b >= 1 passes iff above(b) < need <= above(b) + count(b); bin 0 iff
  // above(0) < need. Exactly one bin passes, as above() only grows towards
  // bin 0 and need >= 1. Counts total less than 2^32: the casts are exact.
#pragma unroll
  for (int j = 0; j < kMaxPer; ++j) {
    const int b = top - j;
    const int64_t a = static_cast<int64_t>(above);
    if (j < per && a < need &&
        (b == 0 || a + static_cast<int64_t>(counts[j]) >= need)) {
      chosen = {static_cast<uint32_t>(b), a, static_cast<int64_t>(counts[j])};
    }
    above += counts[j];
  }
  __syncthreads();
  const BinChoice c = chosen;
  __syncthreads();  // Read by all before the next call may rewrite it.
  return c;
}

}  // namespace cuda
}  // namespace kernels
}  // namespace terse

#endif  // TERSE_COMPRESSORS_KERNELS_TOPK_CUDA_COMMON_H_
