#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "compressors/kernels/sparse_ops_cuda.h"

namespace terse {
namespace kernels {
namespace cuda {
namespace {

constexpr int kThreads = 256;

int GridFor(int64_t n) {
  int64_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks > 8192) blocks = 8192;
  return blocks < 1 ? 1 : static_cast<int>(blocks);
}

__device__ __forceinline__ float Bf16ToFloat(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

__global__ void GatherKernel(const float* dense, const uint32_t* indices,
                             int64_t k, float* values) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       j < k; j += stride) {
    values[j] = dense[indices[j]];
  }
}

__global__ void ScatterAddKernel(const uint32_t* indices, const float* values,
                                 int64_t k, float* dense) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       j < k; j += stride) {
    atomicAdd(&dense[indices[j]], values[j]);
  }
}

// One thread block a row (grid-stride over rows): out[i] = sum over row i of
// value * dense[index], each thread summing a strided part in double, then
// a tree over the block. Format B walks the row block by block through its
// decode index (slots [block_starts[b], block_starts[b + 1]) hold block b's
// entries, after any jump markers), so no slot needs a search.
__global__ void RowDotsKernel(const SparseRow* rows, int64_t m,
                              const float* dense, double* out) {
  __shared__ double partial[kThreads];
  for (int64_t i = blockIdx.x; i < m; i += gridDim.x) {
    const SparseRow row = rows[i];
    double sum = 0;
    if (row.index32 != nullptr) {
      for (int64_t j = threadIdx.x; j < row.nnz; j += blockDim.x) {
        sum += static_cast<double>(row.value32[j]) *
               static_cast<double>(dense[row.index32[j]]);
      }
    } else {
      for (int64_t b = 0; b < row.num_blocks; ++b) {
        const int64_t base = b * kBlock16Size;
        const int64_t stop = row.block_starts[b + 1];
        for (int64_t j = row.block_starts[b] + threadIdx.x; j < stop;
             j += blockDim.x) {
          const uint16_t bits = row.value16[j];
          if ((bits & 0x7f80u) == 0x7f80u) continue;  // A marker.
          sum += static_cast<double>(Bf16ToFloat(bits)) *
                 static_cast<double>(dense[base + row.index16[j]]);
        }
      }
    }
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (int width = blockDim.x / 2; width > 0; width /= 2) {
      if (threadIdx.x < width)
        partial[threadIdx.x] += partial[threadIdx.x + width];
      __syncthreads();
    }
    if (threadIdx.x == 0) out[i] = partial[0];
    __syncthreads();  // partial[0] is read before the next row overwrites it
  }
}

// The linear combination: one thread block owns a chunk of kChunk dense
// elements (a tile in shared memory) and adds the rows into it one after
// another, with a barrier between rows; the threads share a row's entries
// in the chunk, which have distinct indices. So every element receives its
// terms in row order, one float addition each, as on the CPU.
constexpr int64_t kChunk = 8192;  // floats: 32 KiB of shared memory
static_assert(kBlock16Size % kChunk == 0, "a chunk must not straddle a block");
constexpr int kRowBatch = 256;  // rows whose chunk ranges are found at once

