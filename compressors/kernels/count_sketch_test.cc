#include "compressors/kernels/count_sketch.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "compressors/kernels/count_sketch_common.h"
#include "compressors/kernels/randomk.h"
#include "gtest/gtest.h"

namespace terse {
namespace kernels {
namespace {

namespace cs = count_sketch;

double SquaredNorm(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return s;
}

std::vector<float> Gaussian(int64_t d, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(d);
  for (float& x : v) x = normal(gen);
  return v;
}

uint64_t Bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}

void ExpectSameBits(const std::vector<double>& got,
                    const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t j = 0; j < got.size(); ++j) {
    ASSERT_EQ(Bits(got[j]), Bits(want[j]))
        << what << " [" << j << "]: " << got[j] << " vs " << want[j];
  }
}

std::vector<double> Sketch(uint64_t seed, const std::vector<float>& v,
                           int64_t k) {
  std::vector<double> s(k, 0.0);
  AddCountSketch(seed, 0, v, absl::MakeSpan(s));
  return s;
}

// An independent oracle: each bucket's sum in long double (64-bit
// significand), with the terms it received and the sum of their
// magnitudes, for an error bound.
struct Oracle {
  std::vector<long double> sum, magnitude;
  std::vector<int64_t> terms;
};
Oracle Exactish(uint64_t seed, const std::vector<float>& v, int64_t k) {
  Oracle o{std::vector<long double>(k, 0), std::vector<long double>(k, 0),
           std::vector<int64_t>(k, 0)};
  for (size_t i = 0; i < v.size(); ++i) {
    uint64_t j;
    bool positive;
    cs::Hash(seed, static_cast<int64_t>(i), k, &j, &positive);
    o.sum[j] += positive ? v[i] : -static_cast<long double>(v[i]);
    o.magnitude[j] += std::fabs(static_cast<long double>(v[i]));
    ++o.terms[j];
  }
  return o;
}

// The bound of count_sketch.h: half a quantum per term, one rounding to
// double, plus the oracle's own rounding.
void ExpectNearOracle(uint64_t seed, const std::vector<float>& v, int64_t k,
                      const std::string& what) {
  const std::vector<double> got = Sketch(seed, v, k);
  const Oracle o = Exactish(seed, v, k);
  uint32_t max_bits = 0;
  for (float x : v) max_bits = std::max(max_bits, cs::FiniteMagnitudeBits(x));
  const int e = cs::ScaleExponent(max_bits, static_cast<int64_t>(v.size()));
  const long double quantum = std::ldexp(1.0L, -e);
  for (int64_t j = 0; j < k; ++j) {
    const long double bound = o.terms[j] * quantum / 2 +
                              std::fabs(o.sum[j]) * 0x1p-53L +
                              o.terms[j] * o.magnitude[j] * 0x1p-63L;
    ASSERT_LE(std::fabs(got[j] - o.sum[j]), bound)
        << what << " [" << j << "]: " << got[j] << " vs " << double(o.sum[j]);
  }
}

TEST(CountSketchTest, MatchesALongDoubleOracleWithinTheQuantisation) {
  ExpectNearOracle(11, Gaussian(100000, 1), 1024, "gaussian");
  std::vector<float> wide = Gaussian(5000, 2);
  for (size_t i = 0; i < wide.size(); i += 7) wide[i] *= 1e6f;
  for (size_t i = 3; i < wide.size(); i += 11) wide[i] *= 1e-9f;
  ExpectNearOracle(12, wide, 64, "wide range");
  ExpectNearOracle(13, Gaussian(3, 3), 1, "one bucket");
}

// The order-independence that lets a GPU add in parallel: the same integer
// sums taken in reversed order and in a shuffled order give the same bits.
std::vector<double> SketchInOrder(uint64_t seed, const std::vector<float>& v,
                                  int64_t k,
                                  const std::vector<int64_t>& order) {
  uint32_t max_bits = 0;
  for (float x : v) max_bits = std::max(max_bits, cs::FiniteMagnitudeBits(x));
  const int e = cs::ScaleExponent(max_bits, static_cast<int64_t>(v.size()));
  std::vector<int64_t> sums(k, 0);
  for (int64_t i : order) {
    uint64_t j;
    bool positive;
    cs::Hash(seed, i, k, &j, &positive);
    sums[j] += cs::Quantize(positive ? v[i] : -v[i], cs::PowerOfTwo(e));
  }
  std::vector<double> s(k, 0.0);
  for (int64_t j = 0; j < k; ++j) {
    cs::AddToBucket(&s[j], sums[j], 0, cs::PowerOfTwo(-e));
  }
  return s;
}

TEST(CountSketchTest, DoesNotDependOnTheOrderOfTheSums) {
  std::vector<float> v = Gaussian(20000, 4);
  for (size_t i = 0; i < v.size(); i += 13) v[i] *= 1e5f;
  std::vector<int64_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  const std::vector<double> want = Sketch(9, v, 256);
  ExpectSameBits(SketchInOrder(9, v, 256, order), want, "forward");
  std::reverse(order.begin(), order.end());
  ExpectSameBits(SketchInOrder(9, v, 256, order), want, "reversed");
  std::shuffle(order.begin(), order.end(), std::mt19937(5));
  ExpectSameBits(SketchInOrder(9, v, 256, order), want, "shuffled");
}

TEST(CountSketchTest, IsLinearAndTheSameForPiecesAndTheWhole) {
  const std::vector<float> a = Gaussian(1000, 1), b = Gaussian(1000, 2);
  std::vector<float> sum(1000);
  for (int i = 0; i < 1000; ++i) sum[i] = a[i] + b[i];
  std::vector<double> sa(64, 0.0), sb(64, 0.0), ssum(64, 0.0);
  AddCountSketch(7, 0, a, absl::MakeSpan(sa));
  // b in two pieces (each its own scale).
  AddCountSketch(7, 0, absl::MakeConstSpan(b).subspan(0, 400),
                 absl::MakeSpan(sb));
  AddCountSketch(7, 400, absl::MakeConstSpan(b).subspan(400),
                 absl::MakeSpan(sb));
  AddCountSketch(7, 0, sum, absl::MakeSpan(ssum));
  for (int j = 0; j < 64; ++j) {
    // Exact up to float rounding of a[i] + b[i].
    EXPECT_NEAR(sa[j] + sb[j], ssum[j], 1e-4 * (1 + std::fabs(ssum[j])));
  }
  // The pieces agree with the whole to the quantisation (2^-E is below
  // 2^-40 here), far closer than float rounding.
  const std::vector<double> whole = Sketch(7, b, 64);
  for (int j = 0; j < 64; ++j) EXPECT_NEAR(sb[j], whole[j], 1e-9);
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
    const double ratio = SquaredNorm(Sketch(1000 + t, v, k)) / norm2;
    mean += ratio / trials;
    mean_sq += ratio * ratio / trials;
  }
  const double sd = std::sqrt(mean_sq - mean * mean);
  EXPECT_NEAR(mean, 1.0, 4 * sd / std::sqrt(trials));
  EXPECT_NEAR(sd, std::sqrt(2.0 / k), 0.3 * std::sqrt(2.0 / k));
}

