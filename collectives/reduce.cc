#include "collectives/reduce.h"

#include <algorithm>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "common/half.h"

namespace terse {
namespace {

// Integer sums wrap modulo 2^bits (two's complement), as numpy's and torch's
// do for int8/int16: computed on the unsigned type, so no signed overflow.
template <typename T>
void WrapAdd(T* acc, const T* in, int64_t count) {
  using U = std::make_unsigned_t<T>;
  for (int64_t i = 0; i < count; ++i) {
    acc[i] = static_cast<T>(static_cast<U>(static_cast<U>(acc[i]) +
                                           static_cast<U>(in[i])));
  }
}

// Integer products wrap likewise. Operands narrower than int are widened to
// unsigned int (not int) first, so the multiplication cannot overflow a
// signed type.
template <typename T>
void WrapMultiply(T* acc, const T* in, int64_t count) {
  using U = std::make_unsigned_t<T>;
  using W = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;
  for (int64_t i = 0; i < count; ++i) {
    acc[i] = static_cast<T>(static_cast<U>(
        static_cast<W>(static_cast<U>(acc[i])) *
        static_cast<W>(static_cast<U>(in[i]))));
  }
}

template <typename T>
void ReduceTyped(T* acc, const T* in, int64_t count, ReduceOp op) {
  if constexpr (std::is_integral_v<T>) {
    if (op == ReduceOp::kSum || op == ReduceOp::kAverage) {
      return WrapAdd(acc, in, count);
    }
    if (op == ReduceOp::kProduct) return WrapMultiply(acc, in, count);
  }
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      for (int64_t i = 0; i < count; ++i) acc[i] += in[i];
      break;
    case ReduceOp::kMin:
      for (int64_t i = 0; i < count; ++i) acc[i] = std::min(acc[i], in[i]);
      break;
    case ReduceOp::kMax:
      for (int64_t i = 0; i < count; ++i) acc[i] = std::max(acc[i], in[i]);
      break;
    case ReduceOp::kProduct:
      for (int64_t i = 0; i < count; ++i) acc[i] *= in[i];
      break;
  }
}

// Half-precision elements go through fp32 in blocks so the conversions use
// the vectorised bulk paths of common/half.h.
template <typename ToFloat, typename FromFloat>
void ReduceHalf(uint16_t* acc, const uint16_t* in, int64_t count, ReduceOp op,
                ToFloat to_float, FromFloat from_float) {
  constexpr int64_t kBlock = 1024;
  float a[kBlock], b[kBlock];
  for (int64_t start = 0; start < count; start += kBlock) {
    int64_t n = std::min(kBlock, count - start);
    to_float(acc + start, a, n);
    to_float(in + start, b, n);
    ReduceTyped(a, b, n, op);
    from_float(a, acc + start, n);
  }
}

void HalfToFloatBulk(const uint16_t* in, float* out, int64_t n) {
  HalfToFloat(in, out, static_cast<size_t>(n));
}
void FloatToHalfBulk(const float* in, uint16_t* out, int64_t n) {
  FloatToHalf(in, out, static_cast<size_t>(n));
}
void BFloat16ToFloatBulk(const uint16_t* in, float* out, int64_t n) {
  BFloat16ToFloat(in, out, static_cast<size_t>(n));
}
void FloatToBFloat16Bulk(const float* in, uint16_t* out, int64_t n) {
  FloatToBFloat16(in, out, static_cast<size_t>(n));
}

}  // namespace

absl::Status CheckReduceSupported(DataType dtype, ReduceOp op) {
  if (dtype == DataType::kBool) {
    return absl::InvalidArgumentError(
        "allreduce of bool is not supported (as in Horovod over MPI, where "
        "MPI defines no sum of MPI_C_BOOL); cast to uint8 or int32, or use "
        "allgather/broadcast");
  }
  const int32_t code = static_cast<int32_t>(op);
  if (code < static_cast<int32_t>(ReduceOp::kSum) ||
      code > static_cast<int32_t>(ReduceOp::kProduct)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown reduce op value ", code,
                     "; accepted: sum, average, min, max, product"));
  }
  if (op == ReduceOp::kAverage && !IsFloatingPoint(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("reduce op average is not defined for integer type ",
                     DataTypeName(dtype), "; use sum and divide"));
  }
  return absl::OkStatus();
}

