// Pointer checks for CUDA entry points: is a span device memory?
//
// Every function that hands a caller's pointer to a CUDA kernel or library
// checks it first, so a host pointer or one on another device becomes an
// InvalidArgument Status instead of an illegal-address fault that poisons
// the CUDA context. Uses cudaPointerGetAttributes (device or managed memory
// passes); clears the runtime's sticky last error on failure. Thread-safe.
#ifndef TERSE_DEVICE_CUDA_POINTER_H_
#define TERSE_DEVICE_CUDA_POINTER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace terse {

// OK when `ptr` is CUDA device (or managed) memory on `device` (any device
// when device < 0), or when bytes == 0. InvalidArgument naming `what` and
// the memory type otherwise; FailedPrecondition when the runtime cannot
// answer (no driver or device).
absl::Status CheckCudaDeviceSpan(const void* ptr, int64_t bytes, int device,
                                 absl::string_view what);

}  // namespace terse

#endif  // TERSE_DEVICE_CUDA_POINTER_H_
