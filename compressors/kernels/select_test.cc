#include "compressors/kernels/select.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "compressors/kernels/topk.h"
#include "gtest/gtest.h"

namespace terse {
namespace kernels {
namespace {

uint32_t Key(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b & 0x7fffffffu;
}

std::vector<uint32_t> BruteAtLeast(const std::vector<float>& x, uint32_t key) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < x.size(); ++i) {
    if (Key(x[i]) >= key) out.push_back(static_cast<uint32_t>(i));
  }
  return out;
}

std::vector<uint32_t> Exact(const std::vector<float>& x, int64_t n) {
  std::vector<uint32_t> out(n);
  TopK(x.data(), static_cast<int64_t>(x.size()), n, out.data(), 1);
  return out;
}

enum class Shape {
  kGaussian,
  kUniform,
  kHeavyTail,
  kMostlyZero,
  kConstant,
  kSorted,
  kQuantized
};

std::vector<float> Make(Shape shape, int64_t d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> x(d);
  for (int64_t i = 0; i < d; ++i) {
    switch (shape) {
      case Shape::kGaussian:
        x[i] = normal(rng);
        break;
      case Shape::kUniform:
        x[i] = uniform(rng);
        break;
      case Shape::kHeavyTail: {
        const float u = std::max(1e-7f, std::fabs(uniform(rng)));
        x[i] = std::pow(u, -1.5f) * (rng() & 1 ? 1.0f : -1.0f);
        break;
      }
      case Shape::kMostlyZero:
        x[i] = (rng() % 1000 == 0) ? normal(rng) : 0.0f;
        break;
      case Shape::kConstant:
        x[i] = -0.75f;
        break;
      case Shape::kSorted:
        x[i] = static_cast<float>(i) * 1e-3f;
        break;
      case Shape::kQuantized:
        x[i] = static_cast<float>(rng() % 9) - 4.0f;
        break;
    }
  }
  return x;
}

TEST(SelectTest, SelectAtLeastMatchesBruteForce) {
  std::vector<float> x = Make(Shape::kGaussian, 200003, 1);
  x[5] = std::numeric_limits<float>::quiet_NaN();
  x[7] = -std::numeric_limits<float>::infinity();
  for (float tau : {0.0f, 0.5f, 2.0f, 10.0f}) {
    const std::vector<uint32_t> ref = BruteAtLeast(x, ThresholdKey(tau));
    for (int threads : {1, 3}) {
      std::vector<uint32_t> got = {99};
      const int64_t n = SelectAtLeast(x.data(), x.size(), ThresholdKey(tau),
                                      x.size(), &got, threads);
      EXPECT_EQ(n, static_cast<int64_t>(ref.size()));
      EXPECT_EQ(got, ref);
      EXPECT_EQ(CountAtLeast(x.data(), x.size(), ThresholdKey(tau), threads),
                n);
      // Over the cap: exact count, nothing stored.
      if (n > 0) {
        got = {99};
        EXPECT_EQ(SelectAtLeast(x.data(), x.size(), ThresholdKey(tau), n - 1,
                                &got, threads),
                  n);
        EXPECT_TRUE(got.empty());
      }
    }
  }
  EXPECT_EQ(ThresholdKey(-2.0f), ThresholdKey(2.0f));
}

class SelectShapeTest : public ::testing::TestWithParam<Shape> {};

TEST_P(SelectShapeTest, SampledTopKWithinBoundsAndIsATopSet) {
  const int64_t d = 300007;
  const std::vector<float> x = Make(GetParam(), d, 2);
  for (int64_t k : {int64_t{1}, int64_t{10}, int64_t{3000}, d / 10, d - 5}) {
    for (uint64_t seed : {0u, 7u}) {
      SampledTopKOptions opt;
      opt.seed = seed;
      opt.num_threads = 2;
      std::vector<uint32_t> got;
      SelectStats stats;
      SampledTopK(x.data(), d, k, opt, &got, &stats);
      const int64_t n = static_cast<int64_t>(got.size());
      ASSERT_LE(n, k) << "k=" << k;
      ASSERT_GE(n, static_cast<int64_t>(std::ceil(0.8 * k))) << "k=" << k;
      ASSERT_LE(stats.passes, opt.max_adjust + 1);
      // Whatever n is, the selection is the exact top-n (ties included).
      ASSERT_EQ(got, Exact(x, n)) << "k=" << k;
      // Deterministic and thread-count independent.
      opt.num_threads = 1;
      std::vector<uint32_t> again;
      SampledTopK(x.data(), d, k, opt, &again);
      ASSERT_EQ(again, got);
    }
  }
}

TEST_P(SelectShapeTest, ThresholdSearchWithinBoundsAndIsATopSet) {
  const int64_t d = 200003;
  const std::vector<float> x = Make(GetParam(), d, 3);
  for (int64_t k : {int64_t{1}, int64_t{10}, int64_t{2000}, d / 3, d - 1}) {
    ThresholdSearchOptions opt;
    opt.num_threads = 2;
    std::vector<uint32_t> got;
    SelectStats stats;
    ThresholdSearch(x.data(), d, k, opt, &got, &stats);
    const int64_t n = static_cast<int64_t>(got.size());
    ASSERT_GE(n, k) << "k=" << k;
    ASSERT_LT(n, std::max<int64_t>(2 * k, k + 1)) << "k=" << k;
    if (stats.fell_back_to_exact) {
      ASSERT_EQ(n, k);
    }
    ASSERT_EQ(got, Exact(x, n)) << "k=" << k;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, SelectShapeTest,
                         ::testing::Values(Shape::kGaussian, Shape::kUniform,
                                           Shape::kHeavyTail,
                                           Shape::kMostlyZero, Shape::kConstant,
                                           Shape::kSorted, Shape::kQuantized));

TEST(SelectTest, SampledTopKUsuallyExactOnGaussian) {
  const int64_t d = 1 << 20;
  const std::vector<float> x = Make(Shape::kGaussian, d, 4);
  std::vector<uint32_t> got;
  SelectStats stats;
  SampledTopK(x.data(), d, d / 100, SampledTopKOptions(), &got, &stats);
  EXPECT_EQ(static_cast<int64_t>(got.size()), d / 100);
  EXPECT_EQ(stats.passes, 1);
  EXPECT_FALSE(stats.fell_back_to_exact);
}

TEST(SelectTest, NonFiniteInputsFallBack) {
  std::vector<float> x = Make(Shape::kGaussian, 100000, 5);
  x[10] = std::numeric_limits<float>::infinity();
  x[20] = std::numeric_limits<float>::quiet_NaN();
  std::vector<uint32_t> got;
  ThresholdSearch(x.data(), x.size(), 50, ThresholdSearchOptions(), &got);
  EXPECT_EQ(got, Exact(x, 50));
  SampledTopK(x.data(), x.size(), 50, SampledTopKOptions(), &got);
  EXPECT_EQ(got, Exact(x, got.size()));
  EXPECT_TRUE(std::binary_search(got.begin(), got.end(), 10u));
  EXPECT_TRUE(std::binary_search(got.begin(), got.end(), 20u));
}

TEST(SelectTest, ZeroK) {
  const std::vector<float> x = Make(Shape::kGaussian, 100000, 6);
  std::vector<uint32_t> got = {1};
  SampledTopK(x.data(), x.size(), 0, SampledTopKOptions(), &got);
  EXPECT_TRUE(got.empty());
  got = {1};
  ThresholdSearch(x.data(), x.size(), 0, ThresholdSearchOptions(), &got);
  EXPECT_TRUE(got.empty());
}

}  // namespace
}  // namespace kernels
}  // namespace terse
