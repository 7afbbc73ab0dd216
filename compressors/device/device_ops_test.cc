// DeviceOps on the simulated device: each operation equals the CPU kernel
// bitwise; results exist only after a wait (the stream runs late on
// purpose); host pointers are refused.
#include "compressors/device/device_ops.h"

#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "compressors/device/device_ops_testing.h"
#include "device/sim_runtime.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

TEST(SimDeviceOpsTest, EachOperationEqualsTheCpuKernel) {
  SimRuntime sim(SimOptions{std::chrono::microseconds(200), 2});
  absl::Status status = testing::CheckDeviceOpsAgainstCpu(&sim, 1, true);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(sim.live_allocations(), 0);
}

// The operations only enqueue: until the stream has run them the output is
// untouched, so a reader that skips the wait sees stale data.
TEST(SimDeviceOpsTest, ResultsNeedAWait) {
  SimRuntime sim;
  absl::StatusOr<std::unique_ptr<SimStream>> stream =
      sim.CreateSimStream(0, std::chrono::microseconds(100));
  ASSERT_TRUE(stream.ok()) << stream.status();
  absl::StatusOr<std::unique_ptr<DeviceOps>> ops = MakeDeviceOps(&sim, 0);
  ASSERT_TRUE(ops.ok()) << ops.status();
  const int64_t n = 64;
  absl::StatusOr<DeviceBuffer> x = DeviceBuffer::Allocate(&sim, 0, n * 4);
  absl::StatusOr<DeviceBuffer> y = DeviceBuffer::Allocate(&sim, 0, n * 4);
  ASSERT_TRUE(x.ok() && y.ok());
  for (int64_t i = 0; i < n; ++i) {
    x->as<float>()[i] = 1.0f;
    y->as<float>()[i] = 2.0f;
  }
  (*stream)->Hold();
  ASSERT_TRUE(
      (*ops)->Add(stream->get(), x->as<float>(), y->as<float>(), n).ok());
  EXPECT_EQ(y->as<float>()[0], 2.0f) << "ran before the stream was released";
  (*stream)->Release();
  ASSERT_TRUE((*stream)->Synchronize().ok());
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(y->as<float>()[i], 3.0f);
}

TEST(SimDeviceOpsTest, HostPointersAreInvalidArgument) {
  SimRuntime sim;
  absl::StatusOr<std::unique_ptr<Stream>> stream = sim.CreateStream(0);
  ASSERT_TRUE(stream.ok());
  absl::StatusOr<std::unique_ptr<DeviceOps>> ops = MakeDeviceOps(&sim, 0);
  ASSERT_TRUE(ops.ok());
  std::vector<float> host(8, 1.0f);
  absl::StatusOr<DeviceBuffer> y = DeviceBuffer::Allocate(&sim, 0, 32);
  ASSERT_TRUE(y.ok());
  absl::Status st = (*ops)->Add(stream->get(), host.data(), y->as<float>(), 8);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("Add: x"), std::string::npos) << st;
  st = (*ops)->OrthonormalizeColumns(stream->get(), host.data(), 4, 2);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("OrthonormalizeColumns: p"), std::string::npos)
      << st;
  // Memory of another simulated device.
  absl::StatusOr<DeviceBuffer> other = DeviceBuffer::Allocate(&sim, 1, 32);
  ASSERT_TRUE(other.ok());
  st = (*ops)->SquaredNorm(stream->get(), other->as<float>(), 8,
                           reinterpret_cast<double*>(y->data()));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  // A type that is not 16-bit.
  st = (*ops)->CastToHalf(stream->get(), y->as<float>(),
                          reinterpret_cast<uint16_t*>(y->data()), 1,
                          DataType::kFloat32);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  ASSERT_TRUE((*stream)->Synchronize().ok());
}

}  // namespace
}  // namespace terse
