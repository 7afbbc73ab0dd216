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
