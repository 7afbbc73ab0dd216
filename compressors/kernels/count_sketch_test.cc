#include "compressors/kernels/count_sketch.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace terse {
namespace kernels {
namespace {

double SquaredNorm(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return s;
}

std::vector<float> Gaussian(int64_t d, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(d);
  for (float& x : v) x = normal(gen);
  return v;
}

TEST(CountSketchTest, IsLinearAndTheSameForPiecesAndTheWhole) {
  const std::vector<float> a = Gaussian(1000, 1), b = Gaussian(1000, 2);
  std::vector<float> sum(1000);
  for (int i = 0; i < 1000; ++i) sum[i] = a[i] + b[i];
  std::vector<double> sa(64, 0.0), sb(64, 0.0), ssum(64, 0.0);
  AddCountSketch(7, 0, a, absl::MakeSpan(sa));
  // b in two pieces.
  AddCountSketch(7, 0, absl::MakeConstSpan(b).subspan(0, 400),
                 absl::MakeSpan(sb));
  AddCountSketch(7, 400, absl::MakeConstSpan(b).subspan(400),
                 absl::MakeSpan(sb));
  AddCountSketch(7, 0, sum, absl::MakeSpan(ssum));
  for (int j = 0; j < 64; ++j) {
    // Exact up to float rounding of a[i] + b[i].
    EXPECT_NEAR(sa[j] + sb[j], ssum[j], 1e-4 * (1 + std::fabs(ssum[j])));
  }
}

TEST(CountSketchTest, PreservesTheSquaredNormInExpectation) {
  // Over 200 independent seeds, the mean of ||S v||^2 / ||v||^2 is 1 within
  // 4 standard errors, and the spread is about sqrt(2 / k).
  const int64_t d = 20000;
  const int k = 512;
  const std::vector<float> v = Gaussian(d, 3);
  double norm2 = 0;
  for (float x : v) norm2 += static_cast<double>(x) * x;
  double mean = 0, mean_sq = 0;
  const int trials = 200;
  for (int t = 0; t < trials; ++t) {
    std::vector<double> s(k, 0.0);
    AddCountSketch(1000 + t, 0, v, absl::MakeSpan(s));
    const double ratio = SquaredNorm(s) / norm2;
    mean += ratio / trials;
    mean_sq += ratio * ratio / trials;
  }
  const double sd = std::sqrt(mean_sq - mean * mean);
  EXPECT_NEAR(mean, 1.0, 4 * sd / std::sqrt(trials));
  EXPECT_NEAR(sd, std::sqrt(2.0 / k), 0.3 * std::sqrt(2.0 / k));
}

TEST(CountSketchTest, IsDeterministicAndDependsOnTheSeed) {
  const std::vector<float> v = Gaussian(300, 4);
  std::vector<double> s1(16, 0.0), s2(16, 0.0), s3(16, 0.0);
  AddCountSketch(5, 0, v, absl::MakeSpan(s1));
  AddCountSketch(5, 0, v, absl::MakeSpan(s2));
  AddCountSketch(6, 0, v, absl::MakeSpan(s3));
  EXPECT_EQ(s1, s2);
  EXPECT_NE(s1, s3);
}

TEST(CountSketchTest, EmptySketchOrVectorIsANoOp) {
  const std::vector<float> v = Gaussian(10, 5);
  std::vector<double> none;
  AddCountSketch(1, 0, v, absl::MakeSpan(none));
  std::vector<double> s(4, 0.0);
  AddCountSketch(1, 0, {}, absl::MakeSpan(s));
  EXPECT_EQ(s, std::vector<double>(4, 0.0));
}

}  // namespace
}  // namespace kernels
}  // namespace terse
