// EF-signSGD's and QSGD's kernels behind device_ops_cuda.h: encode (the
// per-block scale or norm, a sum in FixedOrderSum's order, then the signs or
// the stochastic rounding), decode-add, and the check of a peer's codes.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "compressors/device/device_ops_cuda.h"
#include "compressors/device/device_ops_cuda_internal.h"
#include "compressors/device/qsgd_bits.h"
#include "compressors/kernels/fixed_order_sum.h"

namespace terse {
namespace device_ops_cuda {
namespace {

// EF-signSGD's scales and QSGD's norms are sums in double whose order is
// fixed by kernels::FixedOrderSum (compressors/kernels/fixed_order_sum.h):
// THIS CODE MIRRORS THAT FUNCTION, so that CPU and GPU ranks agree bit for
// bit. One warp sums one chunk: lane l adds the terms at l, l + 32, ... in
// index order, then the lanes fold with __shfl_down_sync at offsets 16, 8,
// 4, 2, 1. Blocks of at most one chunk take one warp each; longer blocks
// take one thread block each, whose warps sum successive chunks and whose
// thread 0 adds the chunk sums in chunk order, or, when they are fewer than
// the SMs, the whole grid sums their chunks (ChunkSumsKernel below).
constexpr int kLanes = kernels::kFixedSumLanes;
constexpr int kWideThreads = 256;
constexpr int kWideWarps = kWideThreads / kLanes;
static_assert(kLanes == 32, "the fold below is a warp shuffle");
static_assert(kernels::kFixedSumChunk % kLanes == 0, "whole lane rounds");

// The sum of op.Term(x[i]) over [begin, end), at most one chunk, by the
// calling warp (all 32 lanes call); lane 0 returns it.
template <typename Op>
__device__ double ChunkSum(const Op& op, const float* x, int64_t begin,
                           int64_t end) {
  const int lane = threadIdx.x % kLanes;
  double sum = 0;
  for (int64_t i = begin + lane; i < end; i += kLanes) {
    sum = __dadd_rn(sum, op.Term(x[i]));
  }
  for (int offset = kLanes / 2; offset > 0; offset /= 2) {
    sum = __dadd_rn(sum, __shfl_down_sync(0xffffffffu, sum, offset));
  }
  return sum;
}

// Blocks [b * block, min(d, (b + 1) * block)) of at most one chunk: one warp
// each. op.Finish(x, b, begin, end, sum, rank, size) runs on the group of
// `size` threads (ranks 0..size-1) that summed block b, all with its sum.
template <typename Op>
__global__ void WarpPerBlockKernel(Op op, const float* x, int64_t d,
                                   int64_t block, int64_t blocks) {
  const int64_t first =
      (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / kLanes;
  const int64_t warps = int64_t{gridDim.x} * blockDim.x / kLanes;
  const int lane = threadIdx.x % kLanes;
  for (int64_t b = first; b < blocks; b += warps) {
    const int64_t begin = b * block;
    const int64_t end = begin + block < d ? begin + block : d;
    const double chunk = ChunkSum(op, x, begin, end);
    // FixedOrderSum's total: +0.0 plus the one chunk sum.
    const double total = __dadd_rn(0.0, __shfl_sync(0xffffffffu, chunk, 0));
    op.Finish(x, b, begin, end, total, lane, kLanes);
  }
}

// Longer blocks: one thread block (kWideThreads) each. Warp w sums chunk
// first + w of each round; thread 0 adds the round's chunk sums in order.
template <typename Op>
__global__ void BlockPerBlockKernel(Op op, const float* x, int64_t d,
                                    int64_t block, int64_t blocks) {
  __shared__ double chunk_sums[kWideWarps];
  __shared__ double block_sum;
  const int warp = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;
  constexpr int64_t kChunk = kernels::kFixedSumChunk;
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const int64_t begin = b * block;
    const int64_t end = begin + block < d ? begin + block : d;
    const int64_t chunks = (end - begin + kChunk - 1) / kChunk;
    double total = 0;  // Kept by thread 0.
    for (int64_t first = 0; first < chunks; first += kWideWarps) {
      const int64_t c = first + warp;
      if (c < chunks) {  // The same for the whole warp.
        const int64_t chunk_begin = begin + c * kChunk;
        const int64_t chunk_end =
            chunk_begin + kChunk < end ? chunk_begin + kChunk : end;
        const double sum = ChunkSum(op, x, chunk_begin, chunk_end);
        if (lane == 0) chunk_sums[warp] = sum;
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        const int64_t n =
            chunks - first < kWideWarps ? chunks - first : int64_t{kWideWarps};
        for (int64_t w = 0; w < n; ++w) total = __dadd_rn(total, chunk_sums[w]);
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) block_sum = total;
    __syncthreads();
    op.Finish(x, b, begin, end, block_sum, threadIdx.x, blockDim.x);
    __syncthreads();  // block_sum is rewritten for the next block.
  }
}

// Fewer long blocks than the GPU has SMs (EF-signSGD's default block is the
// whole bucket): a thread block each would leave the other SMs idle. Then
// the whole grid sums every chunk of every block into `chunk_sums`
// (`per_block` slots a block), one thread a block adds its chunk sums in
// chunk order (BlockPerBlockKernel's order, so the same bits), and every
// thread of a grid runs op.Finish for each block.
template <typename Op>
__global__ void ChunkSumsKernel(Op op, const float* x, int64_t d, int64_t block,
                                int64_t per_block, int64_t chunks,
                                double* chunk_sums) {
  constexpr int64_t kChunk = kernels::kFixedSumChunk;
  const int64_t first =
      (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / kLanes;
  const int64_t warps = int64_t{gridDim.x} * blockDim.x / kLanes;
  const int lane = threadIdx.x % kLanes;
  for (int64_t c = first; c < chunks; c += warps) {
    const int64_t b = c / per_block;
    const int64_t block_end = b * block + block < d ? b * block + block : d;
    const int64_t begin = b * block + (c % per_block) * kChunk;
    if (begin >= block_end) continue;  // The last block's missing chunks.
    const int64_t end = begin + kChunk < block_end ? begin + kChunk : block_end;
    const double sum = ChunkSum(op, x, begin, end);
    if (lane == 0) chunk_sums[c] = sum;
  }
}

__global__ void AddChunkSumsKernel(const double* chunk_sums, int64_t d,
                                   int64_t block, int64_t per_block,
                                   int64_t blocks, double* totals) {
  constexpr int64_t kChunk = kernels::kFixedSumChunk;
  for (int64_t b = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; b < blocks;
       b += int64_t{gridDim.x} * blockDim.x) {
    const int64_t end = b * block + block < d ? b * block + block : d;
    const int64_t chunks = (end - b * block + kChunk - 1) / kChunk;
    double total = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      total = __dadd_rn(total, chunk_sums[b * per_block + c]);
    }
    totals[b] = total;
  }
}

template <typename Op>
__global__ void FinishBlocksKernel(Op op, const float* x, int64_t d,
                                   int64_t block, int64_t blocks,
                                   const double* totals) {
  const int rank = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  const int size = static_cast<int>(gridDim.x * blockDim.x);
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * block;
    const int64_t end = begin + block < d ? begin + block : d;
    op.Finish(x, b, begin, end, totals[b], rank, size);
  }
}

// Launches the kernels that fit `block` and `blocks` (see above) on stream
// s of `device`; `what` names the caller in errors.
template <typename Op>
absl::Status LaunchBlockReduce(int device, const char* what, const Op& op,
                               const float* x, int64_t d, int64_t block,
                               int64_t blocks, cudaStream_t s) {
  constexpr int64_t kChunk = kernels::kFixedSumChunk;
  if (block <= kChunk) {
    WarpPerBlockKernel<<<Blocks(blocks * kLanes), kThreads, 0, s>>>(
        op, x, d, block, blocks);
    return LaunchError(what);
  }
  int sms = 0;
  const cudaError_t asked =
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (asked != cudaSuccess) {
    return absl::InternalError(
        std::string(what) +
        ": cudaDeviceGetAttribute: " + cudaGetErrorString(asked));
  }
  if (blocks >= sms) {
    const int grid = static_cast<int>(blocks < 4096 ? blocks : 4096);
    BlockPerBlockKernel<<<grid, kWideThreads, 0, s>>>(op, x, d, block, blocks);
    return LaunchError(what);
  }
  const int64_t per_block = (block + kChunk - 1) / kChunk;
  const int64_t chunks = per_block * blocks;
  void* scratch = nullptr;
  const cudaError_t got =
      cudaMallocAsync(&scratch, (chunks + blocks) * sizeof(double), s);
  if (got != cudaSuccess) {
    return absl::ResourceExhaustedError(
        std::string(what) + ": cudaMallocAsync: " + cudaGetErrorString(got));
  }
  double* chunk_sums = static_cast<double*>(scratch);
  double* totals = chunk_sums + chunks;
  ChunkSumsKernel<<<Blocks(chunks * kLanes), kThreads, 0, s>>>(
      op, x, d, block, per_block, chunks, chunk_sums);
  AddChunkSumsKernel<<<Blocks(blocks), kThreads, 0, s>>>(
      chunk_sums, d, block, per_block, blocks, totals);
  FinishBlocksKernel<<<Blocks(d), kThreads, 0, s>>>(op, x, d, block, blocks,
                                                    totals);
  const absl::Status launched = LaunchError(what);
  const cudaError_t freed = cudaFreeAsync(scratch, s);
  if (!launched.ok()) return launched;
  if (freed != cudaSuccess) {
    return absl::InternalError(std::string(what) +
                               ": cudaFreeAsync: " + cudaGetErrorString(freed));
  }
  return absl::OkStatus();
}

// EF-signSGD's scale: mean |x| of the block, float(sum / count).
struct SignScaleOp {
  float* scales;

