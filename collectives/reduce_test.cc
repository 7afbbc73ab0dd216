#include "collectives/reduce.h"

#include <cstdint>
#include <vector>

#include "common/half.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

TEST(ReduceTest, DivideHalfMatchesScalarRoundingOverManyBlocks) {
  for (DataType dtype : {DataType::kFloat16, DataType::kBFloat16}) {
    const bool half = dtype == DataType::kFloat16;
    std::vector<uint16_t> v(3000);
    for (size_t i = 0; i < v.size(); ++i) {
      float x = 0.37f * static_cast<float>(i) - 400.0f;
      v[i] = half ? FloatToHalf(x) : FloatToBFloat16(x);
    }
    std::vector<uint16_t> want(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      float x = (half ? HalfToFloat(v[i]) : BFloat16ToFloat(v[i])) / 3.0f;
      want[i] = half ? FloatToHalf(x) : FloatToBFloat16(x);
    }
    DivideInPlace(v.data(), static_cast<int64_t>(v.size()), dtype, 3);
    EXPECT_EQ(v, want) << DataTypeName(dtype);
  }
}

TEST(ReduceTest, UInt8SumWrapsModulo256) {
  std::vector<uint8_t> acc = {250, 1, 128}, in = {10, 2, 128};
  ReduceInPlace(acc.data(), in.data(), 3, DataType::kUInt8, ReduceOp::kSum);
  EXPECT_EQ(acc, (std::vector<uint8_t>{4, 3, 0}));
}

TEST(ReduceTest, Int8AndInt16SumsWrapLikeTwosComplement) {
  std::vector<int8_t> a8 = {127, -128, 100, -5}, b8 = {1, -1, 100, 3};
  ReduceInPlace(a8.data(), b8.data(), 4, DataType::kInt8, ReduceOp::kSum);
  EXPECT_EQ(a8, (std::vector<int8_t>{-128, 127, -56, -2}));
  std::vector<int16_t> a16 = {32767, -32768, 20000}, b16 = {1, -1, 20000};
  ReduceInPlace(a16.data(), b16.data(), 3, DataType::kInt16, ReduceOp::kSum);
  EXPECT_EQ(a16, (std::vector<int16_t>{-32768, 32767, -25536}));
  std::vector<int8_t> lo = {-3, 4}, hi = {2, -9};
  ReduceInPlace(lo.data(), hi.data(), 2, DataType::kInt8, ReduceOp::kMin);
  EXPECT_EQ(lo, (std::vector<int8_t>{-3, -9}));
}

TEST(ReduceTest, BoolIsMovedButNotReduced) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax}) {
    EXPECT_FALSE(CheckReduceSupported(DataType::kBool, op).ok());
  }
  EXPECT_TRUE(CheckReduceSupported(DataType::kInt8, ReduceOp::kSum).ok());
  EXPECT_FALSE(CheckReduceSupported(DataType::kInt16, ReduceOp::kAverage).ok());
}

TEST(ReduceTest, HalfSumRoundsOncePerElement) {
  // 1 + 2^-11 is not a half; fp32 accumulation then one rounding (to even)
  // gives 1.
  uint16_t acc = FloatToHalf(1.0f);
  uint16_t in = FloatToHalf(0.00048828125f);  // 2^-11
  ReduceInPlace(&acc, &in, 1, DataType::kFloat16, ReduceOp::kSum);
  EXPECT_EQ(HalfToFloat(acc), 1.0f);
}

TEST(ReduceTest, ProductWrapsIntegersLikeUnsignedArithmetic) {
  int8_t acc[3] = {16, -128, 7};
  const int8_t in[3] = {16, -1, -3};
  ReduceInPlace(acc, in, 3, DataType::kInt8, ReduceOp::kProduct);
  EXPECT_EQ(acc[0], 0);     // 256 wraps to 0.
  EXPECT_EQ(acc[1], -128);  // 128 wraps to -128.
  EXPECT_EQ(acc[2], -21);
  int64_t big = int64_t{1} << 62;
  const int64_t four = 4;
  ReduceInPlace(&big, &four, 1, DataType::kInt64, ReduceOp::kProduct);
  EXPECT_EQ(big, 0);
}

TEST(ReduceTest, AdasumOperatorClosedForms) {
  // Orthogonal vectors add; equal vectors give themselves back.
  double a[2] = {3.0, 0.0};
  const double b[2] = {0.0, 2.0};
  AdasumCombine(a, b, 2, DataType::kFloat64);
  EXPECT_EQ(a[0], 3.0);
  EXPECT_EQ(a[1], 2.0);
  double c[3] = {1.0, -2.0, 0.5};
  const double d[3] = {1.0, -2.0, 0.5};
  AdasumCombine(c, d, 3, DataType::kFloat64);
  EXPECT_DOUBLE_EQ(c[0], 1.0);
  EXPECT_DOUBLE_EQ(c[1], -2.0);
  // a = (1, 1), b = (2, 0): a.b = 2, |a|^2 = 2, |b|^2 = 4, so
  // (1 - 2/4) a + (1 - 2/8) b = (0.5, 0.5) + (1.5, 0) = (2, 0.5).
  float e[2] = {1.0f, 1.0f};
  const float f[2] = {2.0f, 0.0f};
  AdasumCombine(e, f, 2, DataType::kFloat32);
  EXPECT_EQ(e[0], 2.0f);
  EXPECT_EQ(e[1], 0.5f);
  // A zero vector leaves its partner as it is (coefficient 1 both ways).
  float zero[2] = {0.0f, 0.0f};
  AdasumCombine(zero, f, 2, DataType::kFloat32);
  EXPECT_EQ(zero[0], 2.0f);
  EXPECT_EQ(zero[1], 0.0f);
  uint16_t h[2] = {FloatToHalf(1.0f), FloatToHalf(1.0f)};
  const uint16_t g[2] = {FloatToHalf(2.0f), FloatToHalf(0.0f)};
  AdasumCombine(h, g, 2, DataType::kFloat16);
  EXPECT_EQ(HalfToFloat(h[0]), 2.0f);
  EXPECT_EQ(HalfToFloat(h[1]), 0.5f);
}

TEST(ReduceTest, AdasumNeedsFloatsAndPowerOfTwoRanks) {
  EXPECT_FALSE(
      CheckReduceSupported(DataType::kInt32, ReduceOp::kAdasum).ok());
  EXPECT_TRUE(
      CheckReduceSupported(DataType::kBFloat16, ReduceOp::kAdasum).ok());
  EXPECT_TRUE(CheckAdasumRanks(ReduceOp::kAdasum, 4, "x").ok());
  EXPECT_FALSE(CheckAdasumRanks(ReduceOp::kAdasum, 3, "x").ok());
  EXPECT_TRUE(CheckAdasumRanks(ReduceOp::kSum, 3, "x").ok());
  EXPECT_FALSE(CheckReduceSupported(DataType::kFloat32,
                                    static_cast<ReduceOp>(6)).ok());
}

}  // namespace
}  // namespace terse
