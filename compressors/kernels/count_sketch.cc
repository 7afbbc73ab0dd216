#include "compressors/kernels/count_sketch.h"

#include <algorithm>
#include <vector>

#include "compressors/kernels/count_sketch_common.h"

namespace terse {
namespace kernels {

void AddCountSketch(uint64_t seed, int64_t first_index,
                    absl::Span<const float> v, absl::Span<double> sketch) {
  namespace cs = count_sketch;
  const uint64_t k = sketch.size();
  const int64_t n = static_cast<int64_t>(v.size());
  if (k == 0 || n == 0) return;
  // The largest finite magnitude's bits, and whether any value is not
  // finite (a magnitude's bits at or above the infinity's).
  uint32_t max_bits = 0, max_any = 0;
  for (const float x : v) {
    const uint32_t magnitude = cs::FloatBits(x) & 0x7fffffffu;
    max_any = std::max(max_any, magnitude);
    max_bits = std::max(max_bits, cs::FiniteMagnitudeBits(x));
  }
  const bool non_finite = max_any >= 0x7f800000u;
  if (max_bits == 0 && !non_finite) return;  // All zeros.
  const int e = cs::ScaleExponent(max_bits, n);
  const double scale = cs::PowerOfTwo(e);
  // Unsigned: two's complement adds, which never wrap here (see
  // count_sketch_common.h) but would be defined if they did.
  std::vector<uint64_t> sums(k, 0);
  std::vector<uint32_t> kinds(non_finite ? k : 0, 0);
  for (int64_t i = 0; i < n; ++i) {
    uint64_t bucket;
    bool positive;
    cs::Hash(seed, first_index + i, k, &bucket, &positive);
    if (non_finite && cs::NonFiniteKind(v[i]) != 0) {
      kinds[bucket] |= cs::NonFiniteKind(positive ? v[i] : -v[i]);
      continue;
    }
    // The sign on the integer (rounding is symmetric): a select, where a
    // float negation would be a branch taken half the time.
    const int64_t q = cs::Quantize(v[i], scale);
    sums[bucket] += static_cast<uint64_t>(positive ? q : -q);
  }
  const double unscale = cs::PowerOfTwo(-e);
  for (uint64_t j = 0; j < k; ++j) {
    cs::AddToBucket(&sketch[j], static_cast<int64_t>(sums[j]),
                    non_finite ? kinds[j] : 0, unscale);
  }
}

}  // namespace kernels
}  // namespace terse
