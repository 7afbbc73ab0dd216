// The portfolio controller (TERSE_GRAVAC_CANDIDATES across families) and
// the window gain, through the compressed reducer on loopback ranks.
#include <cmath>
#include <string>
#include <vector>

#include "engine/compressed_reducer.h"
#include "engine/compressed_reducer_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

using reducer_test::Gradient;
using reducer_test::MakeBucket;
using reducer_test::MakeConfig;
using reducer_test::RunRanks;
using reducer_test::RunResult;
using ::testing::HasSubstr;

// The portfolio (TERSE_GRAVAC_CANDIDATES across families) on a bucket of a
// weight matrix and a bias: every rank decides the same, several families
// are sent, and error feedback conserves the gradient: the sum of every
// step's result plus every rank's final residual is the sum of every
// gradient (fp16's rounding, which is not fed back, within tolerance).
TEST(CompressedReducerTest, PortfolioAgreesAcrossRanksAndConservesTheGradient) {
  for (const char* gain : {"window", "step"}) {
    SCOPED_TRACE(absl::StrCat("TERSE_GRAVAC_GAIN=", gain));
    Bucket bucket = MakeBucket({48 * 40, 40}, "layer.");
    bucket.members[0].shape = {48, 40};
    bucket.members[1].shape = {40};
    const Config config = MakeConfig(
        {{"TERSE_COMPRESSION", "gravac"},
         {"TERSE_GRAVAC_CANDIDATES", "none,fp16,powersgd:1,powersgd:4,topk:10"},
         {"TERSE_GRAVAC_EPSILON", "0.05"},
         {"TERSE_GRAVAC_WINDOW", "12"},
         {"TERSE_GRAVAC_GAIN", gain},
         {"TERSE_GRAVAC_GAIN_WINDOW", "4"}});
    const int size = 4, steps = 40;
    auto grads = [&](int r, int s) { return Gradient(r, s, bucket.count); };
    std::vector<std::unique_ptr<CompressedReducer>> reducers;
    RunResult run = RunRanks(size, config, bucket, steps, grads, &reducers);
    std::vector<double> delivered(bucket.count, 0.0),
        expected(bucket.count, 0.0);
    for (int s = 0; s < steps; ++s) {
      for (int r = 1; r < size; ++r) {
        ASSERT_EQ(run.policies[s][r], run.policies[s][0]) << "step " << s;
        ASSERT_EQ(run.results[s][r], run.results[s][0]) << "step " << s;
      }
      for (int64_t i = 0; i < bucket.count; ++i) {
        delivered[i] += run.results[s][0][i];
      }
      for (int r = 0; r < size; ++r) {
        const std::vector<float> g = grads(r, s);
        for (int64_t i = 0; i < bucket.count; ++i) expected[i] += g[i];
      }
    }
    for (int r = 0; r < size; ++r) {
      int64_t at = 0;
      for (const BucketMember& m : bucket.members) {
        const std::vector<float> e = reducers[r]->Residual(m.name, m.count);
        for (int64_t i = 0; i < m.count; ++i) delivered[at + i] += e[i];
        at += m.count;
      }
    }
    double err = 0, norm = 0;
    for (int64_t i = 0; i < bucket.count; ++i) {
      err += (delivered[i] - expected[i]) * (delivered[i] - expected[i]);
      norm += expected[i] * expected[i];
    }
    EXPECT_LT(std::sqrt(err / norm), 1e-3);
    std::set<std::string> families(run.sent.begin(), run.sent.end());
    EXPECT_TRUE(families.count("none")) << ::testing::PrintToString(families);
    EXPECT_TRUE(families.count("powersgd:4"))
        << ::testing::PrintToString(families);
    EXPECT_TRUE(families.count("topk")) << ::testing::PrintToString(families);
    EXPECT_THAT(run.policies.back()[0], HasSubstr("portfolio "));
  }
}