void ReduceInPlace(void* acc, const void* in, int64_t count, DataType dtype,
                   ReduceOp op) {
  switch (dtype) {
    case DataType::kFloat32:
      return ReduceTyped(static_cast<float*>(acc),
                         static_cast<const float*>(in), count, op);
    case DataType::kFloat64:
      return ReduceTyped(static_cast<double*>(acc),
                         static_cast<const double*>(in), count, op);
    case DataType::kInt32:
      return ReduceTyped(static_cast<int32_t*>(acc),
                         static_cast<const int32_t*>(in), count, op);
    case DataType::kInt64:
      return ReduceTyped(static_cast<int64_t*>(acc),
                         static_cast<const int64_t*>(in), count, op);
    case DataType::kUInt8:
      return ReduceTyped(static_cast<uint8_t*>(acc),
                         static_cast<const uint8_t*>(in), count, op);
    case DataType::kInt8:
      return ReduceTyped(static_cast<int8_t*>(acc),
                         static_cast<const int8_t*>(in), count, op);
    case DataType::kInt16:
      return ReduceTyped(static_cast<int16_t*>(acc),
                         static_cast<const int16_t*>(in), count, op);
    case DataType::kBool:
      // Refused by CheckReduceSupported; logical OR / AND if ever reached.
      return ReduceTyped(static_cast<uint8_t*>(acc),
                         static_cast<const uint8_t*>(in), count,
                         op == ReduceOp::kMin ? ReduceOp::kMin
                                              : ReduceOp::kMax);
    case DataType::kFloat16:
      return ReduceHalf(static_cast<uint16_t*>(acc),
                        static_cast<const uint16_t*>(in), count, op,
                        HalfToFloatBulk, FloatToHalfBulk);
    case DataType::kBFloat16:
      return ReduceHalf(static_cast<uint16_t*>(acc),
                        static_cast<const uint16_t*>(in), count, op,
                        BFloat16ToFloatBulk, FloatToBFloat16Bulk);
  }
}

void AccumulateHalfToFloat(float* acc, const void* in, int64_t count,
                           DataType dtype, ReduceOp op) {
  constexpr int64_t kBlock = 1024;
  float b[kBlock];
  const uint16_t* src = static_cast<const uint16_t*>(in);
  for (int64_t start = 0; start < count; start += kBlock) {
    int64_t n = std::min(kBlock, count - start);
    if (dtype == DataType::kFloat16) {
      HalfToFloatBulk(src + start, b, n);
    } else {
      BFloat16ToFloatBulk(src + start, b, n);
    }
    ReduceTyped(acc + start, b, n, op);
  }
}

void HalfToFloatInto(const void* in, float* out, int64_t count,
                     DataType dtype) {
  const uint16_t* src = static_cast<const uint16_t*>(in);
  if (dtype == DataType::kFloat16) {
    HalfToFloatBulk(src, out, count);
  } else {
    BFloat16ToFloatBulk(src, out, count);
  }
}

void FloatToHalfInto(const float* in, void* out, int64_t count,
                     DataType dtype) {
  uint16_t* dst = static_cast<uint16_t*>(out);
  if (dtype == DataType::kFloat16) {
    FloatToHalfBulk(in, dst, count);
  } else {
    FloatToBFloat16Bulk(in, dst, count);
  }
}

void DivideInPlace(void* buffer, int64_t count, DataType dtype, int divisor) {
  switch (dtype) {
    case DataType::kFloat32: {
      float* p = static_cast<float*>(buffer);
      for (int64_t i = 0; i < count; ++i) p[i] /= static_cast<float>(divisor);
      return;
    }
    case DataType::kFloat64: {
      double* p = static_cast<double*>(buffer);
      for (int64_t i = 0; i < count; ++i) p[i] /= divisor;
      return;
    }
    case DataType::kFloat16:
    case DataType::kBFloat16: {
      // Blocks through fp32 so the conversions take the bulk (vector) paths.
      uint16_t* p = static_cast<uint16_t*>(buffer);
      constexpr int64_t kBlock = 1024;
      float f[kBlock];
      for (int64_t start = 0; start < count; start += kBlock) {
        int64_t n = std::min(kBlock, count - start);
        HalfToFloatInto(p + start, f, n, dtype);
        for (int64_t i = 0; i < n; ++i) f[i] /= static_cast<float>(divisor);
        FloatToHalfInto(f, p + start, n, dtype);
      }
      return;
    }
    default:
      return;  // Integer average is rejected by CheckReduceSupported.
  }
}

}  // namespace terse
