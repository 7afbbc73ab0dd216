#include "engine/scale.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "collectives/reduce.h"

namespace terse {
namespace {

template <typename T>
void ScaleFloat(T* dst, const T* src, int64_t count, double factor) {
  const T f = static_cast<T>(factor);
  for (int64_t i = 0; i < count; ++i) dst[i] = src[i] * f;
}

template <typename T>
void ScaleInt(T* dst, const T* src, int64_t count, double factor) {
  for (int64_t i = 0; i < count; ++i) {
    dst[i] = static_cast<T>(std::llround(static_cast<double>(src[i]) * factor));
  }
}

void ScaleHalf(void* dst, const void* src, int64_t count, DataType dtype,
               double factor) {
  constexpr int64_t kChunk = 4096;
  float tmp[kChunk];
  const float f = static_cast<float>(factor);
  const uint16_t* in = static_cast<const uint16_t*>(src);
  uint16_t* out = static_cast<uint16_t*>(dst);
  for (int64_t start = 0; start < count; start += kChunk) {
    const int64_t n = std::min(kChunk, count - start);
    HalfToFloatInto(in + start, tmp, n, dtype);
    for (int64_t i = 0; i < n; ++i) tmp[i] *= f;
    FloatToHalfInto(tmp, out + start, n, dtype);
  }
}

}  // namespace

void ScaledCopy(void* dst, const void* src, int64_t count, DataType dtype,
                double factor) {
  if (count <= 0) return;
  if (factor == 1.0) {
    if (dst != src) {
      std::memcpy(dst, src, static_cast<size_t>(count) * DataTypeSize(dtype));
    }
    return;
  }
  switch (dtype) {
    case DataType::kFloat32:
      ScaleFloat(static_cast<float*>(dst), static_cast<const float*>(src),
                 count, factor);
      return;
    case DataType::kFloat64:
      ScaleFloat(static_cast<double*>(dst), static_cast<const double*>(src),
                 count, factor);
      return;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      ScaleHalf(dst, src, count, dtype, factor);
      return;
    case DataType::kInt32:
      ScaleInt(static_cast<int32_t*>(dst), static_cast<const int32_t*>(src),
               count, factor);
      return;
    case DataType::kInt64:
      ScaleInt(static_cast<int64_t*>(dst), static_cast<const int64_t*>(src),
               count, factor);
      return;
    case DataType::kUInt8:
      ScaleInt(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src),
               count, factor);
      return;
    case DataType::kInt8:
      ScaleInt(static_cast<int8_t*>(dst), static_cast<const int8_t*>(src),
               count, factor);
      return;
    case DataType::kInt16:
      ScaleInt(static_cast<int16_t*>(dst), static_cast<const int16_t*>(src),
               count, factor);
      return;
    case DataType::kBool:  // Never scaled (allreduce refuses bool).
      return;
  }
}

}  // namespace terse
