// The adaptive policies on device buckets (DeviceCompression::PolicyStep),
// on the simulated device, ranks as threads over loopback: gravac with one
// topk, dgc or redsync family, gravac's portfolio (dense, fp16, bf16,
// PowerSGD, topk, dgc, redsync, randomk, QSGD; window gains and gain
// probes) and accordion with topk, dgc, redsync or powersgd take the same
// decisions, step by step, as the CompressedReducer (the CPU path) on the
// same gradients and reduce to bitwise the same results, with 2 and 3
// ranks, with the sparse messages through the host and over the device
// communicator; the decisions explore more than one choice (the comparison
// is not of one static compressor); error feedback conserves the gradient
// (fp64 oracle). The throughput guard is off and omega 0, so the decisions
// follow the gradients only, not measured time (the portfolio's until its
// first pick by throughput, see BeforeTheFirstPick).
#include <chrono>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "device/sim_runtime.h"
#include "engine/device_compression_testing.h"
#include "gtest/gtest.h"

namespace terse {
namespace testing {
namespace {

struct PolicyCase {
  std::string name;
  std::string compression;
  std::map<std::string, std::string> settings;
};

// `epsilon`: randomk keeps about 1/CF of the energy, so it needs a lower
// one to compress at all.
std::map<std::string, std::string> Gravac(const std::string& family,
                                          const std::string& epsilon = "0.3") {
  return {{"TERSE_GRAVAC_CANDIDATES", family},
          {"TERSE_GRAVAC_WINDOW", "2"},
          {"TERSE_GRAVAC_EPSILON", epsilon},
          {"TERSE_GRAVAC_EWMA", "0.5"},
          {"TERSE_GRAVAC_OMEGA", "0"},
          {"TERSE_GRAVAC_CF_MIN", "4"},
          {"TERSE_GRAVAC_CF_MAX", "64"},
          {"TERSE_GRAVAC_THROUGHPUT_GUARD", "off"}};
}

std::map<std::string, std::string> Accordion(const std::string& compressor) {
  return {{"TERSE_ACCORDION_COMPRESSOR", compressor},
          {"TERSE_ACCORDION_SWITCH_STEPS", "2"},
          {"TERSE_ACCORDION_THRESHOLD", "0.5"},
          {"TERSE_ACCORDION_LOW_CF", "4"},
          {"TERSE_ACCORDION_HIGH_CF", "40"},
          {"TERSE_ACCORDION_HIGH_RANK", "3"},
          {"TERSE_ACCORDION_LOW_RANK", "1"}};
}

class DevicePolicyTest : public ::testing::TestWithParam<PolicyCase> {};

TEST_P(DevicePolicyTest, DecidesAndReducesAsTheCpuPathBitForBit) {
  SimRuntime sim(SimOptions{std::chrono::microseconds(300), 4});
  const PolicyCase& c = GetParam();
  const int steps = 10;
  for (const bool device_gather : {false, true}) {
    for (int size : {2, 3}) {
      SCOPED_TRACE(::testing::Message()
                   << size << " ranks, sparse messages "
                   << (device_gather ? "over the device" : "through the host"));
      Outcome run;
      absl::Status st = RunDeviceAndCpu(
          size, c.compression, "10", steps, &run, &sim,
          [](int rank) { return rank; }, c.settings, device_gather);
      ASSERT_TRUE(st.ok()) << st;
      st = ExpectBitwiseEqual(run, c.name);
      EXPECT_TRUE(st.ok()) << st;
      // Not one static choice: the decisions changed over the steps.
      std::set<std::string> sent;
      for (int step = 0; step < steps; ++step) {
        const std::string& line = run.device_steps[step][0];
        sent.insert(line.substr(line.find(" sent ")));
      }
      EXPECT_GT(sent.size(), 1u) << c.name << ": " << run.device_steps[0][0];
      for (int r = 0; r < size; ++r) {
        // The residuals are held on the device, not in the reducer's store.
        for (float v : run.store_residual[r]) ASSERT_EQ(v, 0.0f);
      }
    }
  }
  EXPECT_EQ(sim.live_allocations(), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Policies, DevicePolicyTest,
    ::testing::Values(
        PolicyCase{"gravac_topk", "gravac", Gravac("topk")},
        PolicyCase{"gravac_dgc", "gravac", Gravac("dgc")},
        PolicyCase{"gravac_redsync", "gravac", Gravac("redsync")},
        PolicyCase{"gravac_randomk", "gravac", Gravac("randomk", "0.1")},
        PolicyCase{"accordion_topk", "accordion", Accordion("topk")},
        PolicyCase{"accordion_dgc", "accordion", Accordion("dgc")},
        PolicyCase{"accordion_redsync", "accordion", Accordion("redsync")},
        PolicyCase{"accordion_randomk", "accordion", Accordion("randomk")},
        PolicyCase{"accordion_powersgd", "accordion", Accordion("powersgd")}),
    [](const ::testing::TestParamInfo<PolicyCase>& i) { return i.param.name; });

// gravac's portfolio (TERSE_GRAVAC_CANDIDATES across families) with the
// throughput guard off: while it explores (its trials, the window gains,
// the surveys' gain probes) no decision reads a measured time. The first
// pick by T_c ("best T_c") does, so the comparisons cover the steps before
// it, and there must be enough of them.
std::map<std::string, std::string> Portfolio(
    const std::string& candidates, const std::string& gain,
    const std::string& epsilon = "0.3") {
  return {{"TERSE_GRAVAC_CANDIDATES", candidates},
          {"TERSE_GRAVAC_GAIN", gain},
          {"TERSE_GRAVAC_GAIN_WINDOW", "2"},
          {"TERSE_GRAVAC_WINDOW", "4"},
          {"TERSE_GRAVAC_EPSILON", epsilon},
          {"TERSE_GRAVAC_EWMA", "0.5"},
          {"TERSE_GRAVAC_OMEGA", "0"},
          {"TERSE_GRAVAC_THROUGHPUT_GUARD", "off"}};
}

// The steps of `run` before the CPU path's first decision by measured
// throughput (the last reports, which come after, dropped).
Outcome BeforeTheFirstPick(const Outcome& run) {
  size_t steps = 0;
  while (steps < run.cpu_steps.size() &&
         run.cpu_steps[steps][0].find("best T_c") == std::string::npos) {
    ++steps;
  }
  Outcome out = run;
  out.device.resize(steps);
  out.cpu.resize(steps);
  out.device_steps.resize(steps);
  out.cpu_steps.resize(steps);
  if (!out.device_pending.empty()) {
    out.device_pending.resize(steps);
    out.cpu_pending.resize(steps);
  }
  out.device_report.clear();
  out.cpu_report.clear();
  return out;
}

// The exploration of a portfolio run, compared: at least `at_least` steps
// before the first pick by throughput, every one bitwise the CPU path's
// (with the pending statistics, when recorded: a gain probe's norm is
// seen there even where its gain, clamped to 1, is not), and every
// candidate's gain measured by the end (no "gain=?").
absl::Status CompareExploration(const Outcome& run, size_t at_least,
                                const std::string& what) {
  const Outcome compared = BeforeTheFirstPick(run);
  std::string lines;
  for (const auto& step : run.cpu_steps) lines += "\n" + step[0];
  if (compared.cpu_steps.size() < at_least) {
    return absl::InternalError(absl::StrCat(
        what, ": ", compared.cpu_steps.size(), " steps before the first pick, ",
        "want ", at_least, lines));
  }
  TERSE_RETURN_IF_ERROR(ExpectBitwiseEqual(compared, what));
  if (compared.cpu_steps.back()[0].find("gain=?") != std::string::npos) {
    return absl::InternalError(
        absl::StrCat(what, ": a gain never measured", lines));
  }
  return absl::OkStatus();
}

struct PortfolioCase {
  std::string name, candidates, gain;
  int steps = 0;
  size_t compared = 0;  // At least this many steps before the first pick.
  // Sent among the compared steps: each "<compressor>" or
  // "<compressor> cf <cf>" here.
  std::vector<std::string> must_send = {};
  std::string epsilon = "0.3";
};

class DevicePortfolioTest : public ::testing::TestWithParam<PortfolioCase> {};

TEST_P(DevicePortfolioTest, DecidesAndReducesAsTheCpuPathBitForBit) {
  SimRuntime sim(SimOptions{std::chrono::microseconds(300), 4});
  const PortfolioCase& c = GetParam();
  for (const bool device_gather : {false, true}) {
    for (int size : {2, 3}) {
      SCOPED_TRACE(::testing::Message()
                   << size << " ranks, sparse messages "
                   << (device_gather ? "over the device" : "through the host"));
      Outcome run;
      absl::Status st = RunDeviceAndCpu(
          size, "gravac", "10", c.steps, &run, &sim,
          [](int rank) { return rank; },
          Portfolio(c.candidates, c.gain, c.epsilon), device_gather, {},
          nullptr, /*record_pending=*/true);
      ASSERT_TRUE(st.ok()) << st;
      st = CompareExploration(run, c.compared, c.name);
      ASSERT_TRUE(st.ok()) << st;
      const Outcome compared = BeforeTheFirstPick(run);
      std::string lines;
      for (const auto& step : run.cpu_steps) lines += "\n" + step[0];
      // The portfolio explored: every family was sent.
      std::set<std::string> sent;
      for (const auto& step : compared.device_steps) {
        const std::string& line = step[0];
        const size_t at = line.find(" sent ") + 6;
        sent.insert(line.substr(at, line.find(' ', at) - at));
      }
      EXPECT_GE(sent.size(), 5u) << lines;
      for (const std::string& want : c.must_send) {
        bool found = false;
        for (const auto& step : compared.device_steps) {
          found =
              found || step[0].find(" sent " + want + " ") != std::string::npos;
        }
        EXPECT_TRUE(found) << want << " never sent" << lines;
      }
      for (int r = 0; r < size; ++r) {
        // The residuals are held on the device, not in the reducer's store.
        for (float v : run.store_residual[r]) ASSERT_EQ(v, 0.0f);
      }
    }
  }
  EXPECT_EQ(sim.live_allocations(), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Portfolios, DevicePortfolioTest,
    ::testing::Values(
        // The window gain (the default): trials, flushes, window sums and
        // their count sketches (70001 floats > the sketch's 1024).
        PortfolioCase{"window",
                      "none,fp16,bf16,powersgd:2,topk:10,dgc:20,redsync:16,"
                      "randomk:8",
                      "window", 40, 30},
        // The paper's step gain: surveys with every candidate's gain probe
        // (PowerSGD on a rank alone, with its own warm starts), trials.
        PortfolioCase{"step",
                      "none,fp16,bf16,powersgd:2,topk:10,dgc:20,redsync:16,"
                      "randomk:8",
                      "step", 20, 8},
        // QSGD at two levels (8 and 4 bits: CF 4 and 8) among the other
        // families: its trials and sends (the CPU path's payloads with the
        // statistics trailer, encoded and decoded on the device) and its
        // window gains.
        PortfolioCase{"window_qsgd",
                      "none,fp16,powersgd:2,topk:10,dgc:20,qsgd:8,qsgd:4",
                      "window",
                      40,
                      25,
                      {"qsgd cf 4", "qsgd cf 8"}},
        // The step gain's surveys probe both QSGD levels (the step's
        // draws, as the send's) and two randomk levels besides a randomk
        // send (each selection's own host positions: no wait between the
        // probes); epsilon low enough for randomk:8 to be tried.
        PortfolioCase{"step_qsgd",
                      "none,fp16,powersgd:2,topk:10,randomk:8,randomk:16,"
                      "qsgd:8,qsgd:4",
                      "step",
                      20,
                      8,
                      {"qsgd", "randomk"},
                      "0.1"}),
    [](const ::testing::TestParamInfo<PortfolioCase>& i) {
      return i.param.name;
    });

// A bucket of at most 1024 floats sends its window sums whole, not their
// sketches: the same decisions and results as the CPU path.
TEST(DevicePortfolioSmallTest, WindowSumsOfASmallBucketEqualTheCpuPath) {
  SimRuntime sim(SimOptions{std::chrono::microseconds(300), 4});
  Bucket bucket = DeviceCompressionBucket();
  bucket.members = {{"small.weight", 600}, {"small.bias", 200}};
  bucket.members[0].shape = {20, 30};
  bucket.count = 800;
  bucket.bytes = bucket.count * 4;
  for (int size : {2, 3}) {
    Outcome run;
    absl::Status st = RunDeviceAndCpu(
        size, "gravac", "10", 30, &run, &sim, [](int rank) { return rank; },
        Portfolio("none,fp16,powersgd:2,topk:10,randomk:8", "window"),
        /*device_gather=*/true, {}, &bucket);
    ASSERT_TRUE(st.ok()) << st;
    st = CompareExploration(run, 15, "small bucket");
    EXPECT_TRUE(st.ok()) << st;
  }
  EXPECT_EQ(sim.live_allocations(), 0);
}

// The portfolio with TERSE_MOMENTUM_CORRECTION on a gradient ("grad.")
// tensor: velocities on the device, the window summing g - sent step by
// step (the residual is not a - sent then); the same decisions and results
// as the CPU path. With QSGD among the candidates too, whose sent levels
// are not masked out of residual and velocity (not a sparsifier).
TEST(DevicePortfolioMomentumTest, PortfolioWithMomentumEqualsTheCpuPath) {
  SimRuntime sim(SimOptions{std::chrono::microseconds(300), 4});
  Bucket bucket = DeviceCompressionBucket();
  bucket.members[0].name = "grad.layer0.weight";
  for (const std::string candidates : {"none,fp16,powersgd:2,topk:10,dgc:20",
                                       "none,fp16,powersgd:2,topk:10,qsgd:8"}) {
    std::map<std::string, std::string> settings =
        Portfolio(candidates, "window");
    settings["TERSE_MOMENTUM_CORRECTION"] = "0.9";
    for (const bool device_gather : {false, true}) {
      Outcome run;
      absl::Status st = RunDeviceAndCpu(
          3, "gravac", "10", 24, &run, &sim, [](int rank) { return rank; },
          settings, device_gather, {}, &bucket);
      ASSERT_TRUE(st.ok()) << st;
      st = CompareExploration(run, 15, "portfolio with momentum");
      EXPECT_TRUE(st.ok()) << candidates << ": " << st;
      bool qsgd = false;
      for (const auto& step : BeforeTheFirstPick(run).device_steps) {
        qsgd = qsgd || step[0].find(" sent qsgd ") != std::string::npos;
      }
      EXPECT_EQ(qsgd, candidates.find("qsgd") != std::string::npos);
    }
  }
  EXPECT_EQ(sim.live_allocations(), 0);
}

// Error feedback under the portfolio loses nothing: what the ranks sent
// plus their residuals is the sum of every gradient (fp64 oracle), across
// dense flushes, PowerSGD and the sparsifiers (the lossless casts, whose
// rounding is not fed back, are left out of the portfolio here).
TEST(DevicePortfolioConservationTest, SentPlusResidualIsTheGradientSum) {
  SimRuntime sim(SimOptions{std::chrono::microseconds(300), 4});
  const int size = 3, steps = 16;
  Outcome run;
  absl::Status st = RunDeviceAndCpu(
      size, "gravac", "10", steps, &run, &sim, [](int rank) { return rank; },
      Portfolio("none,powersgd:2,topk:10,dgc:20,randomk:8", "window"),
      /*device_gather=*/true);
  ASSERT_TRUE(st.ok()) << st;
  st = CheckConservation(run, size);
  ASSERT_TRUE(st.ok()) << st;
  // Compressed families were sent, a residual stays behind.
  std::set<std::string> families;
  for (int step = 0; step < steps; ++step) {
    const std::string& line = run.device_steps[step][0];
    families.insert(line.substr(line.find(" sent ")));
  }
  EXPECT_GE(families.size(), 4u);
}

// The same with QSGD among the candidates: its residual a - own decoding
// (on the device) and the decoded sum over ranks lose nothing either.
TEST(DevicePortfolioConservationTest, QsgdSentPlusResidualIsTheGradientSum) {
  SimRuntime sim(SimOptions{std::chrono::microseconds(300), 4});
  const int size = 3, steps = 16;
  Outcome run;
  absl::Status st = RunDeviceAndCpu(
      size, "gravac", "10", steps, &run, &sim, [](int rank) { return rank; },
      Portfolio("none,powersgd:2,topk:10,qsgd:8,qsgd:4", "window"),
      /*device_gather=*/true);
  ASSERT_TRUE(st.ok()) << st;
  st = CheckConservation(run, size);
  ASSERT_TRUE(st.ok()) << st;
  int qsgd = 0;
  for (int step = 0; step < steps; ++step) {
    if (run.device_steps[step][0].find(" sent qsgd ") != std::string::npos) {
      ++qsgd;
    }
  }
  EXPECT_GE(qsgd, 2) << run.device_steps[steps - 1][0];
}

// QSGD sends under the portfolio travel over the device communicator: a
// step that sends QSGD moves its message (the payload and the statistics
// trailer) through the device allgatherv and nothing through the control
// communicator, whose sums the trailer replaces. Staged, the message goes
// through the control communicator.
TEST(DevicePortfolioQsgdTest, QsgdSendsTravelOverTheDeviceCommunicator) {
  SimRuntime sim(SimOptions{std::chrono::microseconds(300), 4});
  const int size = 2, steps = 16;
  for (const bool device_gather : {true, false}) {
    SCOPED_TRACE(device_gather ? "over the device" : "staged");
    Outcome run;
    absl::Status st = RunDeviceAndCpu(
        size, "gravac", "10", steps, &run, &sim, [](int rank) { return rank; },
        Portfolio("none,powersgd:2,topk:10,qsgd:8,qsgd:4", "window"),
        device_gather);
    ASSERT_TRUE(st.ok()) << st;
    int qsgd = 0;
    for (int step = 0; step < steps; ++step) {
      const std::string& line = run.device_steps[step][0];
      if (line.find(" sent qsgd ") == std::string::npos) continue;
      ++qsgd;
      const int64_t payload =
          std::stoll(line.substr(line.rfind(" bytes ") + 7));
      for (int r = 0; r < size; ++r) {
        const int64_t over_control = run.control_bytes[step][r];
        const int64_t over_device = run.device_bytes[step][r];
        if (device_gather) {
          EXPECT_EQ(over_control, 0) << line;
          EXPECT_GT(over_device, payload) << line;
        } else {
          EXPECT_GT(over_control, payload) << line;
          EXPECT_EQ(over_device, 0) << line;
        }
      }
    }
    EXPECT_GE(qsgd, 2) << run.device_steps[steps - 1][0];
  }
  EXPECT_EQ(sim.live_allocations(), 0);
}

// With the throughput guard on, gravac's first two steps measure dense
// (the second, with no residual left and no probes, is reduced in place);
// those decisions do not depend on time, so both paths agree bit for bit.
TEST(DevicePolicyGuardTest, TheGuardsDenseStepsEqualTheCpuPath) {
  SimRuntime sim(SimOptions{std::chrono::microseconds(300), 4});
  std::map<std::string, std::string> settings = Gravac("topk");
  settings["TERSE_GRAVAC_THROUGHPUT_GUARD"] = "on";
  for (int size : {2, 3}) {
    Outcome run;
    absl::Status st = RunDeviceAndCpu(
        size, "gravac", "10", 2, &run, &sim, [](int rank) { return rank; },
        settings);
    ASSERT_TRUE(st.ok()) << st;
    st = ExpectBitwiseEqual(run, "gravac guard on");
    EXPECT_TRUE(st.ok()) << st;
    for (int step = 0; step < 2; ++step) {
      EXPECT_NE(run.device_steps[step][0].find("sent none"), std::string::npos)
          << run.device_steps[step][0];
    }
  }
  EXPECT_EQ(sim.live_allocations(), 0);
}

// Gravac with TERSE_MOMENTUM_CORRECTION on a gradient ("grad.") tensor:
// velocities on the device, the sent entries of each compressed step masked
// out of them; the same decisions and results as the CPU path.
TEST(DevicePolicyMomentumTest, GravacWithMomentumEqualsTheCpuPath) {
  SimRuntime sim(SimOptions{std::chrono::microseconds(300), 4});
  Bucket bucket = DeviceCompressionBucket();
  bucket.members[0].name = "grad.layer0.weight";
  std::map<std::string, std::string> settings = Gravac("topk");
  settings["TERSE_MOMENTUM_CORRECTION"] = "0.9";
  for (const bool device_gather : {false, true}) {
    Outcome run;
    absl::Status st = RunDeviceAndCpu(
        3, "gravac", "10", 6, &run, &sim, [](int rank) { return rank; },
        settings, device_gather, {}, &bucket);
    ASSERT_TRUE(st.ok()) << st;
    st = ExpectBitwiseEqual(run, "gravac with momentum");
    EXPECT_TRUE(st.ok()) << st;
    EXPECT_NE(run.device_steps[5][0].find("sent topk"), std::string::npos)
        << run.device_steps[5][0];
  }
  EXPECT_EQ(sim.live_allocations(), 0);
}

// Error feedback under a policy loses nothing: what the ranks sent plus what
// stays in their residuals is the sum of every gradient (fp64 oracle),
// across dense steps (which drop the residual after sending it) and
// compressed ones.
TEST(DevicePolicyConservationTest, SentPlusResidualIsTheGradientSum) {
  SimRuntime sim(SimOptions{std::chrono::microseconds(300), 4});
  const int size = 3, steps = 8;
  Outcome run;
  absl::Status st = RunDeviceAndCpu(
      size, "gravac", "10", steps, &run, &sim, [](int rank) { return rank; },
      Gravac("topk"));
  ASSERT_TRUE(st.ok()) << st;
  st = CheckConservation(run, size);
  ASSERT_TRUE(st.ok()) << st;
  // The last step sent compressed (a residual stays behind).
  EXPECT_NE(run.device_steps[steps - 1][0].find("sent topk"), std::string::npos)
      << run.device_steps[steps - 1][0];
}

}  // namespace
}  // namespace testing
}  // namespace terse