  __device__ double Term(float v) const { return fabs(static_cast<double>(v)); }
  __device__ void Finish(const float*, int64_t b, int64_t begin, int64_t end,
                         double sum, int rank, int) const {
    if (rank != 0) return;
    scales[b] =
        static_cast<float>(__ddiv_rn(sum, static_cast<double>(end - begin)));
  }
};

// One thread per byte of sign bits.
__global__ void SignBitsKernel(const float* x, int64_t d, uint8_t* bits) {
  const int64_t bytes = (d + 7) / 8;
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < bytes;
       j += int64_t{gridDim.x} * blockDim.x) {
    uint8_t byte = 0;
    for (int64_t i = j * 8; i < j * 8 + 8 && i < d; ++i) {
      if (signbit(x[i])) byte |= static_cast<uint8_t>(1u << (i & 7));
    }
    bits[j] = byte;
  }
}

__global__ void SignDecodeAddKernel(const float* scales, const uint8_t* bits,
                                    int64_t d, int64_t block, float* dense) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < d;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float scale = scales[i / block];
    dense[i] += ((bits[i >> 3] >> (i & 7)) & 1) ? -scale : scale;
  }
}

__device__ uint64_t SplitMix64Device(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// QSGD's norm and stochastic rounding: the CPU compressor's arithmetic,
// with explicit IEEE operations so that nothing contracts to an FMA. The
// bucket's threads round its elements in parallel: SplitMix64's state after
// k draws is seed + k * increment, so element j of the bucket takes draw
// j / 2 (the low half for even j, the high half for odd j) without the draws
// before it.
struct QsgdEncodeOp {
  int levels;
  int bits;
  const uint64_t* seeds;
  float* norms;
  uint32_t* words;

  __device__ double Term(float v) const {
    const double w = v;
    return __dmul_rn(w, w);
  }
  __device__ void Finish(const float* x, int64_t b, int64_t begin, int64_t end,
                         double sq, int rank, int size) const {
    const float norm = static_cast<float>(__dsqrt_rn(sq));
    if (rank == 0) norms[b] = norm;
    const bool usable = isfinite(norm) && norm > 0;
    const double scale =
        usable ? __ddiv_rn(static_cast<double>(levels), norm) : 0.0;
    for (int64_t j = rank; j < end - begin; j += size) {
      const int64_t i = begin + j;
      uint64_t state =
          seeds[b] + static_cast<uint64_t>(j >> 1) * 0x9e3779b97f4a7c15ull;
      const uint64_t random = SplitMix64Device(&state);
      const uint32_t draw =
          static_cast<uint32_t>((j & 1) ? random >> 32 : random);
      uint32_t level = 0;
      const double a = __dmul_rn(fabs(static_cast<double>(x[i])), scale);
      if (usable && a > 0) {
        const double floor_a = floor(a);
        level = static_cast<uint32_t>(floor_a < levels ? floor_a : levels);
        if (__dmul_rn(static_cast<double>(draw), 1.0 / 4294967296.0) <
            __dadd_rn(a, -floor_a)) {
          ++level;
        }
        if (level > static_cast<uint32_t>(levels)) level = levels;
      }
      const uint64_t code = (level << 1) | (signbit(x[i]) ? 1u : 0u);
      const uint64_t pos = static_cast<uint64_t>(i) * bits;
      const uint64_t shifted = code << (pos & 31);
      atomicOr(&words[pos >> 5], static_cast<uint32_t>(shifted));
      if ((pos & 31) + bits > 32) {
        atomicOr(&words[(pos >> 5) + 1], static_cast<uint32_t>(shifted >> 32));
      }
    }
  }
};

__global__ void CheckQsgdCodesKernel(const uint8_t* codes, int64_t d,
                                     int levels, int bits, uint32_t* bad) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < d;
       i += int64_t{gridDim.x} * blockDim.x) {
    if ((qsgd_bits::CodeAt(codes, i, bits) >> 1) >
        static_cast<uint32_t>(levels)) {
      atomicOr(bad, 1u);
    }
  }
}

