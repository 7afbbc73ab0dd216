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
    case ReduceOp::kAdasum:  // Not element-wise: AdasumCombine.
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
      code > static_cast<int32_t>(ReduceOp::kAdasum)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown reduce op value ", code,
                     "; accepted: sum, average, min, max, product, adasum"));
  }
  if (op == ReduceOp::kAdasum && !IsFloatingPoint(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("reduce op adasum needs a floating-point type, not ",
                     DataTypeName(dtype)));
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

namespace {

// Element i of a floating-point buffer as a double.
double LoadAsDouble(const void* p, int64_t i, DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return static_cast<const float*>(p)[i];
    case DataType::kFloat64:
      return static_cast<const double*>(p)[i];
    case DataType::kFloat16:
      return HalfToFloat(static_cast<const uint16_t*>(p)[i]);
    case DataType::kBFloat16:
      return BFloat16ToFloat(static_cast<const uint16_t*>(p)[i]);
    default:
      return 0.0;  // Refused by CheckReduceSupported.
  }
}

void StoreFromDouble(void* p, int64_t i, DataType dtype, double v) {
  switch (dtype) {
    case DataType::kFloat32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      return;
    case DataType::kFloat64:
      static_cast<double*>(p)[i] = v;
      return;
    case DataType::kFloat16:
      static_cast<uint16_t*>(p)[i] = FloatToHalf(static_cast<float>(v));
      return;
    case DataType::kBFloat16:
      static_cast<uint16_t*>(p)[i] = FloatToBFloat16(static_cast<float>(v));
      return;
    default:
      return;
  }
}

}  // namespace

absl::Status CheckAdasumRanks(ReduceOp op, int size,
                              absl::string_view backend) {
  if (op == ReduceOp::kAdasum && (size < 1 || (size & (size - 1)) != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        backend, ": adasum needs a power-of-two number of ranks, not ", size));
  }
  return absl::OkStatus();
}

void AdasumCombine(void* a, const void* b, int64_t count, DataType dtype) {
  constexpr double kEpsilon = 1e-8;
  double dot = 0.0, a_norm = 0.0, b_norm = 0.0;
  for (int64_t i = 0; i < count; ++i) {
    const double x = LoadAsDouble(a, i, dtype);
    const double y = LoadAsDouble(b, i, dtype);
    dot += x * y;
    a_norm += x * x;
    b_norm += y * y;
  }
  const double a_coeff = a_norm >= kEpsilon ? 1.0 - dot / (2.0 * a_norm) : 1.0;
  const double b_coeff = b_norm >= kEpsilon ? 1.0 - dot / (2.0 * b_norm) : 1.0;
  for (int64_t i = 0; i < count; ++i) {
    StoreFromDouble(a, i, dtype,
                    a_coeff * LoadAsDouble(a, i, dtype) +
                        b_coeff * LoadAsDouble(b, i, dtype));
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
