#include "common/cuda_probe.h"

#include <nccl.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/cuda_probe_kernel.h"

namespace terse {

CudaInfo ProbeCuda() {
  CudaInfo info;
  int count = 0;
  int err = cuda_probe_internal::DeviceCount(&count);
  if (err != 0) {
    info.why_none = cuda_probe_internal::ErrorString(err);
    count = 0;
  } else if (count == 0) {
    info.why_none = "the runtime lists no device";
  }
  info.device_count = count;
  cuda_probe_internal::RuntimeVersion(&info.runtime_version);
  ncclGetVersion(&info.nccl_version);
  return info;
}

absl::Status CudaSmokeAxpy(float a, const float* x, float* y, int n) {
  CudaInfo info = ProbeCuda();
  if (info.device_count == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA device: ", info.why_none));
  }
  int err = cuda_probe_internal::Axpy(a, x, y, n);
  if (err != 0) {
    return absl::InternalError(absl::StrCat(
        "CUDA axpy failed: ", cuda_probe_internal::ErrorString(err)));
  }
  return absl::OkStatus();
}

}  // namespace terse
