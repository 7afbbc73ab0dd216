// DeviceCompression on the simulated device, ranks as threads over
// loopback: each compressor equals the CompressedReducer (the CPU path) on
// the same gradients bit for bit over several steps (residuals carried on
// the device); error feedback conserves the gradient (fp64 oracle); the
// residuals live in device memory. The simulated streams run late on
// purpose, so a missing wait fails these tests.
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compressors/payload.h"
#include "device/sim_runtime.h"
#include "engine/device_compression_testing.h"
#include "gtest/gtest.h"

namespace terse {
namespace testing {
namespace {

class DeviceCompressionTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DeviceCompressionTest, EqualsTheCpuPathBitForBit) {
  SimRuntime sim(SimOptions{std::chrono::microseconds(300), 4});
  const std::string compression = GetParam();
  for (int size : {2, 3}) {
    Outcome run;
    absl::Status st = RunDeviceAndCpu(size, compression, "50", 3, &run, &sim,
                                      [](int rank) { return rank; });
    ASSERT_TRUE(st.ok()) << st;
    st = ExpectBitwiseEqual(run, compression);
    EXPECT_TRUE(st.ok()) << st;
    for (int r = 0; r < size; ++r) {
      EXPECT_EQ(run.device_report[r].compressor, compression);
    }
  }
  EXPECT_EQ(sim.live_allocations(), 0);
}

INSTANTIATE_TEST_SUITE_P(Compressors, DeviceCompressionTest,
                         ::testing::Values("fp16", "bf16", "topk", "dgc",
                                           "redsync", "threshold", "powersgd",
                                           "randomk", "efsignsgd", "qsgd"),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           return i.param;
                         });

// Sparse messages over the device communicator (built, gathered, checked
// and decoded on the device; TERSE_GPU_OPERATIONS=nccl's path) equal the
// CPU path bit for bit, as through the host.
TEST(DeviceCompressionGatherTest, SparseOverTheDeviceCommunicatorEqualsCpu) {
  SimRuntime sim(SimOptions{std::chrono::microseconds(300), 4});
  for (const std::string compression :
       {"topk", "dgc", "redsync", "threshold"}) {
    for (int size : {2, 3}) {
      Outcome run;
      absl::Status st = RunDeviceAndCpu(
          size, compression, "50", 3, &run, &sim, [](int rank) { return rank; },
          {},
          /*device_gather=*/true);
      ASSERT_TRUE(st.ok()) << st;
      st = ExpectBitwiseEqual(run, compression + " over the device");
      EXPECT_TRUE(st.ok()) << st;
      EXPECT_EQ(run.device_report[0].compressor, compression);
    }
  }
  EXPECT_EQ(sim.live_allocations(), 0);
}

// A peer's message that does not decode (an index past the bucket, a
// header that is not the sparsifier's) fails every rank naming the sender,
// checked on the device before any scatter uses it.
TEST(DeviceCompressionGatherTest, CorruptPeerMessageNamesTheRank) {
  SimRuntime sim(SimOptions{std::chrono::microseconds(300), 4});
  const int64_t n = DeviceCompressionBucket().count;
  for (const bool header : {false, true}) {
    Outcome run;
    absl::Status st = RunDeviceAndCpu(
        3, "topk", "50", 2, &run, &sim, [](int rank) { return rank; }, {},
        /*device_gather=*/true,
        [&](int rank, void* gathered, const std::vector<int64_t>& bytes) {
          (void)rank;
          // Rank 1's slot follows rank 0's; its indices after the header.
          uint8_t* theirs = static_cast<uint8_t*>(gathered) + bytes[0];
          if (header) {
            theirs[5] = static_cast<uint8_t>(CompressorId::kDgc);
          } else {
            uint32_t past = static_cast<uint32_t>(n);
            std::memcpy(theirs + 40 + 4, &past, 4);
          }
        });
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find("payload from rank 1"), std::string::npos)
        << st;
  }
}

