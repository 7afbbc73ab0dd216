// IEEE binary16 (fp16) and bfloat16 <-> fp32 conversion.
//
// Every float -> 16-bit conversion rounds to nearest, ties to even, exactly as
// the hardware instructions do (overflow gives infinity, NaN stays a quiet
// NaN with its sign). 16-bit values travel as uint16_t bit patterns.
//
// The bulk functions pick an AVX/F16C (fp16) or AVX2 (bf16) path at run time
// where the CPU has it and give bit-identical results to the scalar ones.
// They are thread-safe and never allocate.
#ifndef TERSE_COMMON_HALF_H_
#define TERSE_COMMON_HALF_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace terse {

inline uint32_t FloatBits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  return x;
}

inline float BitsToFloat(uint32_t x) {
  float f;
  std::memcpy(&f, &x, sizeof(f));
  return f;
}

uint16_t FloatToHalf(float value);
float HalfToFloat(uint16_t bits);

inline uint16_t FloatToBFloat16(float value) {
  uint32_t x = FloatBits(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep sign, force quiet bit.
    return static_cast<uint16_t>((x >> 16) | 0x0040u);
  }
  uint32_t rounding_bias = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding_bias) >> 16);
}

inline float BFloat16ToFloat(uint16_t bits) {
  return BitsToFloat(static_cast<uint32_t>(bits) << 16);
}

// Bulk conversions over n elements; `in` and `out` must not overlap.
void FloatToHalf(const float* in, uint16_t* out, size_t n);
void HalfToFloat(const uint16_t* in, float* out, size_t n);
void FloatToBFloat16(const float* in, uint16_t* out, size_t n);
void BFloat16ToFloat(const uint16_t* in, float* out, size_t n);

}  // namespace terse

#endif  // TERSE_COMMON_HALF_H_
