// Runs everywhere. Without a CUDA device every CudaRuntime call must fail
// with a clear Status (never crash); with one, the gpu-tagged
// cuda_runtime_gpu_test covers the working path.
#include "device/cuda_runtime.h"

#include <vector>

#include "common/cuda_probe.h"
#include "device/cuda_kernels.h"
#include "device/cuda_pointer.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

TEST(CudaRuntimeTest, WithoutADeviceEveryCallFailsCleanly) {
  if (ProbeCuda().device_count > 0) GTEST_SKIP() << "a CUDA device answers";
  CudaRuntime cuda;
  EXPECT_EQ(cuda.kind(), Device::Kind::kCuda);
  EXPECT_FALSE(cuda.host_addressable());
  absl::StatusOr<void*> mem = cuda.Allocate(0, 1024);
  ASSERT_FALSE(mem.ok());
  EXPECT_EQ(mem.status().code(), absl::StatusCode::kFailedPrecondition)
      << mem.status();
  EXPECT_FALSE(cuda.CreateStream(0).ok());
  EXPECT_FALSE(cuda.CreateEvent(0).ok());
  EXPECT_FALSE(cuda.RecordOnStream(0, nullptr).ok());
  EXPECT_EQ(cuda.producer_event_stats().created, 0);
  std::vector<float> host(16);
  absl::Status check = cuda.CheckDeviceMemory(host.data(), 64, 0, "grad");
  EXPECT_FALSE(check.ok());
  EXPECT_NE(check.message().find("grad"), absl::string_view::npos) << check;
  // Zero bytes need no device.
  EXPECT_TRUE(CheckCudaDeviceSpan(nullptr, 0, 0, "empty").ok());
  EXPECT_EQ(CheckCudaDeviceSpan(nullptr, 8, 0, "null").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(cuda.Free(nullptr).ok());
}

}  // namespace
}  // namespace terse