__global__ void QsgdDecodeAddKernel(const float* norms, const uint8_t* codes,
                                    int64_t d, int64_t bucket, int levels,
                                    int bits, float* dense) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < d;
       i += int64_t{gridDim.x} * blockDim.x) {
    const uint32_t code = qsgd_bits::CodeAt(codes, i, bits);
    const float unit = __fdiv_rn(norms[i / bucket], static_cast<float>(levels));
    const float v = __fmul_rn(unit, static_cast<float>(code >> 1));
    dense[i] = __fadd_rn(dense[i], (code & 1u) ? -v : v);
  }
}

}  // namespace

absl::Status SignEncode(int device, void* stream, const float* x, int64_t d,
                        int64_t block, float* scales, uint8_t* bits) {
  if (d <= 0) return absl::OkStatus();
  absl::Status set = SetDevice(device, "SignEncode");
  if (!set.ok()) return set;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int64_t blocks = (d + block - 1) / block;
  absl::Status st =
      LaunchBlockReduce(device, "SignEncode (scales)", SignScaleOp{scales}, x,
                        d, block, blocks, s);
  if (!st.ok()) return st;
  SignBitsKernel<<<Blocks((d + 7) / 8), kThreads, 0, s>>>(x, d, bits);
  return LaunchError("SignEncode (bits)");
}