// The dense-coded compressors' payloads (EF-signSGD, QSGD) over the device
// communicator equal the CPU path bit for bit, and travel there: each step
// the device path sends nothing through the control (host) communicator
// and one message (the payload and the statistics trailer, in a slot
// padded to 8 bytes) through the device's. Staged, the same message goes
// through the control communicator and nothing through the device's.
TEST(DeviceCompressionGatherTest,
     DenseCodedOverTheDeviceCommunicatorEqualsCpu) {
  SimRuntime sim(SimOptions{std::chrono::microseconds(300), 4});
  const int steps = 3;
  for (const std::string compression : {"efsignsgd", "qsgd"}) {
    for (const bool device_gather : {true, false}) {
      for (int size : {2, 3}) {
        const std::string what =
            absl::StrCat(compression, ", ", size, " ranks",
                         device_gather ? ", over the device" : ", staged");
        Outcome run;
        absl::Status st = RunDeviceAndCpu(
            size, compression, "50", steps, &run, &sim,
            [](int rank) { return rank; }, {}, device_gather);
        ASSERT_TRUE(st.ok()) << what << ": " << st;
        st = ExpectBitwiseEqual(run, what);
        EXPECT_TRUE(st.ok()) << st;
        const int64_t payload = run.device_report[0].bytes_sent;
        const int64_t message = payload + 9 * 8;  // The trailer's 9 doubles.
        for (int r = 0; r < size; ++r) {
          EXPECT_EQ(run.device_report[r].compressor, compression) << what;
          for (int step = 0; step < steps; ++step) {
            const std::string at =
                absl::StrCat(what, " step ", step, " rank ", r);
            EXPECT_EQ(run.control_bytes[step][r], device_gather ? 0 : message)
                << at;
            EXPECT_EQ(run.device_bytes[step][r],
                      device_gather ? (message + 7) / 8 * 8 : 0)
                << at;
          }
        }
      }
    }
  }
  EXPECT_EQ(sim.live_allocations(), 0);
}

// A peer's dense-coded message that does not decode (a header that is not
// the compressor's, a body size or parameters that are not this rank's:
// EF-signSGD's block size, QSGD's levels and bucket size) fails every rank
// with InvalidArgument naming the bucket and the sender, before any decode
// reads it. (QSGD's codes are checked on the device too, but the engine's
// levels s = 2^b - 1 fill their b-bit codes: no code can exceed s, so that
// check never fails here; the cuda_emu test covers CheckQsgdCodes.)
TEST(DeviceCompressionGatherTest, CorruptDenseCodedPeerNamesTheRank) {
  SimRuntime sim(SimOptions{std::chrono::microseconds(300), 4});
  struct Case {
    std::string compression;
    int offset;  // Of the byte changed in rank 1's message.
    uint8_t value;
    std::string why;
  };
  const std::vector<Case> cases = {
      {"efsignsgd", 5, static_cast<uint8_t>(CompressorId::kQsgd),
       "header or parameters differ"},
      {"efsignsgd", 32, 0, "body of"},  // The body bytes' low byte.
      {"efsignsgd", 40, 7, "header or parameters differ"},  // The block.
      {"qsgd", 5, static_cast<uint8_t>(CompressorId::kEfSignSgd),
       "header or parameters differ"},
      {"qsgd", 32, 0, "body of"},
      {"qsgd", 40, 3, "header or parameters differ"},  // The levels (1).
      {"qsgd", 44, 7, "header or parameters differ"},  // The bucket size.
  };
  for (const Case& c : cases) {
    Outcome run;
    absl::Status st = RunDeviceAndCpu(
        3, c.compression, "50", 2, &run, &sim, [](int rank) { return rank; },
        {}, /*device_gather=*/true,
        [&](int rank, void* gathered, const std::vector<int64_t>& bytes) {
          (void)rank;
          static_cast<uint8_t*>(gathered)[bytes[0] + c.offset] = c.value;
        });
    ASSERT_FALSE(st.ok()) << c.compression << " byte " << c.offset;
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find("bucket 3: the " + c.compression +
                                " payload from rank 1 does not decode"),
              std::string::npos)
        << st;
    EXPECT_NE(st.message().find(c.why), std::string::npos) << st;
  }
  EXPECT_EQ(sim.live_allocations(), 0);
}

