#include "compressors/device/device_ops.h"

#include "absl/strings/str_cat.h"
#include "compressors/device/cuda_device_ops.h"
#include "compressors/device/sim_device_ops.h"

namespace terse {

absl::StatusOr<std::unique_ptr<DeviceOps>> MakeDeviceOps(DeviceRuntime* runtime,
                                                         int ordinal) {
  if (runtime == nullptr) {
    return absl::InvalidArgumentError("MakeDeviceOps: null runtime");
  }
  switch (runtime->kind()) {
    case Device::Kind::kSim:
      return std::unique_ptr<DeviceOps>(new SimDeviceOps(runtime, ordinal));
    case Device::Kind::kCuda:
      return std::unique_ptr<DeviceOps>(new CudaDeviceOps(ordinal));
    default:
      return absl::UnimplementedError(
          absl::StrCat("no device compression kernels for ",
                       Device::KindName(runtime->kind()), " devices"));
  }
}

}  // namespace terse
