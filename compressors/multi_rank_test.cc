// Multi-rank equivalence through the in-process engine stand-in: for every
// compressor, what the ranks reduce to equals the dense sum of what each
// rank selected (its own decoded contribution), on every rank.
#include <cmath>
#include <vector>

#include "compressors/registry.h"
#include "compressors/test_util.h"
#include "compressors/testing/simulated_ranks.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

TEST(MultiRankTest, ReducedEqualsSumOfWhatEachRankSent) {
  const int64_t d = 20000;
  const int ranks = 4;
  for (const std::string& name : CompressorNames()) {
    std::vector<std::unique_ptr<Compressor>> owned;
    std::vector<Compressor*> cs;
    for (int r = 0; r < ranks; ++r) {
      auto c = CreateCompressor(name, 50, {});
      ASSERT_TRUE(c.ok());
      owned.push_back(std::move(*c));
      cs.push_back(owned.back().get());
    }
    CompressContext ctx;
    ctx.seed = 77;
    for (int step = 0; step < 3; ++step) {
      ctx.step = step;
      std::vector<std::vector<float>> inputs;
      for (int r = 0; r < ranks; ++r) {
        inputs.push_back(GaussianVector(d, 1000 * step + r));
      }
      absl::StatusOr<testing::SimulatedStep> s =
          testing::SimulateStep(cs, inputs, ctx);
      ASSERT_TRUE(s.ok()) << name << ": " << s.status();
      // 16-bit summed bodies round once after the sum.
      const bool half_sum = name == "fp16" || name == "bf16";
      for (int64_t i = 0; i < d; ++i) {
        double sent = 0;
        for (int r = 0; r < ranks; ++r) sent += s->sent[r][i];
        const double tol = half_sum ? 1e-2 * (1 + std::fabs(sent))
                                    : 1e-5 * (1 + std::fabs(sent));
        ASSERT_NEAR(s->reduced[i], sent, tol) << name << " i=" << i;
      }
      if (name == "none") {
        for (int64_t i = 0; i < d; ++i) {
          float dense = 0;
          for (int r = 0; r < ranks; ++r) dense += inputs[r][i];
          ASSERT_EQ(s->reduced[i], dense);
        }
      }
    }
  }
}

TEST(MultiRankTest, SparseAllgatherIsBitExact) {
  // Top-k payloads are decoded in rank order: identical to summing the
  // per-rank decodes in rank order.
  const int64_t d = 10000;
  CompressorOptions opt;
  opt.error_feedback = ErrorFeedbackMode::kOff;
  std::vector<std::unique_ptr<Compressor>> owned;
  std::vector<Compressor*> cs;
  std::vector<std::vector<float>> inputs;
  for (int r = 0; r < 3; ++r) {
    owned.push_back(*CreateCompressor("topk", 20, opt));
    cs.push_back(owned.back().get());
    inputs.push_back(GaussianVector(d, 50 + r));
  }
  absl::StatusOr<testing::SimulatedStep> s =
      testing::SimulateStep(cs, inputs, {});
  ASSERT_TRUE(s.ok());
  for (int64_t i = 0; i < d; ++i) {
    float sum = 0;
    for (int r = 0; r < 3; ++r) sum += s->sent[r][i];
    ASSERT_EQ(s->reduced[i], sum);
  }
}

TEST(MultiRankTest, RandomKRanksAgreeOnPositions) {
  // Summable only because every rank picks the same positions: the reduced
  // support is exactly k positions.
  const int64_t d = 10000;
  std::vector<std::unique_ptr<Compressor>> owned;
  std::vector<Compressor*> cs;
  std::vector<std::vector<float>> inputs;
  for (int r = 0; r < 3; ++r) {
    owned.push_back(*CreateCompressor("randomk", 100, {}));
    cs.push_back(owned.back().get());
    inputs.push_back(GaussianVector(d, 70 + r));
  }
  CompressContext ctx;
  ctx.seed = 3;
  absl::StatusOr<testing::SimulatedStep> s =
      testing::SimulateStep(cs, inputs, ctx);
  ASSERT_TRUE(s.ok()) << s.status();
  int64_t nonzero = 0;
  for (float v : s->reduced) nonzero += v != 0.0f;
  EXPECT_EQ(nonzero, 100);
  for (int r = 1; r < 3; ++r) {
    for (int64_t i = 0; i < d; ++i) {
      ASSERT_EQ(s->sent[r][i] != 0.0f, s->sent[0][i] != 0.0f);
    }
  }
}

}  // namespace
}  // namespace terse
