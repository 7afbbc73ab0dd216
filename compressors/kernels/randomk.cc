#include "compressors/kernels/randomk.h"

#include <cassert>
#include <cstddef>

namespace terse {
namespace kernels {

uint64_t MixSeed(uint64_t seed, uint64_t a, uint64_t b) {
  uint64_t state = seed;
  uint64_t h = SplitMix64(&state);
  state = h ^ a;
  h = SplitMix64(&state);
  state = h ^ b;
  return SplitMix64(&state);
}

void RandomKIndices(uint64_t seed, int64_t d, int64_t k,
                    std::vector<uint32_t>* indices) {
  assert(k >= 0 && k <= d);
  indices->clear();
  if (k <= 0) return;
  indices->reserve(k);
  if (k == d) {
    for (int64_t i = 0; i < d; ++i)
      indices->push_back(static_cast<uint32_t>(i));
    return;
  }
  std::vector<uint64_t> bits((d + 63) / 64, 0);
  uint64_t state = seed;
  // Floyd: for j = d-k .. d-1 pick t in [0, j]; take t, or j if t is taken.
  for (int64_t j = d - k; j < d; ++j) {
    const uint64_t t = UniformBelow(&state, static_cast<uint64_t>(j) + 1);
    const uint64_t word = bits[t >> 6];
    const uint64_t mask = uint64_t{1} << (t & 63);
    if (word & mask) {
      bits[j >> 6] |= uint64_t{1} << (j & 63);
    } else {
      bits[t >> 6] = word | mask;
    }
  }
  for (size_t w = 0; w < bits.size(); ++w) {
    uint64_t word = bits[w];
    while (word != 0) {
      const int bit = __builtin_ctzll(word);
      indices->push_back(static_cast<uint32_t>(w * 64 + bit));
      word &= word - 1;
    }
  }
}

}  // namespace kernels
}  // namespace terse
