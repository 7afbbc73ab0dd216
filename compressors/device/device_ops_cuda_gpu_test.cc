// DeviceOps on a CUDA device (tag gpu): each operation equals the CPU
// kernel (bitwise; the squared norm within 1e-12 relative, PowerSGD's
// products and orthonormalisation within the tolerances of
// device_ops_testing.h); host pointers are refused with InvalidArgument
// naming the argument, and the context stays usable. Skipped, never passed,
// without a device.
#include <memory>
#include <vector>

#include "common/cuda_probe.h"
#include "compressors/device/cuda_device_ops.h"
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

TEST(CudaDeviceOpsGpuTest, HostPointersAreRefusedWithAStatus) {
  if (ProbeCuda().device_count == 0) {
    GTEST_SKIP() << "skipped: no device (no CUDA device: "
                 << ProbeCuda().why_none << ")";
  }
  CudaRuntime cuda;
  absl::StatusOr<std::unique_ptr<Stream>> stream = cuda.CreateStream(0);
  ASSERT_TRUE(stream.ok()) << stream.status();
  absl::StatusOr<DeviceBuffer> device = DeviceBuffer::Allocate(&cuda, 0, 64);
  ASSERT_TRUE(device.ok()) << device.status();
  std::vector<float> host(16, 1.0f);
  CudaDeviceOps ops(0);
  absl::Status st =
      ops.Add(stream->get(), host.data(), device->as<float>(), 16);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("Add: x"), absl::string_view::npos) << st;
  st = ops.OrthonormalizeColumns(stream->get(), host.data(), 4, 2);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("OrthonormalizeColumns: p"),
            absl::string_view::npos)
      << st;
  st = ops.SquaredNorm(stream->get(), device->as<float>(), 16,
                       reinterpret_cast<double*>(host.data()));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  // The context is intact: device work still runs.
  EXPECT_TRUE(
      ops.Add(stream->get(), device->as<float>(), device->as<float>(), 16)
          .ok());
  EXPECT_TRUE((*stream)->Synchronize().ok());
}

}  // namespace
}  // namespace terse
