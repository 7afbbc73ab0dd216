#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "compressors/device/device_ops_cuda.h"
#include "compressors/device/device_ops_cuda_internal.h"

namespace terse {
namespace device_ops_cuda {
namespace {

__global__ void AddKernel(const float* x, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] += x[i];
  }
}

__global__ void SubtractKernel(const float* x, const float* y, float* out,
                               int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = x[i] - y[i];
  }
}

// No FMA contraction: the CPU rounds the product, then the sum.
__global__ void MomentumAccumulateKernel(float m, float* u, float* g,
                                         int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float v = __fadd_rn(__fmul_rn(m, u[i]), g[i]);
    u[i] = v;
    g[i] = v;
  }
}

__global__ void ClearWhereSentKernel(const float* sent, float* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    if (sent[i] != 0.0f) x[i] = 0.0f;
  }
}

__global__ void CastToHalfKernel(const float* x, uint16_t* out, int64_t n,
                                 bool bf16) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    if (bf16) {
      out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x[i]));
    } else {
      out[i] = __half_as_ushort(__float2half_rn(x[i]));
    }
  }
}

__global__ void AccumulateHalfKernel(const uint16_t* h, float* y, int64_t n,
                                     bool bf16) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] += bf16 ? __bfloat162float(__ushort_as_bfloat16(h[i]))
                 : __half2float(__ushort_as_half(h[i]));
  }
}

__global__ void SquaredNormKernel(const float* x, int64_t n, double* out) {
  __shared__ double partial[kThreads];
  double sum = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const double v = x[i];
    sum += v * v;
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(out, partial[0]);
}

__global__ void CheckSparseIndicesKernel(const uint32_t* indices, int64_t k,
                                         uint64_t d, uint32_t* bad) {
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < k;
       j += int64_t{gridDim.x} * blockDim.x) {
    const uint32_t v = indices[j];
    if (v >= d || (j > 0 && v <= indices[j - 1])) atomicOr(bad, 1u);
  }
}

// p[i, c] = sum_j m[i, j] q[j, c].
__global__ void MatMulKernel(const float* m, const float* q, float* p,
                             int64_t rows, int64_t cols, int64_t r) {
  for (int64_t o = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; o < rows * r;
       o += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = o / r, c = o % r;
    float sum = 0;
    for (int64_t j = 0; j < cols; ++j) sum += m[i * cols + j] * q[j * r + c];
    p[o] = sum;
  }
}

// q[j, c] = sum_i m[i, j] p[i, c].
__global__ void MatMulTransposedKernel(const float* m, const float* p, float* q,
                                       int64_t rows, int64_t cols, int64_t r) {
  for (int64_t o = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; o < cols * r;
       o += int64_t{gridDim.x} * blockDim.x) {
    const int64_t j = o / r, c = o % r;
    float sum = 0;
    for (int64_t i = 0; i < rows; ++i) sum += m[i * cols + j] * p[i * r + c];
    q[o] = sum;
  }
}

// m[i, j] += sum_c p[i, c] q[j, c].
__global__ void AddOuterProductKernel(const float* p, const float* q, float* m,
                                      int64_t rows, int64_t cols, int64_t r) {
  for (int64_t o = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
       o < rows * cols; o += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = o / cols, j = o % cols;
    float sum = 0;
    for (int64_t c = 0; c < r; ++c) sum += p[i * r + c] * q[j * r + c];
    m[o] += sum;
  }
}

// The sum over the block of each thread's `mine`, a tree in double in
// `partial` (kThreads doubles of shared memory; blockDim.x == kThreads, a
// power of two), returned to every thread. Ends with a barrier so that the
// next call may reuse `partial`.
__device__ double BlockSum(double mine, double* partial) {
  partial[threadIdx.x] = mine;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) {
      partial[threadIdx.x] =
          __dadd_rn(partial[threadIdx.x], partial[threadIdx.x + s]);
    }
    __syncthreads();
  }
  const double total = partial[0];
  __syncthreads();
  return total;
}