TEST(CountSketchTest, IsDeterministicAndDependsOnTheSeed) {
  const std::vector<float> v = Gaussian(300, 4);
  EXPECT_EQ(Sketch(5, v, 16), Sketch(5, v, 16));
  EXPECT_NE(Sketch(5, v, 16), Sketch(6, v, 16));
}

TEST(CountSketchTest, EmptySketchOrVectorIsANoOp) {
  const std::vector<float> v = Gaussian(10, 5);
  std::vector<double> none;
  AddCountSketch(1, 0, v, absl::MakeSpan(none));
  std::vector<double> s(4, 0.0);
  AddCountSketch(1, 0, {}, absl::MakeSpan(s));
  EXPECT_EQ(s, std::vector<double>(4, 0.0));
}

TEST(CountSketchTest, ZerosLeaveEveryBucketAsItWas) {
  std::vector<double> s = {-0.0, 1.5, -2.0, 0.0};
  const std::vector<double> before = s;
  AddCountSketch(3, 0, std::vector<float>(1000, 0.0f), absl::MakeSpan(s));
  AddCountSketch(3, 0, std::vector<float>(7, -0.0f), absl::MakeSpan(s));
  ExpectSameBits(s, before, "zeros");
}

TEST(CountSketchTest, OneValueLandsExactlyInItsBucket) {
  for (float x : {1.0f, -3.25f, 1e-40f, std::numeric_limits<float>::max()}) {
    uint64_t j;
    bool positive;
    cs::Hash(21, 0, 8, &j, &positive);
    std::vector<double> want(8, 0.0);
    want[j] = positive ? double{x} : -double{x};
    ExpectSameBits(Sketch(21, {x}, 8), want, std::to_string(x));
  }
}

