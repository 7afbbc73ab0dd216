#include "device/cuda_pointer.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"

namespace terse {
namespace {

const char* MemoryTypeName(cudaMemoryType type) {
  switch (type) {
    case cudaMemoryTypeUnregistered:
      return "unregistered host memory";
    case cudaMemoryTypeHost:
      return "pinned host memory";
    case cudaMemoryTypeDevice:
      return "device memory";
    case cudaMemoryTypeManaged:
      return "managed memory";
  }
  return "memory of an unknown type";
}

}  // namespace

absl::Status CheckCudaDeviceSpan(const void* ptr, int64_t bytes, int device,
                                 absl::string_view what) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": negative size ", bytes));
  }
  if (bytes == 0) return absl::OkStatus();
  if (ptr == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": null pointer with ", bytes, " bytes"));
  }
  cudaPointerAttributes attributes{};
  const cudaError_t err = cudaPointerGetAttributes(&attributes, ptr);
  if (err != cudaSuccess) {
    cudaGetLastError();  // Not sticky: clear it for the next call.
    if (err == cudaErrorInvalidValue) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " is not CUDA device memory (",
                       cudaGetErrorString(err), ")"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": the CUDA runtime cannot check the pointer: ",
                     cudaGetErrorString(err)));
  }
  if (attributes.type != cudaMemoryTypeDevice &&
      attributes.type != cudaMemoryTypeManaged) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " is ", MemoryTypeName(attributes.type),
        ", not CUDA device memory"));
  }
  if (device >= 0 && attributes.type == cudaMemoryTypeDevice &&
      attributes.device != device) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is memory of cuda:", attributes.device,
                     ", not cuda:", device));
  }
  return absl::OkStatus();
}

}  // namespace terse
