#include <cuda_runtime.h>

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

// Absolute index and value of slot j of a row (either format); false for a
// format-B marker slot (no entry). Format B uses the row's decode index
// block_starts (sparse_ops.h).
__device__ __forceinline__ bool RowEntry(const SparseRow& row, int64_t j,
                                         int64_t* index, float* value) {
  if (row.index32 != nullptr) {
    *index = row.index32[j];
    *value = row.value32[j];
    return true;
  }
  const uint16_t bits = row.value16[j];
  if ((bits & 0x7f80u) == 0x7f80u) return false;  // A marker.
  // The block b with block_starts[b] <= j < block_starts[b + 1].
  int64_t lo = 0, hi = row.num_blocks;  // Invariant: starts[lo] <= j.
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (row.block_starts[mid] <= j) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  *index = lo * kBlock16Size + row.index16[j];
  *value = Bf16ToFloat(bits);
  return true;
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

// One block: out[0] = sum over the row of value * dense[index], in double.
__global__ void RowDotKernel(SparseRow row, const float* dense, double* out) {
  __shared__ double partial[kThreads];
  double sum = 0;
  for (int64_t j = threadIdx.x; j < row.nnz; j += blockDim.x) {
    int64_t index;
    float value;
    if (!RowEntry(row, j, &index, &value)) continue;
    sum += static_cast<double>(value) * static_cast<double>(dense[index]);
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int width = blockDim.x / 2; width > 0; width /= 2) {
    if (threadIdx.x < width)
      partial[threadIdx.x] += partial[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = partial[0];
}

// dense[index] += float(coeff * value): indices of one row are distinct, so
// no two threads touch the same element.
__global__ void RowAxpyKernel(SparseRow row, double coeff, float* dense) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       j < row.nnz; j += stride) {
    int64_t index;
    float value;
    if (!RowEntry(row, j, &index, &value)) continue;
    dense[index] += static_cast<float>(coeff * static_cast<double>(value));
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
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  for (int64_t i = 0; i < m; ++i) {
    RowDotKernel<<<1, kThreads, 0, s>>>(rows[i], dense, out + i);
  }
  return static_cast<int>(cudaGetLastError());
}

int SparseLinearCombination(const SparseRow* rows, int64_t m,
                            const double* coeffs, float* dense, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  for (int64_t i = 0; i < m; ++i) {
    if (rows[i].nnz == 0) continue;
    RowAxpyKernel<<<GridFor(rows[i].nnz), kThreads, 0, s>>>(rows[i], coeffs[i],
                                                            dense);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace cuda
}  // namespace kernels
}  // namespace terse
