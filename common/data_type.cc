#include "common/data_type.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace terse {
namespace {

struct TypeInfo {
  DataType dtype;
  size_t size;
  const char* short_name;
  const char* long_name;
};

constexpr TypeInfo kTypes[kNumDataTypes] = {
    {DataType::kFloat32, 4, "f32", "float32"},
    {DataType::kFloat16, 2, "f16", "float16"},
    {DataType::kBFloat16, 2, "bf16", "bfloat16"},
    {DataType::kFloat64, 8, "f64", "float64"},
    {DataType::kInt32, 4, "i32", "int32"},
    {DataType::kInt64, 8, "i64", "int64"},
    {DataType::kUInt8, 1, "u8", "uint8"},
    {DataType::kInt8, 1, "i8", "int8"},
    {DataType::kInt16, 2, "i16", "int16"},
    {DataType::kBool, 1, "bool", "bool"},
};

const TypeInfo& Info(DataType dtype) {
  return kTypes[static_cast<int>(dtype)];
}

}  // namespace

size_t DataTypeSize(DataType dtype) { return Info(dtype).size; }

absl::string_view DataTypeName(DataType dtype) {
  return Info(dtype).short_name;
}

absl::StatusOr<DataType> ParseDataType(absl::string_view name) {
  for (const TypeInfo& info : kTypes) {
    if (name == info.short_name || name == info.long_name) return info.dtype;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown data type '", name,
                   "'; accepted: f32 f16 bf16 f64 i32 i64 u8 i8 i16 bool"));
}

bool IsValidDataType(int32_t value) {
  return value >= 0 && value < kNumDataTypes;
}

bool IsFloatingPoint(DataType dtype) {
  return dtype == DataType::kFloat32 || dtype == DataType::kFloat16 ||
         dtype == DataType::kBFloat16 || dtype == DataType::kFloat64;
}

}  // namespace terse
