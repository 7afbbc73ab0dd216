#include "bindings/python/cuda_stream.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"

namespace terse {

absl::Status SynchronizeStream(int device, uintptr_t stream) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "a CUDA tensor was passed but no CUDA device answers (",
        err == cudaSuccess ? "0 devices" : cudaGetErrorString(err), ")"));
  }
  if (device < 0 || device >= count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CUDA device ", device, " does not exist (", count, " devices)"));
  }
  int previous = 0;
  err = cudaGetDevice(&previous);
  if (err == cudaSuccess && previous != device) err = cudaSetDevice(device);
  if (err == cudaSuccess) {
    err = cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream));
  }
  if (previous != device) cudaSetDevice(previous);
  if (err != cudaSuccess) {
    return absl::InternalError(absl::StrCat("synchronising CUDA stream ",
                                            stream, " of device ", device, ": ",
                                            cudaGetErrorString(err)));
  }
  return absl::OkStatus();
}

}  // namespace terse
