#include "compressors/kernels/count_sketch.h"

#include "compressors/kernels/randomk.h"

namespace terse {
namespace kernels {

void AddCountSketch(uint64_t seed, int64_t first_index,
                    absl::Span<const float> v, absl::Span<double> sketch) {
  const uint64_t k = sketch.size();
  if (k == 0) return;
  for (size_t i = 0; i < v.size(); ++i) {
    // One SplitMix64 output per index: the high bits pick the bucket
    // (multiply-shift, no modulo bias worth the name for k << 2^32), the
    // lowest bit the sign.
    uint64_t state =
        seed ^ (static_cast<uint64_t>(first_index) + i) * 0xd1b54a32d192ed03ull;
    const uint64_t bits = SplitMix64(&state);
    const uint64_t bucket = static_cast<uint64_t>(
        (static_cast<unsigned __int128>(bits >> 1) * k) >> 63);
    const double value = static_cast<double>(v[i]);
    sketch[bucket] += (bits & 1) ? value : -value;
  }
}

}  // namespace kernels
}  // namespace terse
