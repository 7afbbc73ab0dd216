// The inner loop of the threshold passes: visit, in ascending order, the
// entries whose magnitude key (float bits with the sign cleared) is at least
// `lo`. Sixteen keys are compared at a time (SSE2 where available; keys fit
// in 31 bits, so a signed compare is exact) and groups without a hit are
// skipped, so a pass that keeps ~1% runs at memory speed.
#ifndef TERSE_COMPRESSORS_KERNELS_SCAN_H_
#define TERSE_COMPRESSORS_KERNELS_SCAN_H_

#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace terse {
namespace kernels {

inline uint32_t KeyOf(const float* x, int64_t i) {
  uint32_t bits;
  std::memcpy(&bits, x + i, sizeof(bits));
  return bits & 0x7fffffffu;
}

// fn(i, key) for every i in [begin, end) with KeyOf(x, i) >= lo (lo <
// 2^31), ascending.
template <typename Fn>
inline void ForEachAtLeast(const float* x, int64_t begin, int64_t end,
                           uint32_t lo, Fn&& fn) {
  int64_t i = begin;
#if defined(__SSE2__)
  const __m128i abs_mask = _mm_set1_epi32(0x7fffffff);
  const __m128i below = _mm_set1_epi32(static_cast<int32_t>(lo) - 1);
  for (; i + 16 <= end; i += 16) {
    const float* p = x + i;
    const __m128i a = _mm_and_si128(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), abs_mask);
    const __m128i b = _mm_and_si128(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 4)), abs_mask);
    const __m128i c = _mm_and_si128(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)), abs_mask);
    const __m128i d = _mm_and_si128(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 12)), abs_mask);
    const __m128i ab =
        _mm_packs_epi32(_mm_cmpgt_epi32(a, below), _mm_cmpgt_epi32(b, below));
    const __m128i cd =
        _mm_packs_epi32(_mm_cmpgt_epi32(c, below), _mm_cmpgt_epi32(d, below));
    uint32_t mask =
        static_cast<uint32_t>(_mm_movemask_epi8(_mm_packs_epi16(ab, cd)));
    while (mask != 0) {
      const int j = __builtin_ctz(mask);
      fn(i + j, KeyOf(x, i + j));
      mask &= mask - 1;
    }
  }
#endif
  for (; i < end; ++i) {
    const uint32_t key = KeyOf(x, i);
    if (key >= lo) fn(i, key);
  }
}

}  // namespace kernels
}  // namespace terse

#endif  // TERSE_COMPRESSORS_KERNELS_SCAN_H_
