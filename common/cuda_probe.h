// Probes of the CUDA runtime and NCCL that every build links.
//
// On a machine without a GPU (or without a driver) the CUDA runtime answers
// its first call with an error such as cudaErrorInsufficientDriver; these
// functions report that as "no device" (a count of 0), never as a crash.
// Thread-safe.
#ifndef TERSE_COMMON_CUDA_PROBE_H_
#define TERSE_COMMON_CUDA_PROBE_H_

#include <string>

#include "absl/status/statusor.h"

namespace terse {

struct CudaInfo {
  int device_count = 0;        // 0 when no device answers.
  std::string why_none;        // The runtime's reason when device_count == 0.
  int runtime_version = 0;     // e.g. 13000 for CUDA 13.0.
  int nccl_version = 0;        // e.g. 22800 for NCCL 2.28.0.
};

CudaInfo ProbeCuda();

// Runs y[i] += a * x[i] on device 0 (copying in and out) and returns the
// result: the smoke test that the nvcc-built kernel runs. FailedPrecondition
// when no device answers.
absl::Status CudaSmokeAxpy(float a, const float* x, float* y, int n);

}  // namespace terse

#endif  // TERSE_COMMON_CUDA_PROBE_H_
