// The per-index hashing and the fixed-point arithmetic of
// kernels::AddCountSketch (count_sketch.h), shared by its CPU loop
// (count_sketch.cc) and the CUDA kernels (compressors/device/
// count_sketch_cuda.cu), so that both reach the same bits by construction:
// every function here is plain integer and IEEE double arithmetic, the same
// code on the host and on the device (MulHigh and Quantize aside: the same
// 128-bit product and the same rounding, by an instruction there).
//
// The scheme, for one call on the finite values v[0, n) with M = max |v[i]|
// (a float; M == 0 means nothing finite is nonzero):
//
//   E = ScaleExponent(bits of M, n), chosen so that M * 2^E < 2^(62 - L)
//   with L = ceil(log2 n);
//   q[i] = s(i) Quantize(v[i], E): v[i] * 2^E (exact in double) rounded
//   to the nearest integer, ties to even (symmetric, so the sign may come
//   before or after): |q[i]| <= 2^(62 - L);
//   sum[j] = the int64 sum of q[i] over h(i) == j: at most n <= 2^L terms,
//   so every partial sum, in any order and grouping, stays within
//   2^L * 2^(62 - L) = 2^62 < 2^63: no overflow, hence the same integer
//   whatever order a parallel device adds in;
//   sketch[j] += double(sum[j]) * 2^-E (AddToBucket): the conversion
//   rounds, the product by a power of two is exact (so a fused multiply-add
//   gives the same bits), the add rounds; the same on both sides.
//
// Non-finite values take no part in M or the sums: each bucket records which
// kinds of non-finite signed terms it received (kPlusInfinity,
// kMinusInfinity, kNotANumber), a set whose IEEE sum is order-independent,
// and AddToBucket adds that sum instead (an infinity of one sign, or NaN).
// A NaN result is stored as kCanonicalNaNBits, because NaN payloads differ
// between the host and the GPU.
#ifndef TERSE_COMPRESSORS_KERNELS_COUNT_SKETCH_COMMON_H_
#define TERSE_COMPRESSORS_KERNELS_COUNT_SKETCH_COMMON_H_

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define TERSE_SKETCH_HD __host__ __device__
#else
#define TERSE_SKETCH_HD
#endif

namespace terse {
namespace kernels {
namespace count_sketch {

// One SplitMix64 step, as kernels::SplitMix64 (randomk.h; count_sketch_test
// checks that they agree): advances *state, returns 64 random bits.
TERSE_SKETCH_HD inline uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The high 64 bits of the 128-bit product a * b.
TERSE_SKETCH_HD inline uint64_t MulHigh(uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH__)
  return __umul64hi(a, b);
#else
  return static_cast<uint64_t>((static_cast<unsigned __int128>(a) * b) >> 64);
#endif
}

// The bucket h(index) in [0, k) (k >= 1) and the sign s(index) (true: +1)
// of the sketch with `seed`. One SplitMix64 output per index: the high 63
// bits pick the bucket by multiply-shift (((bits >> 1) * k) >> 63 of the
// 128-bit product; no modulo bias worth the name for k << 2^32), the lowest
// bit the sign.
TERSE_SKETCH_HD inline void Hash(uint64_t seed, int64_t index, uint64_t k,
                                 uint64_t* bucket, bool* positive) {
  uint64_t state = seed ^ static_cast<uint64_t>(index) * 0xd1b54a32d192ed03ull;
  const uint64_t bits = SplitMix64(&state);
  const uint64_t h = bits >> 1;
  *bucket = (MulHigh(h, k) << 1) | ((h * k) >> 63);
  *positive = (bits & 1) != 0;
}

// Bits of a bucket's non-finite terms (after the sign s(i)).
inline constexpr uint32_t kPlusInfinity = 1;
inline constexpr uint32_t kMinusInfinity = 2;
inline constexpr uint32_t kNotANumber = 4;

// The quiet NaN every NaN bucket holds (std::numeric_limits<double>'s).
inline constexpr uint64_t kCanonicalNaNBits = 0x7ff8000000000000ull;

TERSE_SKETCH_HD inline uint32_t FloatBits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}

TERSE_SKETCH_HD inline double DoubleFromBits(uint64_t u) {
  double d;
  memcpy(&d, &u, sizeof(d));
  return d;
}

// The bits of |x| when x is finite (which order as the magnitudes do, as
// unsigned integers), 0 when x is infinite or NaN.
TERSE_SKETCH_HD inline uint32_t FiniteMagnitudeBits(float x) {
  const uint32_t magnitude = FloatBits(x) & 0x7fffffffu;
  return magnitude < 0x7f800000u ? magnitude : 0u;
}

// The kind of a non-finite term (0 for a finite one).
TERSE_SKETCH_HD inline uint32_t NonFiniteKind(float term) {
  const uint32_t bits = FloatBits(term);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude < 0x7f800000u) return 0;
  if (magnitude > 0x7f800000u) return kNotANumber;
  return (bits >> 31) ? kMinusInfinity : kPlusInfinity;
}

