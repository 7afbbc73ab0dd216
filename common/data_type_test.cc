#include "common/data_type.h"

#include "common/tensor_view.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

TEST(DataTypeTest, SizesAndNamesRoundTrip) {
  const std::pair<DataType, size_t> expected[] = {
      {DataType::kFloat32, 4}, {DataType::kFloat16, 2}, {DataType::kBFloat16, 2},
      {DataType::kFloat64, 8}, {DataType::kInt32, 4},   {DataType::kInt64, 8},
      {DataType::kUInt8, 1},   {DataType::kInt8, 1},    {DataType::kInt16, 2},
      {DataType::kBool, 1}};
  for (auto [dtype, size] : expected) {
    EXPECT_EQ(DataTypeSize(dtype), size);
    absl::StatusOr<DataType> parsed = ParseDataType(DataTypeName(dtype));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, dtype);
  }
  EXPECT_EQ(*ParseDataType("bfloat16"), DataType::kBFloat16);
  EXPECT_FALSE(ParseDataType("f8").ok());
  EXPECT_EQ(*ParseDataType("int8"), DataType::kInt8);
  EXPECT_EQ(*ParseDataType("int16"), DataType::kInt16);
  // Wire values are fixed: the control protocol carries them.
  EXPECT_EQ(static_cast<int>(DataType::kInt8), 7);
  EXPECT_EQ(static_cast<int>(DataType::kInt16), 8);
  EXPECT_EQ(static_cast<int>(DataType::kBool), 9);
  EXPECT_TRUE(IsValidDataType(9));
  EXPECT_FALSE(IsValidDataType(10));
  EXPECT_FALSE(IsValidDataType(-1));
}

TEST(TensorViewTest, BytesAndDevice) {
  float buf[6];
  TensorView v(buf, 6, DataType::kFloat32);
  EXPECT_EQ(v.bytes(), 24);
  EXPECT_TRUE(v.device.is_cpu());
  TensorView g(nullptr, 3, DataType::kBFloat16, Device::Cuda(1));
  EXPECT_EQ(g.bytes(), 6);
  EXPECT_EQ(g.device.ToString(), "cuda:1");
  EXPECT_NE(g.device, Device::Cpu());
}

}  // namespace
}  // namespace terse
