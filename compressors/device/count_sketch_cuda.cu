// device_ops_cuda::CountSketch (device_ops_cuda.h): kernels::AddCountSketch
// (compressors/kernels/count_sketch.h) on the GPU, in three kernels whose
// per-index arithmetic is count_sketch_common.h's, the CPU's very code, and
// whose bucket sums are exact integers, so that the order in which the
// threads add does not matter: the CPU's bits, with O(n + k * blocks) work.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "compressors/device/device_ops_cuda.h"
#include "compressors/device/device_ops_cuda_internal.h"
#include "compressors/kernels/count_sketch_common.h"

namespace terse {
namespace device_ops_cuda {
namespace {

// Pass 1: *max_bits = the largest FiniteMagnitudeBits over x (zeroed
// before): a warp fold, the warps' maxima into shared memory, then one
// atomicMax per block.
__global__ void CountSketchMaxKernel(const float* x, int64_t n,
                                     uint32_t* max_bits) {
  __shared__ uint32_t block_max;
  if (threadIdx.x == 0) block_max = 0;
  __syncthreads();
  uint32_t mine = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const uint32_t m = kernels::count_sketch::FiniteMagnitudeBits(x[i]);
    if (m > mine) mine = m;
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    const uint32_t other = __shfl_down_sync(0xffffffffu, mine, offset);
    if (other > mine) mine = other;
  }
  if ((threadIdx.x & 31) == 0 && mine != 0) atomicMax(&block_max, mine);
  __syncthreads();
  if (threadIdx.x == 0 && block_max != 0) atomicMax(max_bits, block_max);
}

// Buckets a block sums in shared memory (8 KiB of int64); more go straight
// to the global sums.
constexpr int64_t kSketchSharedBuckets = 1024;

// Pass 2: each index's fixed-point term into its bucket's int64 sum (as
// unsigned: two's complement adds), or its non-finite kind into the
// bucket's kinds. kShared: a block sums into shared memory, then adds each
// nonzero bucket to `sums` once.
template <bool kShared>
__global__ void CountSketchAddKernel(const float* x, int64_t n, uint64_t seed,
                                     int64_t buckets, const uint32_t* max_bits,
                                     unsigned long long* sums,
                                     uint32_t* kinds) {
  namespace cs = kernels::count_sketch;
  __shared__ unsigned long long local[kShared ? kSketchSharedBuckets : 1];
  if (kShared) {
    for (int64_t j = threadIdx.x; j < buckets; j += blockDim.x) local[j] = 0;
    __syncthreads();
  }
  const uint64_t k = static_cast<uint64_t>(buckets);
  const double scale = cs::PowerOfTwo(cs::ScaleExponent(*max_bits, n));
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    uint64_t bucket;
    bool positive;
    cs::Hash(seed, i, k, &bucket, &positive);
    const float v = x[i];
    if (cs::NonFiniteKind(v) != 0) {
      atomicOr(&kinds[bucket], cs::NonFiniteKind(positive ? v : -v));
      continue;
    }
    const int64_t q = cs::Quantize(v, scale);
    if (q == 0) continue;
    const auto term = static_cast<unsigned long long>(positive ? q : -q);
    if (kShared) {
      atomicAdd(&local[bucket], term);
    } else {
      atomicAdd(&sums[bucket], term);
    }
  }
  if (kShared) {
    __syncthreads();
    for (int64_t j = threadIdx.x; j < buckets; j += blockDim.x) {
      if (local[j] != 0) atomicAdd(&sums[j], local[j]);
    }
  }
}

// Pass 3: sketch[j] += bucket j's sum (count_sketch::AddToBucket).
__global__ void CountSketchFinishKernel(int64_t n, int64_t buckets,
                                        const uint32_t* max_bits,
                                        const unsigned long long* sums,
                                        const uint32_t* kinds, double* sketch) {
  namespace cs = kernels::count_sketch;
  const double unscale = cs::PowerOfTwo(-cs::ScaleExponent(*max_bits, n));
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < buckets;
       j += int64_t{gridDim.x} * blockDim.x) {
    cs::AddToBucket(&sketch[j], static_cast<int64_t>(sums[j]), kinds[j],
                    unscale);
  }
}

}  // namespace

absl::Status CountSketch(int device, void* stream, const float* x, int64_t n,
                         uint64_t seed, double* sketch, int64_t buckets,
                         void* scratch) {
  if (n <= 0 || buckets <= 0) return absl::OkStatus();
  absl::Status set = SetDevice(device, "CountSketch");
  if (!set.ok()) return set;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  // Scratch: the sums, the kinds, the largest magnitude (CountSketchScratch-
  // Bytes), zeroed in stream order.
  auto* sums = static_cast<unsigned long long*>(scratch);
  auto* kinds = reinterpret_cast<uint32_t*>(sums + buckets);
  uint32_t* max_bits = kinds + buckets;
  const cudaError_t zero = cudaMemsetAsync(
      scratch, 0, static_cast<size_t>(CountSketchScratchBytes(buckets)), s);
  if (zero != cudaSuccess) {
    return absl::InternalError(std::string("CountSketch: ") +
                               cudaGetErrorString(zero));
  }
  CountSketchMaxKernel<<<Blocks(n), kThreads, 0, s>>>(x, n, max_bits);
  const absl::Status max_launched =
      LaunchError("CountSketch (largest magnitude)");
  if (!max_launched.ok()) return max_launched;
  // Enough indices a block that flushing its shared sums (at most k atomics)
  // costs little next to them.
  const int64_t per_block = int64_t{kThreads} * 16;
  const int add_blocks = static_cast<int>(
      std::min<int64_t>(1024, (n + per_block - 1) / per_block));
  if (buckets <= kSketchSharedBuckets) {
    CountSketchAddKernel<true><<<add_blocks, kThreads, 0, s>>>(
        x, n, seed, buckets, max_bits, sums, kinds);
  } else {
    CountSketchAddKernel<false><<<add_blocks, kThreads, 0, s>>>(
        x, n, seed, buckets, max_bits, sums, kinds);
  }
  const absl::Status sums_launched = LaunchError("CountSketch (sums)");
  if (!sums_launched.ok()) return sums_launched;
  CountSketchFinishKernel<<<Blocks(buckets), kThreads, 0, s>>>(
      n, buckets, max_bits, sums, kinds, sketch);
  return LaunchError("CountSketch (finish)");
}

}  // namespace device_ops_cuda
}  // namespace terse
