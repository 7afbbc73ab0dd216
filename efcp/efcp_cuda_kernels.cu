#include <cuda_runtime.h>

#include <cstdint>

#include "efcp/efcp_cuda_kernels.h"

namespace terse {
namespace efcp {
namespace cuda {
namespace {

constexpr int kThreads = 256;

int GridFor(int64_t n) {
  int64_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks > 4096) blocks = 4096;
  return blocks < 1 ? 1 : static_cast<int>(blocks);
}

cudaStream_t AsStream(void* stream) {
  return static_cast<cudaStream_t>(stream);
}

__global__ void FlagNonFiniteKernel(const float* a, const float* b, int64_t n,
                                    int* flag) {
  bool bad = false;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float v = b != nullptr ? a[i] + b[i] : a[i];
    bad |= !isfinite(v);
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 1;
}

__global__ void AddInPlaceKernel(float* a, const float* b, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    a[i] += b[i];
  }
}

__device__ __forceinline__ float RoundBf16(float f) {
  uint32_t x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    x = (x | 0x00400000u) & 0xffff0000u;  // quiet NaN, sign kept
  } else {
    const uint32_t finite = x;
    x = (x + 0x7fffu + ((x >> 16) & 1u)) & 0xffff0000u;
    // Saturate as kernels::ToBlock16Value does: a finite value never
    // rounds to Inf (a marker pattern in the block16 window).
    if ((x & 0x7f800000u) == 0x7f800000u &&
        (finite & 0x7f800000u) != 0x7f800000u) {
      x = (finite & 0x80000000u) | 0x7f7f0000u;
    }
  }
  return __uint_as_float(x);
}

__global__ void RoundAndNegateKernel(float* values, float* negated, int64_t n,
                                     int bf16) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float v = bf16 ? RoundBf16(values[i]) : values[i];
    values[i] = v;
    negated[i] = -v;
  }
}

__global__ void ScaleKernel(float* x, float s, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    x[i] *= s;
  }
}

// One block per row: each thread strides the row, then a shared-memory tree
// reduction in double.
__global__ void DenseDotsKernel(const float* rows, int64_t d, const float* x,
                                double* out) {
  __shared__ double partial[kThreads];
  const float* row = rows + blockIdx.x * d;
  double sum = 0;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    sum += static_cast<double>(row[j]) * static_cast<double>(x[j]);
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride)
      partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}

// One thread per column: the rows' terms in row order.
__global__ void DenseLinearCombinationKernel(const float* rows, int64_t m,
                                             int64_t d, const double* coeffs,
                                             float* out) {
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < d;
       j += int64_t{gridDim.x} * blockDim.x) {
    float acc = out[j];
    for (int64_t i = 0; i < m; ++i) {
      const float c = static_cast<float>(coeffs[i]);
      if (c != 0.0f) acc += c * rows[i * d + j];
    }
    out[j] = acc;
  }
}

}  // namespace

int DenseDots(const float* rows, int64_t m, int64_t d, const float* x,
              double* out, void* stream) {
  if (m <= 0) return 0;
  // Grid x is limited to 2^31 - 1 blocks; m is far below (<= 2^20).
  DenseDotsKernel<<<static_cast<unsigned>(m), kThreads, 0, AsStream(stream)>>>(
      rows, d, x, out);
  return static_cast<int>(cudaGetLastError());
}

int DenseLinearCombination(const float* rows, int64_t m, int64_t d,
                           const double* coeffs, float* out, void* stream) {
  if (d <= 0 || m <= 0) return 0;
  int64_t blocks = (d + kThreads - 1) / kThreads;
  if (blocks > 65536) blocks = 65536;
  DenseLinearCombinationKernel<<<static_cast<unsigned>(blocks), kThreads, 0,
                                 AsStream(stream)>>>(rows, m, d, coeffs, out);
  return static_cast<int>(cudaGetLastError());
}

int FlagNonFinite(const float* a, const float* b, int64_t n, int* flag,
                  void* stream) {
  if (n <= 0) return 0;
  FlagNonFiniteKernel<<<GridFor(n), kThreads, 0, AsStream(stream)>>>(a, b, n,
                                                                     flag);
  return static_cast<int>(cudaGetLastError());
}

int AddInPlace(float* a, const float* b, int64_t n, void* stream) {
  if (n <= 0) return 0;
  AddInPlaceKernel<<<GridFor(n), kThreads, 0, AsStream(stream)>>>(a, b, n);
  return static_cast<int>(cudaGetLastError());
}

int RoundAndNegate(float* values, float* negated, int64_t n, int bf16,
                   void* stream) {
  if (n <= 0) return 0;
  RoundAndNegateKernel<<<GridFor(n), kThreads, 0, AsStream(stream)>>>(
      values, negated, n, bf16);
  return static_cast<int>(cudaGetLastError());
}

int Scale(float* x, float s, int64_t n, void* stream) {
  if (n <= 0) return 0;
  ScaleKernel<<<GridFor(n), kThreads, 0, AsStream(stream)>>>(x, s, n);
  return static_cast<int>(cudaGetLastError());
}

const char* ErrorString(int error) {
  return cudaGetErrorString(static_cast<cudaError_t>(error));
}

}  // namespace cuda
}  // namespace efcp
}  // namespace terse
