// Small helpers shared by the compressor tests.
#ifndef TERSE_COMPRESSORS_TEST_UTIL_H_
#define TERSE_COMPRESSORS_TEST_UTIL_H_

#include <random>
#include <vector>

namespace terse {

inline std::vector<float> GaussianVector(int64_t d, uint32_t seed,
                                         float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> x(d);
  for (float& v : x) v = dist(rng);
  return x;
}

}  // namespace terse

#endif  // TERSE_COMPRESSORS_TEST_UTIL_H_