// All terms of one magnitude are exact integers at the scale: each bucket
// is exactly (plus signs - minus signs) * the magnitude, at the top and the
// bottom of the float range, with no overflow.
TEST(CountSketchTest, HugeAndTinyMagnitudesAreExact) {
  for (float x : {std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::denorm_min(),
                  std::numeric_limits<float>::min(), 1.0f}) {
    const int64_t n = 70001, k = 32;
    const std::vector<float> v(n, x);
    std::vector<double> want(k, 0.0);
    std::vector<int64_t> count(k, 0);
    for (int64_t i = 0; i < n; ++i) {
      uint64_t j;
      bool positive;
      cs::Hash(8, i, k, &j, &positive);
      count[j] += positive ? 1 : -1;
    }
    for (int64_t j = 0; j < k; ++j) want[j] = count[j] * double{x};
    ExpectSameBits(Sketch(8, v, k), want, std::to_string(x));
  }
  // Mixed: the tiny values are lost next to the huge ones, but nothing
  // overflows and the huge ones stay exact.
  std::vector<float> mixed(1000, 1e-30f);
  mixed[17] = std::numeric_limits<float>::max();
  uint64_t j;
  bool positive;
  cs::Hash(8, 17, 4, &j, &positive);
  const std::vector<double> s = Sketch(8, mixed, 4);
  EXPECT_EQ(s[j],
            (positive ? 1 : -1) * double{std::numeric_limits<float>::max()});
}

TEST(CountSketchTest, NonFiniteValuesPoisonOnlyTheirBuckets) {
  const int64_t k = 16;
  const uint64_t seed = 31;
  std::vector<float> v = Gaussian(500, 6);
  // The signed terms at a few indices, by bucket.
  auto where = [&](int64_t i) {
    uint64_t j;
    bool positive;
    cs::Hash(seed, i, k, &j, &positive);
    return std::make_pair(j, positive);
  };
  const float inf = std::numeric_limits<float>::infinity();
  // Index 0: a NaN. Index 1: +inf as a term. Then two indices of one bucket
  // whose terms are infinities of opposite signs.
  v[0] = std::nanf("0x123");
  v[1] = where(1).second ? inf : -inf;
  int64_t a = 2, b = 3;
  while (where(a).first == where(0).first || where(a).first == where(1).first) {
    ++a;
  }
  b = a + 1;
  while (where(b).first != where(a).first) ++b;
  v[a] = where(a).second ? inf : -inf;
  v[b] = where(b).second ? -inf : inf;
  std::vector<float> finite = v;
  for (int64_t i : {int64_t{0}, int64_t{1}, a, b}) finite[i] = 0.0f;
  std::vector<double> want = Sketch(seed, finite, k);
  const double nan = cs::DoubleFromBits(cs::kCanonicalNaNBits);
  want[where(0).first] = nan;
  if (where(1).first != where(0).first) {
    want[where(1).first] = std::numeric_limits<double>::infinity();
  }
  want[where(a).first] = nan;
  ExpectSameBits(Sketch(seed, v, k), want, "non-finite");
  // A NaN already in the sketch comes out canonical too.
  std::vector<double> s(k, cs::DoubleFromBits(0x7ff8000000000abcull));
  AddCountSketch(seed, 0, v, absl::MakeSpan(s));
  EXPECT_EQ(Bits(s[where(5).first]), cs::kCanonicalNaNBits);
}

