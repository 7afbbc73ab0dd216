// The adaptive policies on a CUDA device (tag gpu): gravac with one topk or
// dgc family, gravac's portfolio, and accordion with topk, dgc or powersgd
// through DeviceCompression on GPU 0, 1 rank and 2 ranks (threads) sharing
// it with host-staged collectives, against the CompressedReducer (the CPU
// path):
// the same decisions step by step (what was sent, at which CF), and the
// same results (equal for the sparsifiers; PowerSGD within 1e-3 of the
// largest value, its CUDA products summing in another order). The CUDA
// squared norm is a tree sum, so the gains may differ in the last bits:
// the settings keep them far from the thresholds. Skipped, never passed,
// without a device.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/cuda_probe.h"
#include "device/cuda_runtime.h"
#include "engine/device_compression_testing.h"
#include "gtest/gtest.h"

namespace terse {
namespace testing {
namespace {

struct CudaPolicyCase {
  std::string name, compression, compressor;
};

class DevicePolicyCudaTest : public ::testing::TestWithParam<CudaPolicyCase> {};

TEST_P(DevicePolicyCudaTest, DecidesAndReducesAsTheCpuPath) {
  if (ProbeCuda().device_count == 0) {
    GTEST_SKIP() << "skipped: no device (no CUDA device: "
                 << ProbeCuda().why_none << ")";
  }
  const CudaPolicyCase& c = GetParam();
  const std::map<std::string, std::string> settings =
      c.compression == "gravac"
          ? std::map<std::string, std::string>{{"TERSE_GRAVAC_CANDIDATES",
                                                c.compressor},
                                               {"TERSE_GRAVAC_WINDOW", "2"},
                                               {"TERSE_GRAVAC_EPSILON", "0.3"},
                                               {"TERSE_GRAVAC_EWMA", "0.5"},
                                               {"TERSE_GRAVAC_OMEGA", "0"},
                                               {"TERSE_GRAVAC_CF_MIN", "4"},
                                               {"TERSE_GRAVAC_CF_MAX", "64"},
                                               {"TERSE_GRAVAC_THROUGHPUT_GUARD",
                                                "off"}}
          : std::map<std::string, std::string>{
                {"TERSE_ACCORDION_COMPRESSOR", c.compressor},
                {"TERSE_ACCORDION_SWITCH_STEPS", "2"},
                {"TERSE_ACCORDION_THRESHOLD", "0.5"},
                {"TERSE_ACCORDION_LOW_CF", "4"},
                {"TERSE_ACCORDION_HIGH_CF", "40"},
                {"TERSE_ACCORDION_HIGH_RANK", "3"},
                {"TERSE_ACCORDION_LOW_RANK", "1"}};
  CudaRuntime cuda;
  const int steps = 8;
  for (int size : {1, 2}) {
    Outcome run;
    absl::Status st = RunDeviceAndCpu(
        size, c.compression, "10", steps, &run, &cuda, [](int) { return 0; },
        settings);
    ASSERT_TRUE(st.ok()) << st;
    for (int step = 0; step < steps; ++step) {
      for (int r = 0; r < size; ++r) {
        const std::string& d = run.device_steps[step][r];
        const std::string& h = run.cpu_steps[step][r];
        EXPECT_EQ(d.substr(d.find(" sent ")), h.substr(h.find(" sent ")))
            << c.name << " step " << step << " rank " << r;
      }
    }
    st = ExpectClose(run, absl::StrCat(c.name, " on cuda:0"),
                     c.compressor == "powersgd" ? 1e-3 : 0.0);
    EXPECT_TRUE(st.ok()) << st;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Policies, DevicePolicyCudaTest,
    ::testing::Values(CudaPolicyCase{"gravac_topk", "gravac", "topk"},
                      CudaPolicyCase{"gravac_dgc", "gravac", "dgc"},
                      CudaPolicyCase{"accordion_topk", "accordion", "topk"},
                      CudaPolicyCase{"accordion_dgc", "accordion", "dgc"},
                      CudaPolicyCase{"accordion_powersgd", "accordion",
                                     "powersgd"}),
    [](const ::testing::TestParamInfo<CudaPolicyCase>& i) {
      return i.param.name;
    });

// gravac's portfolio on CUDA (dense, fp16, bf16, PowerSGD, topk, dgc,
// randomk; the window gain with its count sketches on the device, and the
// step gain with every candidate's gain probe), the throughput guard off:
// until the CPU path's first pick by measured throughput ("best T_c") the
// same candidates are sent step by step as on the CPU path, and the results
// agree within 1e-3 of the largest value (PowerSGD's CUDA products, and
// the residuals they leave, sum in another order).
// gravac's portfolio over `candidates` on cuda:0, 1 and 2 ranks, against the
// CPU path through its exploration (the steps before its first pick by
// measured throughput): the same sends step by step, results within 1e-3.
// Every name in `must_send` (e.g. "qsgd") is sent at least once.
void CheckPortfolioOnCuda(DeviceRuntime* cuda, const std::string& candidates,
                          const std::string& gain, int steps,
                          size_t min_explored,
                          const std::vector<std::string>& must_send) {
  const std::map<std::string, std::string> settings = {
      {"TERSE_GRAVAC_CANDIDATES", candidates},
      {"TERSE_GRAVAC_GAIN", gain},
      {"TERSE_GRAVAC_GAIN_WINDOW", "2"},
      {"TERSE_GRAVAC_WINDOW", "4"},
      {"TERSE_GRAVAC_EPSILON", "0.3"},
      {"TERSE_GRAVAC_EWMA", "0.5"},
      {"TERSE_GRAVAC_OMEGA", "0"},
      {"TERSE_GRAVAC_THROUGHPUT_GUARD", "off"}};
  for (int size : {1, 2}) {
    SCOPED_TRACE(
        absl::StrCat(candidates, ", ", gain, " gain, ", size, " ranks"));
    Outcome run;
    absl::Status st = RunDeviceAndCpu(
        size, "gravac", "10", steps, &run, cuda, [](int) { return 0; },
        settings);
    ASSERT_TRUE(st.ok()) << st;
    size_t explored = 0;
    while (explored < run.cpu_steps.size() &&
           run.cpu_steps[explored][0].find("best T_c") == std::string::npos) {
      ++explored;
    }
    ASSERT_GE(explored, min_explored);
    std::string sent;
    for (size_t step = 0; step < explored; ++step) {
      for (int r = 0; r < size; ++r) {
        const std::string& d = run.device_steps[step][r];
        const std::string& h = run.cpu_steps[step][r];
        EXPECT_EQ(d.substr(d.find(" sent ")), h.substr(h.find(" sent ")))
            << gain << " step " << step << " rank " << r;
        sent += d.substr(d.find(" sent "));
      }
    }
    for (const std::string& name : must_send) {
      EXPECT_NE(sent.find(name), std::string::npos)
          << name << " never sent while exploring";
    }
    run.device.resize(explored);
    run.cpu.resize(explored);
    run.device_report.clear();
    run.cpu_report.clear();
    st = ExpectClose(run, absl::StrCat("portfolio (", gain, ") on cuda:0"),
                     1e-3);
    EXPECT_TRUE(st.ok()) << st;
  }
}

TEST(DevicePortfolioCudaTest, SendsAsTheCpuPathWhileItExplores) {
  if (ProbeCuda().device_count == 0) {
    GTEST_SKIP() << "skipped: no device (no CUDA device: "
                 << ProbeCuda().why_none << ")";
  }
  CudaRuntime cuda;
  for (const char* gain : {"window", "step"}) {
    CheckPortfolioOnCuda(&cuda,
                         "none,fp16,bf16,powersgd:2,topk:10,dgc:20,randomk:8",
                         gain, std::string(gain) == "window" ? 30 : 16, 6, {});
  }
}

// QSGD candidates (the portfolio's probe and send on the device, their
// payloads over the device communicator), beside fp16 and topk only, whose
// CUDA kernels are bitwise the CPU's, as QSGD's are.
TEST(DevicePortfolioCudaTest, QsgdCandidatesSendAsTheCpuPath) {
  if (ProbeCuda().device_count == 0) {
    GTEST_SKIP() << "skipped: no device (no CUDA device: "
                 << ProbeCuda().why_none << ")";
  }
  CudaRuntime cuda;
  CheckPortfolioOnCuda(&cuda, "none,fp16,topk:10,qsgd:8,qsgd:4", "window", 40,
                       6, {"qsgd"});
}

}  // namespace
}  // namespace testing
}  // namespace terse
