#include "compressors/powersgd_compressor.h"

#include <cmath>
#include <vector>

#include "compressors/test_util.h"
#include "compressors/testing/simulated_ranks.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

std::vector<Compressor*> Raw(
    const std::vector<std::unique_ptr<Compressor>>& v) {
  std::vector<Compressor*> out;
  for (const auto& c : v) out.push_back(c.get());
  return out;
}

TEST(PowerSgdTest, Shape) {
  PowerSgdShape s = PowerSgdShapeFor(100, 4);
  EXPECT_EQ(s.cols, 10);
  EXPECT_EQ(s.rows, 10);
  EXPECT_EQ(s.rank, 4);
  s = PowerSgdShapeFor(101, 50);
  EXPECT_EQ(s.cols, 11);
  EXPECT_EQ(s.rows, 10);
  EXPECT_EQ(s.rank, 10);
  s = PowerSgdShapeFor(1, 3);
  EXPECT_EQ(s.rows * s.cols, 1);
  EXPECT_EQ(s.rank, 1);
  EXPECT_EQ(PowerSgdShapeFor(0, 3).rank, 0);
}

TEST(PowerSgdTest, FullRankReproducesTheDenseSum) {
  for (int64_t d : {int64_t{144}, int64_t{150}, int64_t{7}}) {
    const int ranks = 3;
    CompressorOptions opt;
    opt.powersgd_rank = 64;  // >= rows: full rank.
    std::vector<std::unique_ptr<Compressor>> cs;
    std::vector<std::vector<float>> inputs;
    std::vector<double> dense_sum(d, 0.0);
    for (int r = 0; r < ranks; ++r) {
      cs.push_back(MakePowerSgdCompressor(1, opt));
      inputs.push_back(GaussianVector(d, 10 + r));
      for (int64_t i = 0; i < d; ++i) dense_sum[i] += inputs[r][i];
    }
    CompressContext ctx;
    ctx.seed = 5;
    absl::StatusOr<testing::SimulatedStep> step =
        testing::SimulateStep(Raw(cs), inputs, ctx);
    ASSERT_TRUE(step.ok()) << step.status();
    for (int64_t i = 0; i < d; ++i) {
      EXPECT_NEAR(step->reduced[i], dense_sum[i], 2e-4) << "d=" << d;
    }
    // The reduced result is the sum of what each rank sent.
    for (int64_t i = 0; i < d; ++i) {
      double sent = 0;
      for (int r = 0; r < ranks; ++r) sent += step->sent[r][i];
      EXPECT_NEAR(step->reduced[i], sent, 1e-4);
    }
  }
}

TEST(PowerSgdTest, RankOneWarmStartConvergesOnARankOneSum) {
  // Each rank holds u * v_r^T; the sum is rank one, and power iteration
  // with warm start recovers it exactly after the first step.
  const int64_t rows = 20, cols = 20, d = rows * cols;
  std::vector<float> u = GaussianVector(rows, 1);
  std::vector<std::vector<float>> inputs(2, std::vector<float>(d));
  for (int r = 0; r < 2; ++r) {
    std::vector<float> v = GaussianVector(cols, 2 + r);
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) inputs[r][i * cols + j] = u[i] * v[j];
    }
  }
  CompressorOptions opt;
  std::vector<std::unique_ptr<Compressor>> cs;
  cs.push_back(MakePowerSgdCompressor(1, opt));
  cs.push_back(MakePowerSgdCompressor(1, opt));
  CompressContext ctx;
  ctx.key = "layer";
  for (int step = 0; step < 3; ++step) {
    ctx.step = step;
    absl::StatusOr<testing::SimulatedStep> s =
        testing::SimulateStep(Raw(cs), inputs, ctx);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->bytes[0], (rows + cols) * 4);
    for (int64_t i = 0; i < d; ++i) {
      EXPECT_NEAR(s->reduced[i], inputs[0][i] + inputs[1][i], 1e-4);
    }
  }
}

TEST(PowerSgdTest, ProtocolMisuse) {
  std::unique_ptr<Compressor> c = MakePowerSgdCompressor(1, {});
  EXPECT_EQ(c->num_rounds(), 2);
  Payload p;
  EXPECT_FALSE(c->Compress(GaussianVector(10, 1), {}, &p).ok());
  std::vector<float> x = GaussianVector(10, 1);
  absl::StatusOr<std::unique_ptr<RoundState>> st = c->BeginRounds(x, {});
  ASSERT_TRUE(st.ok());
  std::vector<float> out(10);
  EXPECT_FALSE((*st)->AccumulateInto(absl::MakeSpan(out)).ok());
  EXPECT_FALSE((*st)->EndRound(1).ok());
  ASSERT_TRUE((*st)->EndRound(0).ok());
  ASSERT_TRUE((*st)->EndRound(1).ok());
  EXPECT_FALSE((*st)->EndRound(2).ok());
  std::vector<float> wrong(11);
  EXPECT_FALSE((*st)->AccumulateInto(absl::MakeSpan(wrong)).ok());
  EXPECT_TRUE((*st)->AccumulateInto(absl::MakeSpan(out)).ok());
}

}  // namespace
}  // namespace terse
