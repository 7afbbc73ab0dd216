// Launch helpers shared by the CUDA sources behind device_ops_cuda.h
// (device_ops_cuda.cu, dense_codecs_cuda.cu, count_sketch_cuda.cu).
// Included only by them: it needs <cuda_runtime.h> (cuda_emu's under the
// emulated build).
#ifndef TERSE_COMPRESSORS_DEVICE_DEVICE_OPS_CUDA_INTERNAL_H_
#define TERSE_COMPRESSORS_DEVICE_DEVICE_OPS_CUDA_INTERNAL_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace terse {
namespace device_ops_cuda {

// Threads a block of the element-wise kernels.
constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n elements: one per kThreads elements,
// at least 1, at most 4096.
inline int Blocks(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 4096 ? (blocks < 1 ? 1 : blocks) : 4096);
}

// FailedPrecondition with the runtime's text when `device` cannot be made
// current.
inline absl::Status SetDevice(int device, const char* what) {
  const cudaError_t err = cudaSetDevice(device);
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::FailedPreconditionError(
      std::string(what) + ": cudaSetDevice: " + cudaGetErrorString(err));
}

// Internal with the runtime's text when the last launch failed.
inline absl::Status LaunchError(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(std::string(what) + ": " +
                             cudaGetErrorString(err));
}

}  // namespace device_ops_cuda
}  // namespace terse

#endif  // TERSE_COMPRESSORS_DEVICE_DEVICE_OPS_CUDA_INTERNAL_H_
