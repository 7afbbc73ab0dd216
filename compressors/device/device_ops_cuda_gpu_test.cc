// DeviceOps on a CUDA device (tag gpu): each operation equals the CPU
// kernel (bitwise; the squared norm within 1e-12 relative). Skipped, never
// passed, without a device.
#include "common/cuda_probe.h"
#include "compressors/device/device_ops_testing.h"
#include "device/cuda_runtime.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

TEST(CudaDeviceOpsGpuTest, EachOperationEqualsTheCpuKernel) {
  if (ProbeCuda().device_count == 0) {
    GTEST_SKIP() << "skipped: no device (no CUDA device: "
                 << ProbeCuda().why_none << ")";
  }
  CudaRuntime cuda;
  absl::Status status = testing::CheckDeviceOpsAgainstCpu(&cuda, 0, false);
  EXPECT_TRUE(status.ok()) << status;
}

}  // namespace
}  // namespace terse