// The number of significant bits of u (0 for 0), without intrinsics, so that
// the host and the device run this very code.
TERSE_SKETCH_HD inline int BitWidth(uint64_t u) {
  int width = 0;
  for (int step = 32; step > 0; step /= 2) {
    if (u >> step) {
      u >>= step;
      width += step;
    }
  }
  return width + static_cast<int>(u);
}

// E for the largest finite magnitude (FiniteMagnitudeBits; 0 for none) of
// n >= 1 terms: 62 - ceil(log2 n) - e, where M = f * 2^e with f in [0.5, 1)
// (frexp's e, read off the float's bits). E lies in [-129, 210], so 2^E and
// 2^-E are normal doubles and the products by them are exact. 0 when
// max_bits is 0 (every finite term is then zero).
TERSE_SKETCH_HD inline int ScaleExponent(uint32_t max_bits, int64_t n) {
  if (max_bits == 0) return 0;
  const int biased = static_cast<int>(max_bits >> 23);
  // Normal: M in [2^(b - 127), 2^(b - 126)). Subnormal: M = m * 2^-149 with
  // m < 2^23 of BitWidth(m) bits.
  const int e = biased != 0 ? biased - 126 : BitWidth(max_bits) - 149;
  const int l = n <= 1 ? 0 : BitWidth(static_cast<uint64_t>(n - 1));
  return 62 - l - e;
}

// 2^e as a double, for e in [-1022, 1023].
TERSE_SKETCH_HD inline double PowerOfTwo(int e) {
  return DoubleFromBits(static_cast<uint64_t>(e + 1023) << 52);
}

// The term's fixed-point value: term * 2^E (exact in double) rounded to the
// nearest integer, ties to even. `term` must be finite and `scale`
// PowerOfTwo(E).
TERSE_SKETCH_HD inline int64_t Quantize(float term, double scale) {
  const double x = static_cast<double>(term) * scale;
#if defined(__CUDA_ARCH__)
  return llrint(x);  // cvt.rni: nearest, ties to even.
#else
  // Without a libm call in the CPU's loop: x has the float's 24 significant
  // bits, so from 2^23 on it is an integer already; below, adding and
  // subtracting 1.5 * 2^52 rounds it to an integer in the default rounding
  // mode (nearest, ties to even), as llrint would.
  constexpr double kRound = 6755399441055744.0;  // 1.5 * 2^52.
  const double rounded = (x + kRound) - kRound;
  return static_cast<int64_t>(std::fabs(x) < 8388608.0 ? rounded : x);
#endif
}

// *sketch += the bucket's sum: double(sum) * `unscale` (PowerOfTwo(-E);
// the conversion rounds once, the product is exact) or, when non-finite
// terms reached the bucket (`kinds` != 0), their IEEE sum. A NaN result is
// stored as kCanonicalNaNBits. A bucket with sum == 0 and kinds == 0 is
// left as it is (-0.0 included).
TERSE_SKETCH_HD inline void AddToBucket(double* sketch, int64_t sum,
                                        uint32_t kinds, double unscale) {
  if (sum == 0 && kinds == 0) return;
  double add = static_cast<double>(sum) * unscale;
  if (kinds != 0) {
    const double infinity = DoubleFromBits(0x7ff0000000000000ull);
    const uint32_t both = kPlusInfinity | kMinusInfinity;
    if ((kinds & kNotANumber) != 0 || (kinds & both) == both) {
      add = DoubleFromBits(kCanonicalNaNBits);
    } else {
      add = (kinds & kPlusInfinity) != 0 ? infinity : -infinity;
    }
  }
  const double result = *sketch + add;
  *sketch = result != result ? DoubleFromBits(kCanonicalNaNBits) : result;
}

}  // namespace count_sketch
}  // namespace kernels
}  // namespace terse

#undef TERSE_SKETCH_HD

#endif  // TERSE_COMPRESSORS_KERNELS_COUNT_SKETCH_COMMON_H_
