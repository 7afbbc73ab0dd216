// Random-k index selection shared by all ranks (CPU; the indices depend only
// on the seed, d and k, never on data, so GPU paths compute them here too).
//
// The same (seed, d, k) gives the same indices on every rank, run and
// platform: the generator is SplitMix64 and the bounded draws use integer
// arithmetic only. The set is a uniformly random k-subset of [0, d) (Floyd's
// algorithm over a bitmap of d bits), returned ascending. Reentrant.
#ifndef TERSE_COMPRESSORS_KERNELS_RANDOMK_H_
#define TERSE_COMPRESSORS_KERNELS_RANDOMK_H_

#include <cstdint>
#include <vector>

namespace terse {
namespace kernels {

// One SplitMix64 step: advances *state and returns the next 64 random bits.
inline uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A seed for one use, mixed from the shared seed and identifiers that are
// equal on every rank (e.g. the step and the bucket's stream id).
uint64_t MixSeed(uint64_t seed, uint64_t a, uint64_t b = 0);

// A uniform draw in [0, bound) (bound >= 1) from *state.
inline uint64_t UniformBelow(uint64_t* state, uint64_t bound) {
  return static_cast<uint64_t>(
      (static_cast<unsigned __int128>(SplitMix64(state)) * bound) >> 64);
}

// Writes a uniformly random k-subset of [0, d) into *indices, ascending.
// Preconditions: 0 <= k <= d < 2^32.
void RandomKIndices(uint64_t seed, int64_t d, int64_t k,
                    std::vector<uint32_t>* indices);

}  // namespace kernels
}  // namespace terse

#endif  // TERSE_COMPRESSORS_KERNELS_RANDOMK_H_