// The window gain is measured over the SUM of the ranks' window sums. Closed
// form: each rank's gradient is a shared rank-1 matrix plus noise c_r * W
// with sum_r c_r = 0. The sum over ranks is exactly rank 1, so PowerSGD rank
// 1 finds its subspace, every rank's residual is its own noise outside it,
// and the residuals sum to zero at every step: the global window gain is 1,
// while each rank's own deviation is large (a per-rank gain would be low).
// Both the exact path (bucket <= 1024 floats) and the count-sketch path.
TEST(CompressedReducerTest, WindowGainIsMeasuredOverTheSumOfTheRanks) {
  for (int64_t rows : {20, 40}) {
    const int64_t cols = rows + 8;
    SCOPED_TRACE(absl::StrCat(rows, " x ", cols));
    Bucket bucket = MakeBucket({rows * cols}, "w.");
    bucket.members[0].shape = {rows, cols};
    const Config config =
        MakeConfig({{"TERSE_COMPRESSION", "gravac"},
                    {"TERSE_GRAVAC_CANDIDATES", "none,powersgd:1"},
                    {"TERSE_GRAVAC_EPSILON", "0.5"},
                    {"TERSE_GRAVAC_WINDOW", "100"},
                    {"TERSE_GRAVAC_GAIN", "window"},
                    {"TERSE_GRAVAC_GAIN_WINDOW", "5"},
                    // Measured time must not end the trial early.
                    {"TERSE_GRAVAC_THROUGHPUT_GUARD", "off"}});
    const int size = 4, steps = 16;
    const float c[4] = {3.0f, -1.0f, -1.0f, -1.0f};
    auto grads = [&](int r, int s) {
      std::mt19937 rng(17 + s);  // The same W on every rank.
      std::normal_distribution<float> normal;
      std::vector<float> g(rows * cols);
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < cols; ++j) {
          const float signal = (1.0f + 0.1f * s) * std::cos(0.3f * i) *
                               std::sin(0.2f * j + 1.0f);
          g[i * cols + j] = signal + c[r] * 2.0f * normal(rng);
        }
      }
      return g;
    };
    std::vector<std::unique_ptr<CompressedReducer>> reducers;
    RunResult run = RunRanks(size, config, bucket, steps, grads, &reducers);
    const std::string& last = run.policies.back()[0];
    const size_t at = last.find("powersgd:1 gain=");
    ASSERT_NE(at, std::string::npos) << last;
    const double gain = std::stod(last.substr(at + 16));
    EXPECT_GT(gain, 0.999) << last;
    // Each rank's own residual did grow (what a per-rank gain would charge).
    const std::vector<float> e = reducers[0]->Residual("w.0", rows * cols);
    double e2 = 0;
    for (float x : e) e2 += static_cast<double>(x) * x;
    EXPECT_GT(e2, 1.0 * rows * cols);
  }
}

// The window gain against its definition, on one rank (so the sum over
// ranks is the rank's own): over the trial's window, 1 - ||sum (g - sent)||^2
// / ||sum g||^2 from the gradients and the reduced results, in double. The
// engine takes the deviation from the residual's change (error feedback
// telescopes), so this checks that shortcut.
TEST(CompressedReducerTest, WindowGainMatchesItsDefinition) {
  Bucket bucket = MakeBucket({20 * 28}, "w.");
  bucket.members[0].shape = {20, 28};
  const Config config =
      MakeConfig({{"TERSE_COMPRESSION", "gravac"},
                  {"TERSE_GRAVAC_CANDIDATES", "none,powersgd:1"},
                  {"TERSE_GRAVAC_EPSILON", "0.5"},
                  {"TERSE_GRAVAC_GAIN", "window"},
                  {"TERSE_GRAVAC_GAIN_WINDOW", "5"},
                  {"TERSE_GRAVAC_THROUGHPUT_GUARD", "off"}});
  auto grads = [&](int r, int s) {
    std::mt19937 rng(5 + s);
    std::normal_distribution<float> normal;
    std::vector<float> g(bucket.count);
    for (float& x : g) x = normal(rng);
    return g;
  };
  std::vector<std::unique_ptr<CompressedReducer>> reducers;
  RunResult run = RunRanks(1, config, bucket, 14, grads, &reducers);
  // The trial: the first powersgd step after dense's (the run's first step
  // sends powersgd:1 too, not counted: start-up).
  size_t first = 1;
  while (first < run.sent.size() &&
         (run.sent[first].rfind("powersgd", 0) != 0 ||
          run.sent[first - 1] != "none")) {
    ++first;
  }
  ASSERT_LT(first + 6, run.sent.size());
  // A one-step warm-up (window 5 / 5), then one window of 5 steps.
  std::vector<double> dev(bucket.count, 0.0), grad(bucket.count, 0.0);
  for (size_t s = first + 1; s <= first + 5; ++s) {
    ASSERT_EQ(run.sent[s], run.sent[first]) << s;
    const std::vector<float> g = grads(0, static_cast<int>(s));
    for (int64_t i = 0; i < bucket.count; ++i) {
      grad[i] += g[i];
      dev[i] += static_cast<double>(g[i]) - run.results[s][0][i];
    }
  }
  double d2 = 0, g2 = 0;
  for (int64_t i = 0; i < bucket.count; ++i) {
    d2 += dev[i] * dev[i];
    g2 += grad[i] * grad[i];
  }
  const std::string& line = run.policies[first + 6][0];
  const size_t at = line.find("powersgd:1 gain=");
  ASSERT_NE(at, std::string::npos) << line;
  EXPECT_NEAR(std::stod(line.substr(at + 16)), 1 - d2 / g2, 1e-4) << line;
}

}  // namespace
}  // namespace terse
