#include "common/half.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace terse {
namespace {

// Independent oracle: the value of a half bit pattern computed in double from
// the format's definition, and nearest-even rounding by search over the table
// of all finite non-negative halves.
double HalfValue(uint16_t h) {
  int sign = (h >> 15) ? -1 : 1;
  int exponent = (h >> 10) & 0x1f;
  int mantissa = h & 0x3ff;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  if (exponent == 31) {
    return mantissa ? std::numeric_limits<double>::quiet_NaN()
                    : sign * std::numeric_limits<double>::infinity();
  }
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

uint16_t ReferenceFloatToHalf(float f) {
  static const std::vector<double> table = [] {
    std::vector<double> t;
    for (uint32_t h = 0; h < 0x7c00; ++h) t.push_back(HalfValue(h));
    return t;
  }();
  uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  double a = std::fabs(static_cast<double>(f));
  if (std::isinf(a)) return sign | 0x7c00;
  // Values at or beyond max + half an ulp (65520) overflow to infinity.
  if (a >= 65520.0) return sign | 0x7c00;
  auto it = std::lower_bound(table.begin(), table.end(), a);
  size_t hi = it - table.begin();
  if (hi < table.size() && table[hi] == a) return sign | hi;
  size_t lo = hi - 1;
  double up = hi < table.size() ? table[hi] : 65536.0;  // 65536: next "ulp".
  double d_lo = a - table[lo], d_hi = up - a;
  size_t pick = (d_lo < d_hi) ? lo : (d_hi < d_lo) ? hi : ((lo & 1) ? hi : lo);
  if (pick >= table.size()) return sign | 0x7c00;
  return static_cast<uint16_t>(sign | pick);
}

uint16_t ReferenceFloatToBFloat16(float f) {
  uint32_t x = FloatBits(f);
  uint16_t lo = static_cast<uint16_t>(x >> 16);
  if ((x & 0xffff) == 0) return lo;
  uint16_t hi = lo + 1;  // Next bf16 away from zero (may become infinity).
  double v = std::fabs(static_cast<double>(f));
  double d_lo = v - std::fabs(static_cast<double>(BFloat16ToFloat(lo)));
  // The step past the largest finite bf16 is 2^128, written as infinity.
  double up = (hi & 0x7fff) == 0x7f80
                  ? std::ldexp(1.0, 128)
                  : std::fabs(static_cast<double>(BFloat16ToFloat(hi)));
  double d_hi = up - v;
  if (d_lo < d_hi) return lo;
  if (d_hi < d_lo) return hi;
  return (lo & 1) ? hi : lo;
}

// A sample of floats: a strided sweep of every bit pattern, exact midpoints
// between neighbouring halves (the ties), and the edges of both formats.
std::vector<float> SampleFloats() {
  std::vector<float> v;
  for (uint64_t x = 0; x <= 0xffffffffull; x += 4099) {
    float f = BitsToFloat(static_cast<uint32_t>(x));
    if (!std::isnan(f)) v.push_back(f);
  }
  for (uint32_t h = 0; h < 0x7bff; ++h) {
    double mid = (HalfValue(h) + HalfValue(h + 1)) / 2;
    v.push_back(static_cast<float>(mid));
    v.push_back(-static_cast<float>(mid));
    v.push_back(std::nextafter(static_cast<float>(mid), 0.0f));
    v.push_back(std::nextafter(static_cast<float>(mid), 1e9f));
  }
  for (float f : {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 65536.0f,
                  5.9604645e-08f, 2.9802322e-08f, 2.98023259e-08f,
                  6.1035156e-05f, 3.4028235e38f, -3.4028235e38f,
                  std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::denorm_min()}) {
    v.push_back(f);
  }
  return v;
}

TEST(HalfTest, EveryHalfSurvivesTheRoundTrip) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    float f = HalfToFloat(static_cast<uint16_t>(h));
    double expected = HalfValue(static_cast<uint16_t>(h));
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(f)) << h;
      EXPECT_TRUE(FloatToHalf(f) & 0x0200) << "NaN must stay quiet: " << h;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), expected) << h;
    ASSERT_EQ(FloatToHalf(f), h) << h;
  }
}

TEST(HalfTest, FloatToHalfRoundsToNearestEven) {
  for (float f : SampleFloats()) {
    ASSERT_EQ(FloatToHalf(f), ReferenceFloatToHalf(f))
        << "f=" << f << " bits=" << std::hex << FloatBits(f);
  }
}

TEST(HalfTest, BulkMatchesScalarIncludingNaN) {
  std::vector<float> in = SampleFloats();
  in.push_back(std::numeric_limits<float>::quiet_NaN());
  in.push_back(BitsToFloat(0xff800001u));  // Signalling NaN, negative.
  std::vector<uint16_t> half(in.size()), bf(in.size());
  FloatToHalf(in.data(), half.data(), in.size());
  FloatToBFloat16(in.data(), bf.data(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(half[i], FloatToHalf(in[i])) << i;
    ASSERT_EQ(bf[i], FloatToBFloat16(in[i])) << i;
  }
  std::vector<uint16_t> all(65536);
  for (uint32_t h = 0; h <= 0xffff; ++h) all[h] = static_cast<uint16_t>(h);
  std::vector<float> out(all.size()), out_bf(all.size());
  HalfToFloat(all.data(), out.data(), all.size());
  BFloat16ToFloat(all.data(), out_bf.data(), all.size());
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    ASSERT_EQ(FloatBits(out[h]), FloatBits(HalfToFloat(all[h]))) << h;
    ASSERT_EQ(FloatBits(out_bf[h]), FloatBits(BFloat16ToFloat(all[h]))) << h;
  }
}

TEST(BFloat16Test, FloatToBFloat16RoundsToNearestEven) {
  std::vector<float> sample = SampleFloats();
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    uint32_t hi = rng() & 0xffff0000u;
    sample.push_back(BitsToFloat(hi | 0x8000u));  // Exact ties.
  }
  for (float f : sample) {
    if (std::isinf(f) || std::isnan(f)) continue;
    ASSERT_EQ(FloatToBFloat16(f), ReferenceFloatToBFloat16(f))
        << "bits=" << std::hex << FloatBits(f);
  }
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(FloatToBFloat16(3.4028235e38f), 0x7f80);  // Overflows to inf.
}

TEST(BFloat16Test, EveryBFloat16SurvivesTheRoundTrip) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    float f = BFloat16ToFloat(static_cast<uint16_t>(b));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(f))));
      continue;
    }
    ASSERT_EQ(FloatToBFloat16(f), b);
  }
}

}  // namespace
}  // namespace terse