absl::Status SignDecodeAdd(int device, void* stream, const float* scales,
                           const uint8_t* bits, int64_t d, int64_t block,
                           float* dense) {
  if (d <= 0) return absl::OkStatus();
  absl::Status set = SetDevice(device, "SignDecodeAdd");
  if (!set.ok()) return set;
  SignDecodeAddKernel<<<Blocks(d), kThreads, 0,
                        static_cast<cudaStream_t>(stream)>>>(scales, bits, d,
                                                             block, dense);
  return LaunchError("SignDecodeAdd");
}

absl::Status QsgdEncode(int device, void* stream, const float* x, int64_t d,
                        int64_t bucket, int levels, const uint64_t* seeds,
                        float* norms, uint8_t* codes) {
  if (d <= 0) return absl::OkStatus();
  absl::Status set = SetDevice(device, "QsgdEncode");
  if (!set.ok()) return set;
  int bits = 0;
  while ((1 << bits) <= levels) ++bits;
  bits += 1;
  const int64_t buckets = (d + bucket - 1) / bucket;
  const QsgdEncodeOp op{levels, bits, seeds, norms,
                        reinterpret_cast<uint32_t*>(codes)};
  return LaunchBlockReduce(device, "QsgdEncode", op, x, d, bucket, buckets,
                           static_cast<cudaStream_t>(stream));
}

absl::Status QsgdDecodeAdd(int device, void* stream, const float* norms,
                           const uint8_t* codes, int64_t d, int64_t bucket,
                           int levels, float* dense) {
  if (d <= 0) return absl::OkStatus();
  absl::Status set = SetDevice(device, "QsgdDecodeAdd");
  if (!set.ok()) return set;
  int bits = 0;
  while ((1 << bits) <= levels) ++bits;
  bits += 1;
  QsgdDecodeAddKernel<<<Blocks(d), kThreads, 0,
                        static_cast<cudaStream_t>(stream)>>>(
      norms, codes, d, bucket, levels, bits, dense);
  return LaunchError("QsgdDecodeAdd");
}

absl::Status CheckQsgdCodes(int device, void* stream, const uint8_t* codes,
                            int64_t d, int levels, uint32_t* bad) {
  absl::Status set = SetDevice(device, "CheckQsgdCodes");
  if (!set.ok()) return set;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const cudaError_t zero = cudaMemsetAsync(bad, 0, sizeof(uint32_t), s);
  if (zero != cudaSuccess) {
    return absl::InternalError(std::string("CheckQsgdCodes: ") +
                               cudaGetErrorString(zero));
  }
  if (d <= 0) return absl::OkStatus();
  int bits = 0;
  while ((1 << bits) <= levels) ++bits;
  bits += 1;
  CheckQsgdCodesKernel<<<Blocks(d), kThreads, 0, s>>>(codes, d, levels, bits,
                                                      bad);
  return LaunchError("CheckQsgdCodes");
}

}  // namespace device_ops_cuda
}  // namespace terse
