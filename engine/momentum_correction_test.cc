#include "engine/momentum_correction.h"

#include <vector>

#include "gtest/gtest.h"

namespace terse {
namespace {

std::vector<Segment> Segments() {
  Segment w{"grad.w", 0, 3, 0};
  Segment loss{"loss", 3, 1, 0};  // Not a gradient: passes through.
  return {w, loss};
}

TEST(MomentumCorrectionTest, AccumulatesTheVelocityOfMomentumSgd) {
  MomentumCorrection mc(0.5);
  const std::vector<std::vector<float>> grads = {
      {1, 2, 4, 7}, {2, 0, -4, 7}, {0, 8, 1, 7}};
  // Closed form: u_t = sum_{s <= t} m^(t - s) g_s.
  std::vector<double> u(3, 0.0);
  for (const auto& g : grads) {
    std::vector<float> x = g;
    mc.Accumulate(absl::MakeSpan(x), Segments());
    for (int i = 0; i < 3; ++i) {
      u[i] = 0.5 * u[i] + g[i];
      EXPECT_FLOAT_EQ(x[i], u[i]) << i;
    }
    EXPECT_EQ(x[3], 7.0f);  // "loss" is untouched.
  }
  EXPECT_EQ(mc.size(), 1);
}

TEST(MomentumCorrectionTest, MaskingClearsOnlySentEntries) {
  MomentumCorrection mc(0.9);
  std::vector<float> x = {1, 2, 3, 4};
  mc.Accumulate(absl::MakeSpan(x), Segments());
  const std::vector<float> sent = {0, 2, 0, 4};
  mc.MaskSent(sent, Segments());
  std::vector<float> y = {10, 10, 10, 10};
  mc.Accumulate(absl::MakeSpan(y), Segments());
  EXPECT_FLOAT_EQ(y[0], 0.9f * 1 + 10);
  EXPECT_FLOAT_EQ(y[1], 10);  // Sent: its velocity was cleared.
  EXPECT_FLOAT_EQ(y[2], 0.9f * 3 + 10);
  EXPECT_FLOAT_EQ(y[3], 10);
}

TEST(MomentumCorrectionTest, ZeroMomentumIsANoOp) {
  MomentumCorrection mc(0);
  std::vector<float> x = {1, 2, 3, 4};
  mc.Accumulate(absl::MakeSpan(x), Segments());
  mc.Accumulate(absl::MakeSpan(x), Segments());
  EXPECT_EQ(x, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(mc.size(), 0);
}

TEST(MomentumCorrectionTest, ExportImportContinuesTheSameSequence) {
  MomentumCorrection a(0.9), b(0.9);
  std::vector<float> x = {1, -2, 3, 0};
  a.Accumulate(absl::MakeSpan(x), Segments());
  b.Import(a.Export());
  std::vector<float> xa = {5, 6, 7, 0}, xb = xa;
  a.Accumulate(absl::MakeSpan(xa), Segments());
  b.Accumulate(absl::MakeSpan(xb), Segments());
  EXPECT_EQ(xa, xb);
}

TEST(MomentumCorrectionTest, KnowsTheSparsifiers) {
  EXPECT_TRUE(MomentumCorrection::IsSparsifier("topk"));
  EXPECT_TRUE(MomentumCorrection::IsSparsifier("dgc"));
  EXPECT_FALSE(MomentumCorrection::IsSparsifier("fp16"));
  EXPECT_FALSE(MomentumCorrection::IsSparsifier("powersgd"));
  EXPECT_TRUE(MomentumCorrection::Applies("grad.fc1.weight"));
  EXPECT_TRUE(MomentumCorrection::Applies("tape.grad.0.dense/kernel:0"));
  EXPECT_TRUE(MomentumCorrection::Applies("keras.grad.1.dense/bias:0"));
  EXPECT_FALSE(MomentumCorrection::Applies("loss"));
  EXPECT_FALSE(MomentumCorrection::Applies("keras.broadcast.model.0"));
}

}  // namespace
}  // namespace terse