TEST(CountSketchCommonTest, ScaleKeepsEveryPartialSumInInt64) {
  // ceil(log2 n) and frexp's exponent, at the edges.
  EXPECT_EQ(cs::ScaleExponent(cs::FloatBits(1.0f), 1), 61);  // 1 = 0.5 * 2.
  EXPECT_EQ(cs::ScaleExponent(cs::FloatBits(1.0f), 2), 60);
  EXPECT_EQ(cs::ScaleExponent(cs::FloatBits(1.0f), 3), 59);
  EXPECT_EQ(cs::ScaleExponent(cs::FloatBits(1.0f), 4), 59);
  EXPECT_EQ(cs::ScaleExponent(cs::FloatBits(0.75f), 1), 62);
  EXPECT_EQ(cs::ScaleExponent(1, 1), 62 + 148);  // denorm_min = 0.5 * 2^-148.
  EXPECT_EQ(cs::ScaleExponent(0, 5), 0);
  for (float m : {std::numeric_limits<float>::max(), 1.0f, 0.999f, 3e-39f,
                  std::numeric_limits<float>::denorm_min()}) {
    for (int64_t n :
         {int64_t{1}, int64_t{2}, int64_t{1000}, int64_t{1} << 27,
          (int64_t{1} << 40) + 1, std::numeric_limits<int64_t>::max()}) {
      int e2;
      std::frexp(m, &e2);
      const int e = cs::ScaleExponent(cs::FloatBits(m), n);
      const int l = static_cast<int>(std::ceil(std::log2(double(n))));
      EXPECT_EQ(e, 62 - l - e2) << m << " " << n;
      // n terms of the largest magnitude fit, whatever their signs.
      const int64_t q = cs::Quantize(m, cs::PowerOfTwo(e));
      EXPECT_LE(static_cast<long double>(q) * n, 0x1p62L) << m << " " << n;
      // And use at least half of the range (below 2^61 terms: beyond,
      // ceil(log2 n) leaves no integer bits).
      if (n < (int64_t{1} << 61)) {
        EXPECT_GE(static_cast<long double>(q) * 2 * n, 0x1p61L) << m << n;
      }
    }
  }
}

// The hash is the one the sketch always had: kernels::SplitMix64 of the
// mixed index, multiply-shift by a 128-bit product, the sign from bit 0.
TEST(CountSketchCommonTest, HashIsSplitMix64AndMultiplyShift) {
  for (uint64_t seed : {uint64_t{0}, uint64_t{7}, ~uint64_t{0}}) {
    for (int64_t i :
         {int64_t{0}, int64_t{1}, int64_t{12345}, int64_t{1} << 40}) {
      for (uint64_t k : {uint64_t{1}, uint64_t{64}, uint64_t{1024},
                         uint64_t{1500}, uint64_t{1} << 40}) {
        uint64_t state =
            seed ^ static_cast<uint64_t>(i) * 0xd1b54a32d192ed03ull;
        uint64_t copy = state;
        const uint64_t bits = SplitMix64(&state);
        EXPECT_EQ(cs::SplitMix64(&copy), bits);
        EXPECT_EQ(copy, state);
        uint64_t bucket;
        bool positive;
        cs::Hash(seed, i, k, &bucket, &positive);
        EXPECT_EQ(bucket,
                  static_cast<uint64_t>(
                      (static_cast<unsigned __int128>(bits >> 1) * k) >> 63));
        EXPECT_LT(bucket, k);
        EXPECT_EQ(positive, (bits & 1) != 0);
      }
    }
  }
  EXPECT_EQ(cs::MulHigh(~uint64_t{0}, ~uint64_t{0}), ~uint64_t{0} - 1);
}

TEST(CountSketchCommonTest, QuantizeRoundsTiesToEven) {
  EXPECT_EQ(cs::Quantize(0.5f, 1.0), 0);
  EXPECT_EQ(cs::Quantize(1.5f, 1.0), 2);
  EXPECT_EQ(cs::Quantize(2.5f, 1.0), 2);
  EXPECT_EQ(cs::Quantize(-2.5f, 1.0), -2);
  EXPECT_EQ(cs::Quantize(-0.75f, 4.0), -3);
  // The host's rounding without libm is llrint's, over the scales a sketch
  // uses and values with and without fractions (ties included).
  std::mt19937 gen(17);
  for (int t = 0; t < 200000; ++t) {
    const uint32_t bits = gen();
    if ((bits & 0x7f800000u) == 0x7f800000u) continue;  // Not finite.
    float f;
    std::memcpy(&f, &bits, 4);
    const int e = static_cast<int>(gen() % 340) - 129;
    const double x = static_cast<double>(f) * cs::PowerOfTwo(e);
    if (std::fabs(x) >= 0x1p62) continue;
    ASSERT_EQ(cs::Quantize(f, cs::PowerOfTwo(e)), std::llrint(x)) << f << e;
  }
  for (float f : {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 8388607.5f, -4194303.5f}) {
    EXPECT_EQ(cs::Quantize(f, 1.0), std::llrint(f)) << f;
  }
  EXPECT_EQ(cs::BitWidth(0), 0);
  EXPECT_EQ(cs::BitWidth(1), 1);
  EXPECT_EQ(cs::BitWidth(~uint64_t{0}), 64);
  EXPECT_EQ(cs::BitWidth(uint64_t{1} << 40), 41);
}

}  // namespace
}  // namespace kernels
}  // namespace terse
