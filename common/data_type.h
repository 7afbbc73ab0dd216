// Element types terse moves and reduces, with their sizes and names.
#ifndef TERSE_COMMON_DATA_TYPE_H_
#define TERSE_COMMON_DATA_TYPE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace terse {

// The numeric values are part of the control-plane protocol (see
// common/control.proto); never renumber.
enum class DataType : int32_t {
  kFloat32 = 0,
  kFloat16 = 1,
  kBFloat16 = 2,
  kFloat64 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kUInt8 = 6,
  kInt8 = 7,
  kInt16 = 8,
  // Moved (broadcast, allgather) but not reduced: allreduce refuses it (see
  // collectives/reduce.h CheckReduceSupported).
  kBool = 9,
};

inline constexpr int kNumDataTypes = 10;

// Bytes per element.
size_t DataTypeSize(DataType dtype);

// Short lower-case name: "f32", "f16", "bf16", "f64", "i32", "i64", "u8",
// "i8", "i16", "bool".
absl::string_view DataTypeName(DataType dtype);

// Inverse of DataTypeName; also accepts the long names "float32", "float16",
// "bfloat16", "float64", "int32", "int64", "uint8", "int8", "int16", "bool".
// InvalidArgument otherwise.
absl::StatusOr<DataType> ParseDataType(absl::string_view name);

// Checks that `value` is one of the enumerators (for values read off the wire).
bool IsValidDataType(int32_t value);

bool IsFloatingPoint(DataType dtype);

}  // namespace terse

#endif  // TERSE_COMMON_DATA_TYPE_H_
