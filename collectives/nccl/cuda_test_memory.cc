#include "collectives/nccl/cuda_test_memory.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"

namespace terse {
namespace {

absl::Status Cuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(err)));
}

}  // namespace

void* CudaTestMemory::Allocate(int64_t bytes) {
  void* p = nullptr;
  if (cudaSetDevice(device_) != cudaSuccess ||
      cudaMalloc(&p, static_cast<size_t>(bytes)) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return p;
}

void CudaTestMemory::Free(void* buffer) {
  cudaSetDevice(device_);
  cudaFree(buffer);
}

absl::Status CudaTestMemory::CopyFromHost(void* dst, const void* host,
                                          int64_t bytes) {
  cudaSetDevice(device_);
  absl::Status s = Cuda(cudaMemcpy(dst, host, bytes, cudaMemcpyHostToDevice),
                        "cudaMemcpy to device");
  // A pageable copy may still be in flight, and the communicator's stream
  // does not wait for the legacy default stream.
  if (s.ok()) s = Cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return s;
}

absl::Status CudaTestMemory::CopyToHost(void* host, const void* src,
                                        int64_t bytes) {
  cudaSetDevice(device_);
  return Cuda(cudaMemcpy(host, src, bytes, cudaMemcpyDeviceToHost),
              "cudaMemcpy to host");
}

}  // namespace terse
