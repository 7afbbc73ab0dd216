// DevicePowerSgd on the simulated device: once its buffers exist a step only
// enqueues (it returns while the stream is held, so it waited for nothing),
// and its warm starts, kept on the device, survive an export and an import
// into a fresh instance. Equality with the CPU compressor is
// device_compression_test's and engine_device_test's.
#include "engine/device_powersgd.h"

#include <chrono>
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "device/sim_runtime.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

// A 40 x 50 matrix, then 890 values of unknown shape (a zero-padded 30 x 30
// view).
constexpr int64_t kCount = 2890;

std::vector<Segment> Segments() {
  return {Segment{"w", 0, 2000, 0, {40, 50}}, Segment{"v", 2000, 890, 0, {}}};
}

CompressorOptions Options() {
  CompressorOptions options;
  options.powersgd_rank = 2;
  return options;
}

std::vector<float> Gradient(int step) {
  std::vector<float> g(kCount);
  for (int64_t i = 0; i < kCount; ++i) {
    g[i] = static_cast<float>((i * 7919 + step * 104729) % 2001 - 1000) / 997;
  }
  return g;
}

// One rank: the sums over ranks are the values themselves.
absl::Status NoAllreduce(float*, int64_t) { return absl::OkStatus(); }
absl::Status NothingWithLocal() { return absl::OkStatus(); }

class DevicePowerSgdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<SimStream>> stream =
        sim_.CreateSimStream(0, std::chrono::microseconds(100));
    ASSERT_TRUE(stream.ok()) << stream.status();
    stream_ = std::move(*stream);
    absl::StatusOr<std::unique_ptr<DeviceOps>> ops = MakeDeviceOps(&sim_, 0);
    ASSERT_TRUE(ops.ok()) << ops.status();
    ops_ = std::move(*ops);
    absl::StatusOr<DeviceBuffer> a =
        DeviceBuffer::Allocate(&sim_, 0, 4 * kCount);
    absl::StatusOr<DeviceBuffer> local =
        DeviceBuffer::Allocate(&sim_, 0, 4 * kCount);
    ASSERT_TRUE(a.ok() && local.ok());
    a_ = std::move(*a);
    local_ = std::move(*local);
  }

  // Uploads step `step`'s gradient into a_ and waits for it.
  absl::Status Load(int step) {
    gradient_ = Gradient(step);
    absl::Status st = stream_->Memcpy(a_.data(), gradient_.data(), 4 * kCount);
    return st.ok() ? stream_->Synchronize() : st;
  }
  absl::StatusOr<int64_t> Step(DevicePowerSgd& powersgd, int step) {
    return powersgd.Step(ops_.get(), &sim_, 0, stream_.get(), a_.as<float>(),
                         local_.as<float>(), step, NoAllreduce,
                         NothingWithLocal);
  }
  // Loads, steps and returns the sum (a_) after the stream ran.
  absl::StatusOr<std::vector<float>> Run(DevicePowerSgd& powersgd, int step) {
    absl::Status st = Load(step);
    if (!st.ok()) return st;
    absl::StatusOr<int64_t> bytes = Step(powersgd, step);
    if (!bytes.ok()) return bytes.status();
    st = stream_->Synchronize();
    if (!st.ok()) return st;
    const float* sum = a_.as<float>();
    return std::vector<float>(sum, sum + kCount);
  }

  SimRuntime sim_;
  std::unique_ptr<SimStream> stream_;
  std::unique_ptr<DeviceOps> ops_;
  DeviceBuffer a_, local_;
  std::vector<float> gradient_;
};

void ExpectSameBits(const std::vector<float>& got,
                    const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << what;
}

TEST_F(DevicePowerSgdTest, AStepWaitsForNothing) {
  DevicePowerSgd reference(Options(), 7, "bucket:w,v", Segments(), kCount);
  absl::StatusOr<std::vector<float>> want0 = Run(reference, 0);
  absl::StatusOr<std::vector<float>> want1 = Run(reference, 1);
  ASSERT_TRUE(want0.ok() && want1.ok());

  DevicePowerSgd powersgd(Options(), 7, "bucket:w,v", Segments(), kCount);
  absl::StatusOr<std::vector<float>> got0 = Run(powersgd, 0);
  ASSERT_TRUE(got0.ok()) << got0.status();
  ExpectSameBits(*got0, *want0, "step 0");
  // Step 1 on a held stream: orthonormalisation and warm starts included,
  // the step must come back without the stream having run anything.
  ASSERT_TRUE(Load(1).ok());
  stream_->Hold();
  std::future<absl::StatusOr<int64_t>> step =
      std::async(std::launch::async, [&] { return Step(powersgd, 1); });
  const bool returned =
      step.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  EXPECT_TRUE(returned) << "the step waited for the (held) stream";
  if (returned) {
    EXPECT_GT(stream_->pending(), 0);
    EXPECT_EQ(std::memcmp(a_.data(), gradient_.data(), 4 * kCount), 0)
        << "ran before the stream was released";
  }
  stream_->Release();
  absl::StatusOr<int64_t> bytes = step.get();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, 4 * (40 * 2 + 50 * 2 + 30 * 2 + 30 * 2));
  ASSERT_TRUE(stream_->Synchronize().ok());
  const float* sum = a_.as<float>();
  ExpectSameBits(std::vector<float>(sum, sum + kCount), *want1, "step 1");
}

TEST_F(DevicePowerSgdTest, WarmStartsSurviveExportAndImport) {
  DevicePowerSgd saving(Options(), 7, "bucket:w,v", Segments(), kCount);
  ASSERT_TRUE(Run(saving, 0).ok());
  ASSERT_TRUE(Run(saving, 1).ok());
  absl::StatusOr<std::unique_ptr<Stream>> copy = sim_.CreateStream(0);
  ASSERT_TRUE(copy.ok());
  absl::StatusOr<std::map<std::string, std::vector<float>>> warm =
      saving.ExportWarm(copy->get());
  ASSERT_TRUE(warm.ok()) << warm.status();
  ASSERT_EQ(warm->size(), 2u);
  for (const auto& [key, q] : *warm) {
    EXPECT_EQ(q.size(), key.find("\x1fw\x1f") != std::string::npos ? 100u : 60u)
        << key;
  }
  absl::StatusOr<std::vector<float>> want = Run(saving, 2);
  ASSERT_TRUE(want.ok());

  // A fresh instance with the exported starts takes the same step 2; it
  // exports them unchanged before its first step.
  DevicePowerSgd loaded(Options(), 7, "bucket:w,v", Segments(), kCount);
  loaded.ImportWarm(*warm);
  absl::StatusOr<std::map<std::string, std::vector<float>>> before =
      loaded.ExportWarm(nullptr);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(*before, *warm);
  absl::StatusOr<std::vector<float>> got = Run(loaded, 2);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectSameBits(*got, *want, "step 2 after the import");
  // Without them step 2 differs (the warm starts matter here).
  DevicePowerSgd cold(Options(), 7, "bucket:w,v", Segments(), kCount);
  absl::StatusOr<std::vector<float>> cold2 = Run(cold, 2);
  ASSERT_TRUE(cold2.ok());
  EXPECT_NE(std::memcmp(cold2->data(), want->data(), 4 * kCount), 0);
}

}  // namespace
}  // namespace terse
