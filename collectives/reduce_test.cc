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

}  // namespace
}  // namespace terse