// One block: powersgd_plan.cc's OrthonormalizeColumns. `basis` (rows * r
// doubles) holds the columns in double, column-major as on the CPU; after
// the load each thread touches only its own rows (i = threadIdx.x + k *
// blockDim.x), so the per-row updates need no barrier beyond BlockSum's.
// The CPU's per-element operations are spelled as explicit IEEE operations
// (no FMA), so only the order of the sums differs from it.
__global__ void OrthonormalizeKernel(float* p, int64_t rows, int64_t r,
                                     double* basis) {
  __shared__ double partial[kThreads];
  for (int64_t o = threadIdx.x; o < rows * r; o += blockDim.x) {
    basis[(o % r) * rows + o / r] = p[o];
  }
  __syncthreads();
  for (int64_t c = 0; c < r; ++c) {
    double* v = basis + c * rows;
    for (int64_t prev = 0; prev < c; ++prev) {
      const double* b = basis + prev * rows;
      double mine = 0;
      for (int64_t i = threadIdx.x; i < rows; i += blockDim.x) {
        mine = __dadd_rn(mine, __dmul_rn(v[i], b[i]));
      }
      const double dot = BlockSum(mine, partial);
      for (int64_t i = threadIdx.x; i < rows; i += blockDim.x) {
        v[i] = __dsub_rn(v[i], __dmul_rn(dot, b[i]));
      }
    }
    double mine = 0;
    for (int64_t i = threadIdx.x; i < rows; i += blockDim.x) {
      mine = __dadd_rn(mine, __dmul_rn(v[i], v[i]));
    }
    const double norm = sqrt(BlockSum(mine, partial));
    // A column that vanished (rank-deficient sum) or is not finite: zero,
    // the CPU's test exactly.
    const bool keep = isfinite(norm) && norm > 1e-30;
    for (int64_t i = threadIdx.x; i < rows; i += blockDim.x) {
      v[i] = keep ? __ddiv_rn(v[i], norm) : 0.0;
    }
  }
  __syncthreads();
  for (int64_t o = threadIdx.x; o < rows * r; o += blockDim.x) {
    p[o] = static_cast<float>(basis[(o % r) * rows + o / r]);
  }
}

}  // namespace

absl::Status OrthonormalizeColumns(int device, void* stream, float* p,
                                   int64_t rows, int64_t r) {
  if (rows * r <= 0) return absl::OkStatus();
  absl::Status set = SetDevice(device, "OrthonormalizeColumns");
  if (!set.ok()) return set;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  // Stream-ordered scratch: freed on the stream after the kernel, so the
  // call never waits for the device.
  double* basis = nullptr;
  const cudaError_t alloc =
      cudaMallocAsync(reinterpret_cast<void**>(&basis),
                      static_cast<size_t>(rows * r) * sizeof(double), s);
  if (alloc != cudaSuccess) {
    return absl::InternalError(
        std::string("OrthonormalizeColumns: cudaMallocAsync: ") +
        cudaGetErrorString(alloc));
  }
  OrthonormalizeKernel<<<1, kThreads, 0, s>>>(p, rows, r, basis);
  absl::Status launched = LaunchError("OrthonormalizeColumns");
  const cudaError_t freed = cudaFreeAsync(basis, s);
  if (!launched.ok()) return launched;
  if (freed != cudaSuccess) {
    return absl::InternalError(
        std::string("OrthonormalizeColumns: cudaFreeAsync: ") +
        cudaGetErrorString(freed));
  }
  return absl::OkStatus();
}

absl::Status MatMul(int device, void* stream, const float* m, const float* q,
                    float* p, int64_t rows, int64_t cols, int64_t r) {
  if (rows * r <= 0) return absl::OkStatus();
  absl::Status set = SetDevice(device, "MatMul");
  if (!set.ok()) return set;
  MatMulKernel<<<Blocks(rows * r), kThreads, 0,
                 static_cast<cudaStream_t>(stream)>>>(m, q, p, rows, cols, r);
  return LaunchError("MatMul");
}

absl::Status MatMulTransposed(int device, void* stream, const float* m,
                              const float* p, float* q, int64_t rows,
                              int64_t cols, int64_t r) {
  if (cols * r <= 0) return absl::OkStatus();
  absl::Status set = SetDevice(device, "MatMulTransposed");
  if (!set.ok()) return set;
  MatMulTransposedKernel<<<Blocks(cols * r), kThreads, 0,
                           static_cast<cudaStream_t>(stream)>>>(m, p, q, rows,
                                                                cols, r);
  return LaunchError("MatMulTransposed");
}

