#include "compressors/kernels/randomk.h"

#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace terse {
namespace kernels {
namespace {

TEST(RandomKTest, SameSeedSameIndices) {
  std::vector<uint32_t> a, b, c;
  const uint64_t seed = MixSeed(42, /*step=*/7, /*stream=*/3);
  RandomKIndices(seed, 1000003, 10000, &a);
  RandomKIndices(seed, 1000003, 10000, &b);
  EXPECT_EQ(a, b);
  RandomKIndices(MixSeed(42, 8, 3), 1000003, 10000, &c);
  EXPECT_NE(a, c);
  EXPECT_NE(MixSeed(42, 7, 3), MixSeed(42, 3, 7));
  EXPECT_NE(MixSeed(42, 7, 3), MixSeed(43, 7, 3));
}

TEST(RandomKTest, AscendingDistinctInRange) {
  for (int64_t d : {1, 2, 63, 64, 65, 1000}) {
    for (int64_t k : {int64_t{0}, int64_t{1}, d / 2, d}) {
      std::vector<uint32_t> idx;
      RandomKIndices(MixSeed(1, d, k), d, k, &idx);
      ASSERT_EQ(static_cast<int64_t>(idx.size()), k);
      for (size_t j = 0; j < idx.size(); ++j) {
        ASSERT_LT(idx[j], d);
        if (j > 0) {
          ASSERT_LT(idx[j - 1], idx[j]);
        }
      }
    }
  }
}

TEST(RandomKTest, RoughlyUniform) {
  // Each of d positions is picked with probability k/d per draw.
  const int64_t d = 100, k = 10, trials = 4000;
  std::vector<int> hits(d, 0);
  std::vector<uint32_t> idx;
  for (int64_t t = 0; t < trials; ++t) {
    RandomKIndices(MixSeed(9, t), d, k, &idx);
    for (uint32_t i : idx) ++hits[i];
  }
  // Expected 400, sd ~19: allow 6 sd.
  for (int64_t i = 0; i < d; ++i) {
    EXPECT_NEAR(hits[i], 400, 114) << "position " << i;
  }
}

}  // namespace
}  // namespace kernels
}  // namespace terse