// TERSE_MOMENTUM_CORRECTION on device buckets (velocities in device
// memory, u = m u + g before the residual, sent entries masked out of the
// residuals and velocities after a sparsifier) equals the CPU path bit for
// bit, dense and with every compressor, for a bucket whose first tensor is
// a gradient ("grad.": it carries a velocity) and whose second is not.
TEST(DeviceMomentumTest, EqualsTheCpuPathBitForBit) {
  SimRuntime sim(SimOptions{std::chrono::microseconds(300), 4});
  Bucket bucket = DeviceCompressionBucket();
  bucket.members[0].name = "grad.layer0.weight";
  for (const std::string compression :
       {"none", "fp16", "topk", "dgc", "redsync", "threshold", "randomk",
        "powersgd", "efsignsgd", "qsgd", "accordion"}) {
    for (const bool device_gather : {false, true}) {
      for (int size : {2, 3}) {
        Outcome run;
        absl::Status st = RunDeviceAndCpu(
            size, compression, "20", 3, &run, &sim,
            [](int rank) { return rank; },
            {{"TERSE_MOMENTUM_CORRECTION", "0.9"}}, device_gather, {}, &bucket);
        ASSERT_TRUE(st.ok()) << compression << ": " << st;
        st = ExpectBitwiseEqual(
            run, absl::StrCat(compression, " with momentum, ", size, " ranks",
                              device_gather ? ", over the device" : ""));
        EXPECT_TRUE(st.ok()) << st;
      }
    }
  }
  EXPECT_EQ(sim.live_allocations(), 0);
}

// Error feedback loses nothing: over the steps, what the ranks sent (the
// sums) plus what stays in their residuals is the sum of every gradient,
// against an fp64 oracle. The residuals live in device memory, not in the
// reducer's store.
TEST(DeviceCompressionConservationTest, SentPlusResidualIsTheGradientSum) {
  SimRuntime sim(SimOptions{std::chrono::microseconds(300), 4});
  for (const std::string compression :
       {"topk", "dgc", "redsync", "threshold", "powersgd", "randomk",
        "efsignsgd", "qsgd"}) {
    const int size = 3, steps = 4;
    Outcome run;
    absl::Status st = RunDeviceAndCpu(size, compression, "20", steps, &run,
                                      &sim, [](int rank) { return rank; });
    ASSERT_TRUE(st.ok()) << st;
    st = CheckConservation(run, size);
    ASSERT_TRUE(st.ok()) << compression << " " << st;
    const Bucket bucket = DeviceCompressionBucket();
    const int64_t n = bucket.count;
    for (int r = 0; r < size; ++r) {
      ASSERT_EQ(run.residuals[r].size(), 2u) << compression;
      // Held on the device only.
      for (float v : run.store_residual[r]) ASSERT_EQ(v, 0.0f);
    }
    int64_t sent_entries = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (run.device[steps - 1][0][i] != 0) ++sent_entries;
    }
    // Compression happened: the sparsifiers left most entries behind; all
    // sent far fewer bytes than dense.
    if (compression == "topk" || compression == "dgc" ||
        compression == "redsync" || compression == "randomk") {
      EXPECT_LT(sent_entries, n / 2) << compression;
    }
    EXPECT_GT(sent_entries, 0) << compression;
    // RedSync keeps k to 2k - 1 entries.
    EXPECT_LT(run.device_report[0].bytes_sent,
              bucket.bytes / (compression == "redsync" ? 5 : 10))
        << compression;
  }
}

}  // namespace
}  // namespace testing
}  // namespace terse