// The first position p in [lo, hi) of a nondecreasing sequence with
// at(p) >= key (hi when none).
template <typename At>
__device__ __forceinline__ int64_t LowerBound(int64_t lo, int64_t hi,
                                              int64_t key, At at) {
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (at(mid) < key) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// The slots [*begin, *end) of `row` whose entries lie in the dense range
// [lo, hi), which lies inside one format-B block. Format A: a binary search
// of the ascending indices. Format B: within block b's slots (any jump
// markers first, index16 0, then the entries' relative indices strictly
// ascending: a nondecreasing sequence), a binary search of index16; jump
// markers may fall in the range only when lo is the block's start, and the
// caller skips them.
__device__ __forceinline__ void ChunkRange(const SparseRow& row, int64_t lo,
                                           int64_t hi, int64_t* begin,
                                           int64_t* end) {
  if (row.index32 != nullptr) {
    const uint32_t* index = row.index32;
    auto at = [index](int64_t j) { return static_cast<int64_t>(index[j]); };
    *begin = LowerBound(0, row.nnz, lo, at);
    *end = LowerBound(*begin, row.nnz, hi, at);
    return;
  }
  const int64_t b = lo / kBlock16Size;
  if (b >= row.num_blocks) {
    *begin = *end = 0;
    return;
  }
  const int64_t base = b * kBlock16Size;
  const uint16_t* index = row.index16;
  auto at = [index](int64_t j) { return static_cast<int64_t>(index[j]); };
  const int64_t first = row.block_starts[b], last = row.block_starts[b + 1];
  *begin = LowerBound(first, last, lo - base, at);
  *end = LowerBound(*begin, last, hi - base, at);
}

__global__ void LinearCombinationKernel(const SparseRow* rows, int64_t m,
                                        const double* coeffs, int64_t dim,
                                        float* dense) {
  __shared__ float tile[kChunk];
  __shared__ int64_t range_begin[kRowBatch];
  __shared__ int64_t range_end[kRowBatch];
  const int64_t chunks = (dim + kChunk - 1) / kChunk;
  for (int64_t chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {
    const int64_t lo = chunk * kChunk;
    const int64_t hi = lo + kChunk < dim ? lo + kChunk : dim;
    for (int64_t t = threadIdx.x; t < hi - lo; t += blockDim.x) {
      tile[t] = dense[lo + t];
    }
    for (int64_t batch = 0; batch < m; batch += kRowBatch) {
      const int rows_here =
          static_cast<int>(m - batch < kRowBatch ? m - batch : kRowBatch);
      // The tile is loaded and the previous batch's ranges are used up.
      __syncthreads();
      for (int r = threadIdx.x; r < rows_here; r += blockDim.x) {
        ChunkRange(rows[batch + r], lo, hi, &range_begin[r], &range_end[r]);
      }
      __syncthreads();
      for (int r = 0; r < rows_here; ++r) {
        const int64_t stop = range_end[r];
        int64_t j = range_begin[r] + threadIdx.x;
        if (j < stop) {
          const SparseRow& row = rows[batch + r];
          const double coeff = coeffs[batch + r];
          const bool b16 = row.index32 == nullptr;
          const int64_t base = b16 ? lo / kBlock16Size * kBlock16Size : 0;
          for (; j < stop; j += blockDim.x) {
            int64_t index;
            float value;
            if (b16) {
              const uint16_t bits = row.value16[j];
              if ((bits & 0x7f80u) == 0x7f80u) continue;  // A marker.
              index = base + row.index16[j];
              value = Bf16ToFloat(bits);
            } else {
              index = row.index32[j];
              value = row.value32[j];
            }
            tile[index - lo] +=
                static_cast<float>(coeff * static_cast<double>(value));
          }
        }
        __syncthreads();  // row r is in the tile before row r + 1
      }
    }
    __syncthreads();
    for (int64_t t = threadIdx.x; t < hi - lo; t += blockDim.x) {
      dense[lo + t] = tile[t];
    }
    __syncthreads();  // the tile is written out before the next chunk
  }
}

}  // namespace

int Gather(const float* dense, const uint32_t* indices, int64_t k,
           float* values, void* stream) {
  if (k <= 0) return cudaSuccess;
  GatherKernel<<<GridFor(k), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      dense, indices, k, values);
  return static_cast<int>(cudaGetLastError());
}

int ScatterAdd(const uint32_t* indices, const float* values, int64_t k,
               float* dense, void* stream) {
  if (k <= 0) return cudaSuccess;
  ScatterAddKernel<<<GridFor(k), kThreads, 0,
                     static_cast<cudaStream_t>(stream)>>>(indices, values, k,
                                                          dense);
  return static_cast<int>(cudaGetLastError());
}

int SparseDenseDots(const SparseRow* rows, int64_t m, const float* dense,
                    double* out, void* stream) {
  if (m <= 0) return cudaSuccess;
  const int grid = static_cast<int>(std::min<int64_t>(m, 1 << 20));
  RowDotsKernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      rows, m, dense, out);
  return static_cast<int>(cudaGetLastError());
}

int SparseLinearCombination(const SparseRow* rows, int64_t m,
                            const double* coeffs, int64_t dim, float* dense,
                            void* stream) {
  if (m <= 0 || dim <= 0) return cudaSuccess;
  const int grid =
      static_cast<int>(std::min<int64_t>((dim + kChunk - 1) / kChunk, 1 << 20));
  LinearCombinationKernel<<<grid, kThreads, 0,
                            static_cast<cudaStream_t>(stream)>>>(
      rows, m, coeffs, dim, dense);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace cuda
}  // namespace kernels
}  // namespace terse
