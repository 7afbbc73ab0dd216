// CUDA kernels of the device runtime: element-wise scaling for the engine's
// fuse and unfuse steps (prescale, postscale, average) on device memory.
//
// Enqueued on `stream` (a cudaStream_t passed as void*, so that callers
// need no CUDA headers); returns the launch error, if any, as a Status.
// Pointers must be device memory (the caller checks; device/cuda_pointer.h).
#ifndef TERSE_DEVICE_CUDA_KERNELS_H_
#define TERSE_DEVICE_CUDA_KERNELS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "common/data_type.h"

namespace terse {

// dst[i] = src[i] * factor on CUDA device `device` (made current first),
// as engine/scale.h's ScaledCopy does on the host (f16/bf16 in fp32, rounded
// once; integers in double, rounded to nearest). InvalidArgument for kBool
// with a factor other than 1.
absl::Status CudaScaledCopy(int device, void* stream, void* dst,
                            const void* src, int64_t count, DataType dtype,
                            double factor);

}  // namespace terse

#endif  // TERSE_DEVICE_CUDA_KERNELS_H_
