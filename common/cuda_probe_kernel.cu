#include <cuda_runtime.h>

#include "common/cuda_probe_kernel.h"

namespace terse {
namespace cuda_probe_internal {
namespace {

__global__ void AxpyKernel(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}

}  // namespace

int DeviceCount(int* count) {
  *count = 0;
  return static_cast<int>(cudaGetDeviceCount(count));
}

int RuntimeVersion(int* version) {
  return static_cast<int>(cudaRuntimeGetVersion(version));
}

const char* ErrorString(int error) {
  return cudaGetErrorString(static_cast<cudaError_t>(error));
}

int Axpy(float a, const float* host_x, float* host_y, int n) {
  float* x = nullptr;
  float* y = nullptr;
  size_t bytes = static_cast<size_t>(n) * sizeof(float);
  cudaError_t err = cudaMalloc(&x, bytes);
  if (err == cudaSuccess) err = cudaMalloc(&y, bytes);
  if (err == cudaSuccess) err = cudaMemcpy(x, host_x, bytes, cudaMemcpyHostToDevice);
  if (err == cudaSuccess) err = cudaMemcpy(y, host_y, bytes, cudaMemcpyHostToDevice);
  if (err == cudaSuccess) {
    AxpyKernel<<<(n + 255) / 256, 256>>>(a, x, y, n);
    err = cudaGetLastError();
  }
  if (err == cudaSuccess) err = cudaMemcpy(host_y, y, bytes, cudaMemcpyDeviceToHost);
  cudaFree(x);
  cudaFree(y);
  return static_cast<int>(err);
}

}  // namespace cuda_probe_internal
}  // namespace terse
