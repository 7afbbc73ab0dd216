#include "common/half.h"

#include <cpuid.h>
#include <immintrin.h>

namespace terse {

uint16_t FloatToHalf(float value) {
  const uint32_t x = FloatBits(value);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;

  if (abs >= 0x7f800000u) {  // Inf or NaN.
    if (abs == 0x7f800000u) return sign | 0x7c00u;
    return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  }
  // 65520 = largest half (65504) + half an ulp: rounds up to infinity.
  if (abs >= 0x477ff000u) return sign | 0x7c00u;

  if (abs < 0x38800000u) {  // Below 2^-14: half subnormal (or zero).
    // At or below 2^-25 everything rounds to zero (2^-25 is a tie with 0,
    // which is even).
    if (abs <= 0x33000000u) return sign;
    const uint32_t exponent = abs >> 23;               // 102 .. 112
    const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - exponent;            // 14 .. 24
    uint32_t h = mantissa >> shift;
    const uint32_t remainder = mantissa & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1u);
    if (remainder > halfway || (remainder == halfway && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);  // h == 0x400 is the least normal.
  }

  // Normal range: rebias the exponent (127 -> 15) and round off 13 bits. A
  // carry out of the mantissa correctly bumps the exponent.
  uint32_t h = (abs >> 13) - ((127u - 15u) << 10);
  const uint32_t remainder = abs & 0x1fffu;
  if (remainder > 0x1000u || (remainder == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float HalfToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24 is exact in float.
    float magnitude = static_cast<float>(mantissa) * (1.0f / 16777216.0f);
    return BitsToFloat(sign | FloatBits(magnitude));
  }
  if (exponent == 31) {
    // Infinity, or a NaN made quiet as the F16C instructions do.
    uint32_t quiet = mantissa ? 0x400000u : 0u;
    return BitsToFloat(sign | 0x7f800000u | quiet | (mantissa << 13));
  }
  return BitsToFloat(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

namespace {

__attribute__((target("avx,f16c"))) void FloatToHalfF16c(const float* in,
                                                          uint16_t* out,
                                                          size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(in + i);
    __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < n; ++i) out[i] = FloatToHalf(in[i]);
}

__attribute__((target("avx,f16c"))) void HalfToFloatF16c(const uint16_t* in,
                                                          float* out,
                                                          size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) out[i] = HalfToFloat(in[i]);
}

// The scalar bf16 code is branch-free apart from NaN; written as a select so
// the compiler vectorises the loop for the AVX2 target.
template <int kUnused = 0>
inline void FloatToBFloat16Loop(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t x = FloatBits(in[i]);
    uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    uint32_t quiet_nan = (x >> 16) | 0x0040u;
    bool is_nan = (x & 0x7fffffffu) > 0x7f800000u;
    out[i] = static_cast<uint16_t>(is_nan ? quiet_nan : rounded);
  }
}

__attribute__((target("avx2"))) void FloatToBFloat16Avx2(const float* in,
                                                          uint16_t* out,
                                                          size_t n) {
  FloatToBFloat16Loop(in, out, n);
}

__attribute__((target("avx2"))) void BFloat16ToFloatAvx2(const uint16_t* in,
                                                          float* out,
                                                          size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = BFloat16ToFloat(in[i]);
}

bool HasF16c() {
  // F16C from CPUID leaf 1 (clang before 16 rejects
  // __builtin_cpu_supports("f16c")); "avx" also checks that the OS saves
  // the YMM state.
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 &&
           (ecx & bit_F16C) != 0 && __builtin_cpu_supports("avx");
  }();
  return has;
}

bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}

}  // namespace

void FloatToHalf(const float* in, uint16_t* out, size_t n) {
  if (HasF16c()) return FloatToHalfF16c(in, out, n);
  for (size_t i = 0; i < n; ++i) out[i] = FloatToHalf(in[i]);
}

void HalfToFloat(const uint16_t* in, float* out, size_t n) {
  if (HasF16c()) return HalfToFloatF16c(in, out, n);
  for (size_t i = 0; i < n; ++i) out[i] = HalfToFloat(in[i]);
}

void FloatToBFloat16(const float* in, uint16_t* out, size_t n) {
  if (HasAvx2()) return FloatToBFloat16Avx2(in, out, n);
  FloatToBFloat16Loop(in, out, n);
}

void BFloat16ToFloat(const uint16_t* in, float* out, size_t n) {
  if (HasAvx2()) return BFloat16ToFloatAvx2(in, out, n);
  for (size_t i = 0; i < n; ++i) out[i] = BFloat16ToFloat(in[i]);
}

}  // namespace terse
