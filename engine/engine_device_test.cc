// The engine's device path on the simulated device, ranks as threads over
// loopback (device_scenarios.h); also under TSan (//tests:tsan).
#include <chrono>
#include <memory>
#include <vector>

#include "common/status.h"
#include "device/sim_runtime.h"
#include "engine/bucket_assigner.h"
#include "engine/device_scenarios.h"
#include "gtest/gtest.h"

namespace terse {
namespace testing {
namespace {

// One simulated device runtime for the process, as a GPU driver is.
struct Devices {
  Devices() { runtimes.Register(&sim).IgnoreError(); }
  // The engine's streams run each piece of work 2 ms late.
  SimRuntime sim{SimOptions{std::chrono::milliseconds(2), 16}};
  DeviceRuntimes runtimes;
};

Devices& TheDevices() {
  static Devices* devices = new Devices();
  return *devices;
}

class EngineDeviceTest : public ::testing::TestWithParam<Scenario> {};

TEST_P(EngineDeviceTest, TwoRanks) {
  absl::Status status = RunOnLoopback(2, GetParam());
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(TheDevices().sim.live_allocations(), 0);
}

TEST_P(EngineDeviceTest, ThreeRanks) {
  absl::Status status = RunOnLoopback(3, GetParam());
  EXPECT_TRUE(status.ok()) << status;
}

INSTANTIATE_TEST_SUITE_P(
    Sim, EngineDeviceTest,
    ::testing::ValuesIn(DeviceScenarios(&TheDevices().sim,
                                        &TheDevices().runtimes)),
    [](const ::testing::TestParamInfo<Scenario>& info) {
      return info.param.name;
    });

// Buckets never mix device kinds: two responses that differ only in the
// device kind open two buckets.
TEST(DeviceBucketKeyTest, DeviceKindSeparatesBuckets) {
  BucketAssigner assigner(1 << 20, 0);
  proto::Response cpu;
  cpu.set_kind(proto::Response::EXECUTE);
  cpu.set_op(proto::ALLREDUCE);
  cpu.add_names("a");
  cpu.set_dtype(static_cast<int32_t>(DataType::kFloat32));
  cpu.add_shape(4);
  cpu.set_device(-1);
  cpu.set_prescale(1.0);
  cpu.set_postscale(1.0);
  proto::Response sim = cpu;
  sim.set_names(0, "b");
  sim.set_device(0);
  sim.set_device_kind(static_cast<int32_t>(Device::Kind::kSim));
  proto::Response cuda = sim;
  cuda.set_names(0, "c");
  cuda.set_device_kind(static_cast<int32_t>(Device::Kind::kCuda));
  assigner.OnReady({&cpu, &sim, &cuda});
  EXPECT_EQ(assigner.num_buckets(), 3);
  EXPECT_NE(assigner.BucketOf("a"), assigner.BucketOf("b"));
  EXPECT_NE(assigner.BucketOf("b"), assigner.BucketOf("c"));
  EXPECT_EQ(assigner.bucket(assigner.BucketOf("b")).device_kind,
            static_cast<int32_t>(Device::Kind::kSim));
}

}  // namespace
}  // namespace testing
}  // namespace terse
