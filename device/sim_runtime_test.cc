#include "device/sim_runtime.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

using ::testing::HasSubstr;

TEST(SimRuntimeTest, TracksItsAllocationsAndChecksSpans) {
  SimRuntime sim;
  absl::StatusOr<void*> a = sim.Allocate(1, 256);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(sim.live_allocations(), 1);
  EXPECT_TRUE(sim.CheckDeviceMemory(*a, 256, 1, "grad").ok());
  EXPECT_TRUE(
      sim.CheckDeviceMemory(static_cast<char*>(*a) + 100, 156, 1, "g").ok());

  std::vector<float> host(64);
  absl::Status h = sim.CheckDeviceMemory(host.data(), 256, 1, "tensor 'w'");
  EXPECT_EQ(h.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(h.message(), HasSubstr("tensor 'w' is not simulated-device"));

  absl::Status other = sim.CheckDeviceMemory(*a, 256, 0, "x");
  EXPECT_THAT(other.message(), HasSubstr("memory of sim:1, not sim:0"));
  absl::Status past = sim.CheckDeviceMemory(*a, 257, 1, "y");
  EXPECT_THAT(past.message(), HasSubstr("run past the end"));

  // Staging memory is host memory, not device memory.
  absl::StatusOr<void*> staging = sim.AllocateHost(64);
  ASSERT_TRUE(staging.ok());
  EXPECT_FALSE(sim.CheckDeviceMemory(*staging, 64, 1, "s").ok());
  EXPECT_TRUE(sim.FreeHost(*staging).ok());

  EXPECT_TRUE(sim.Free(*a).ok());
  EXPECT_EQ(sim.live_allocations(), 0);
  EXPECT_FALSE(sim.CheckDeviceMemory(*a, 4, 1, "freed").ok());
  EXPECT_EQ(sim.Free(host.data()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(sim.Allocate(16, 4).ok());  // Ordinal outside [0, 16).
  EXPECT_FALSE(sim.Allocate(0, -1).ok());
}

TEST(SimRuntimeTest, DeviceBufferFreesOnDestruction) {
  SimRuntime sim;
  {
    absl::StatusOr<DeviceBuffer> b = DeviceBuffer::Allocate(&sim, 0, 100);
    ASSERT_TRUE(b.ok());
    DeviceBuffer moved = std::move(*b);
    EXPECT_EQ(sim.live_allocations(), 1);
    EXPECT_EQ(moved.bytes(), 100);
  }
  EXPECT_EQ(sim.live_allocations(), 0);
}

// The deliberate delay: work enqueued on a stream has not run when the
// enqueuing call returns, so a reader that skips the wait sees stale data;
// after the wait it sees the result. Hold() makes it certain.
TEST(SimRuntimeTest, AMissingWaitSeesStaleDataAndTheWaitFixesIt) {
  SimRuntime sim;
  absl::StatusOr<std::unique_ptr<SimStream>> stream =
      sim.CreateSimStream(0, std::chrono::milliseconds(1));
  ASSERT_TRUE(stream.ok());
  absl::StatusOr<DeviceBuffer> dev = DeviceBuffer::Allocate(&sim, 0, 4000);
  ASSERT_TRUE(dev.ok());
  std::vector<float> src(1000);
  std::iota(src.begin(), src.end(), 1.0f);
  std::memset(dev->data(), 0, 4000);

  (*stream)->Hold();
  ASSERT_TRUE((*stream)->Memcpy(dev->data(), src.data(), 4000).ok());
  absl::StatusOr<std::unique_ptr<Event>> done = sim.CreateEvent(0);
  ASSERT_TRUE(done.ok());
  ASSERT_TRUE((*stream)->Record(done->get()).ok());
  EXPECT_EQ(*(*done)->Query(), false);
  EXPECT_EQ(dev->as<float>()[999], 0.0f);  // Not run: the stream is held.
  EXPECT_EQ((*stream)->pending(), 2);
  (*stream)->Release();
  ASSERT_TRUE((*done)->HostWait().ok());
  EXPECT_EQ(*(*done)->Query(), true);
  EXPECT_EQ(dev->as<float>()[999], 1000.0f);
}

// Without Hold: the per-work delay alone makes an unsynchronised read stale.
TEST(SimRuntimeTest, DelayMakesWorkLate) {
  SimRuntime sim;
  absl::StatusOr<std::unique_ptr<SimStream>> stream =
      sim.CreateSimStream(0, std::chrono::seconds(1));
  ASSERT_TRUE(stream.ok());
  absl::StatusOr<DeviceBuffer> dev = DeviceBuffer::Allocate(&sim, 0, 4);
  ASSERT_TRUE(dev.ok());
  std::atomic<bool> ran{false};
  ASSERT_TRUE((*stream)->LaunchHost([&ran] { ran = true; }).ok());
  EXPECT_FALSE(ran.load());  // A second late by design.
  ASSERT_TRUE((*stream)->Synchronize().ok());
  EXPECT_TRUE(ran.load());
}

TEST(SimRuntimeTest, StreamWaitEventOrdersAcrossStreamsWithoutBlockingHost) {
  SimRuntime sim;
  absl::StatusOr<std::unique_ptr<SimStream>> producer =
      sim.CreateSimStream(0, std::chrono::microseconds(100));
  absl::StatusOr<std::unique_ptr<SimStream>> consumer =
      sim.CreateSimStream(0, std::chrono::microseconds(0));
  ASSERT_TRUE(producer.ok() && consumer.ok());
  absl::StatusOr<DeviceBuffer> a = DeviceBuffer::Allocate(&sim, 0, 400);
  absl::StatusOr<DeviceBuffer> b = DeviceBuffer::Allocate(&sim, 0, 400);
  ASSERT_TRUE(a.ok() && b.ok());
  std::memset(a->data(), 0, 400);
  std::memset(b->data(), 0, 400);
  std::vector<int32_t> src(100, 7);
  absl::StatusOr<std::unique_ptr<Event>> ready = sim.CreateEvent(0);
  ASSERT_TRUE(ready.ok());

  (*producer)->Hold();
  ASSERT_TRUE((*producer)->Memcpy(a->data(), src.data(), 400).ok());
  ASSERT_TRUE((*producer)->Record(ready->get()).ok());
  // Returns at once although the producer is held: only the consumer's
  // worker waits.
  ASSERT_TRUE((*consumer)->WaitEvent(ready->get()).ok());
  ASSERT_TRUE((*consumer)->Memcpy(b->data(), a->data(), 400).ok());
  ready->reset();  // The event may go away while work refers to it.
  EXPECT_EQ(b->as<int32_t>()[50], 0);
  (*producer)->Release();
  ASSERT_TRUE((*consumer)->Synchronize().ok());
  EXPECT_EQ(b->as<int32_t>()[50], 7);
  EXPECT_EQ(b->as<int32_t>()[99], 7);
}

TEST(SimRuntimeTest, EventRules) {
  SimRuntime sim;
  absl::StatusOr<std::unique_ptr<Event>> never = sim.CreateEvent(0);
  ASSERT_TRUE(never.ok());
  EXPECT_EQ(*(*never)->Query(), true);  // Never recorded counts as done.
  EXPECT_TRUE((*never)->HostWait().ok());
  absl::StatusOr<std::unique_ptr<Stream>> s = sim.CreateStream(0);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->Record(nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*s)->WaitEvent(nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE((*s)->Memcpy(nullptr, nullptr, 4).ok());
  EXPECT_TRUE((*s)->Memcpy(nullptr, nullptr, 0).ok());
  EXPECT_FALSE((*s)->LaunchHost(nullptr).ok());
  // Re-recording moves the event to the newer point.
  std::atomic<int> order{0};
  int first = -1, second = -1;
  ASSERT_TRUE((*s)->LaunchHost([&] { first = order++; }).ok());
  ASSERT_TRUE((*s)->Record(never->get()).ok());
  ASSERT_TRUE((*s)->LaunchHost([&] { second = order++; }).ok());
  ASSERT_TRUE((*s)->Record(never->get()).ok());
  ASSERT_TRUE((*never)->HostWait().ok());
  EXPECT_EQ(first, 0);
  EXPECT_EQ(second, 1);
}

TEST(SimRuntimeTest, DestroyingAStreamRunsWhatIsQueued) {
  SimRuntime sim;
  std::atomic<int> ran{0};
  {
    absl::StatusOr<std::unique_ptr<Stream>> s = sim.CreateStream(0);
    ASSERT_TRUE(s.ok());
    for (int i = 0; i < 5; ++i) {
      ASSERT_TRUE((*s)->LaunchHost([&ran] { ++ran; }).ok());
    }
  }
  EXPECT_EQ(ran.load(), 5);
}

TEST(DeviceRuntimesTest, ChoosesByKind) {
  SimRuntime sim;
  DeviceRuntimes runtimes;
  EXPECT_EQ(runtimes.Get(Device::Kind::kSim).status().code(),
            absl::StatusCode::kUnimplemented);
  ASSERT_TRUE(runtimes.Register(&sim).ok());
  EXPECT_EQ(runtimes.Register(&sim).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(*runtimes.Get(Device::Kind::kSim), &sim);
  EXPECT_THAT(runtimes.Get(Device::Kind::kCuda).status().message(),
              HasSubstr("cuda"));
  EXPECT_FALSE(runtimes.Register(nullptr).ok());
}

}  // namespace
}  // namespace terse