absl::Status AddOuterProduct(int device, void* stream, const float* p,
                             const float* q, float* m, int64_t rows,
                             int64_t cols, int64_t r) {
  if (rows * cols <= 0) return absl::OkStatus();
  absl::Status set = SetDevice(device, "AddOuterProduct");
  if (!set.ok()) return set;
  AddOuterProductKernel<<<Blocks(rows * cols), kThreads, 0,
                          static_cast<cudaStream_t>(stream)>>>(p, q, m, rows,
                                                               cols, r);
  return LaunchError("AddOuterProduct");
}

absl::Status Add(int device, void* stream, const float* x, float* y,
                 int64_t n) {
  if (n <= 0) return absl::OkStatus();
  absl::Status set = SetDevice(device, "Add");
  if (!set.ok()) return set;
  AddKernel<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, y,
                                                                           n);
  return LaunchError("Add");
}

absl::Status Subtract(int device, void* stream, const float* x, const float* y,
                      float* out, int64_t n) {
  if (n <= 0) return absl::OkStatus();
  absl::Status set = SetDevice(device, "Subtract");
  if (!set.ok()) return set;
  SubtractKernel<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      x, y, out, n);
  return LaunchError("Subtract");
}

absl::Status MomentumAccumulate(int device, void* stream, float m, float* u,
                                float* g, int64_t n) {
  if (n <= 0) return absl::OkStatus();
  absl::Status set = SetDevice(device, "MomentumAccumulate");
  if (!set.ok()) return set;
  MomentumAccumulateKernel<<<Blocks(n), kThreads, 0,
                             static_cast<cudaStream_t>(stream)>>>(m, u, g, n);
  return LaunchError("MomentumAccumulate");
}

absl::Status ClearWhereSent(int device, void* stream, const float* sent,
                            float* x, int64_t n) {
  if (n <= 0) return absl::OkStatus();
  absl::Status set = SetDevice(device, "ClearWhereSent");
  if (!set.ok()) return set;
  ClearWhereSentKernel<<<Blocks(n), kThreads, 0,
                         static_cast<cudaStream_t>(stream)>>>(sent, x, n);
  return LaunchError("ClearWhereSent");
}

absl::Status CastToHalf(int device, void* stream, const float* x, uint16_t* out,
                        int64_t n, bool bf16) {
  if (n <= 0) return absl::OkStatus();
  absl::Status set = SetDevice(device, "CastToHalf");
  if (!set.ok()) return set;
  CastToHalfKernel<<<Blocks(n), kThreads, 0,
                     static_cast<cudaStream_t>(stream)>>>(x, out, n, bf16);
  return LaunchError("CastToHalf");
}

absl::Status AccumulateHalf(int device, void* stream, const uint16_t* h,
                            float* y, int64_t n, bool bf16) {
  if (n <= 0) return absl::OkStatus();
  absl::Status set = SetDevice(device, "AccumulateHalf");
  if (!set.ok()) return set;
  AccumulateHalfKernel<<<Blocks(n), kThreads, 0,
                         static_cast<cudaStream_t>(stream)>>>(h, y, n, bf16);
  return LaunchError("AccumulateHalf");
}

absl::Status SquaredNorm(int device, void* stream, const float* x, int64_t n,
                         double* out) {
  absl::Status set = SetDevice(device, "SquaredNorm");
  if (!set.ok()) return set;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const cudaError_t zero = cudaMemsetAsync(out, 0, sizeof(double), s);
  if (zero != cudaSuccess) {
    return absl::InternalError(std::string("SquaredNorm: ") +
                               cudaGetErrorString(zero));
  }
  if (n <= 0) return absl::OkStatus();
  SquaredNormKernel<<<Blocks(n), kThreads, 0, s>>>(x, n, out);
  return LaunchError("SquaredNorm");
}

absl::Status CheckSparseIndices(int device, void* stream,
                                const uint32_t* indices, int64_t k, uint64_t d,
                                uint32_t* bad) {
  absl::Status set = SetDevice(device, "CheckSparseIndices");
  if (!set.ok()) return set;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const cudaError_t zero = cudaMemsetAsync(bad, 0, sizeof(uint32_t), s);
  if (zero != cudaSuccess) {
    return absl::InternalError(std::string("CheckSparseIndices: ") +
                               cudaGetErrorString(zero));
  }
  if (k <= 0) return absl::OkStatus();
  CheckSparseIndicesKernel<<<Blocks(k), kThreads, 0, s>>>(indices, k, d, bad);
  return LaunchError("CheckSparseIndices");
}

}  // namespace device_ops_cuda
}  // namespace terse
