#include "compressors/kernels/topk.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace terse {
namespace kernels {
namespace {

// Oracle: full sort by (magnitude key descending, index ascending), first k,
// indices ascending.
std::vector<uint32_t> SortReference(const std::vector<float>& x, int64_t k) {
  std::vector<std::pair<uint32_t, uint32_t>> keyed(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &x[i], sizeof(bits));
    keyed[i] = {bits & 0x7fffffffu, static_cast<uint32_t>(i)};
  }
  std::sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first > b.first;
    return a.second < b.second;
  });
  std::vector<uint32_t> out(k);
  for (int64_t j = 0; j < k; ++j) out[j] = keyed[j].second;
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<uint32_t> RunTopK(const std::vector<float>& x, int64_t k,
                              int threads) {
  std::vector<uint32_t> out(k + 1, 0xdeadbeefu);
  TopK(x.data(), static_cast<int64_t>(x.size()), k, out.data(), threads);
  EXPECT_EQ(out[k], 0xdeadbeefu) << "wrote past k";
  out.resize(k);
  return out;
}

std::vector<float> Gaussian(int64_t d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(d);
  for (float& v : x) v = dist(rng);
  return x;
}

TEST(TopKTest, MatchesSortOnGaussian) {
  const std::vector<float> x = Gaussian(10007, 1);
  for (int64_t k : {1, 2, 17, 100, 5000, 10006}) {
    EXPECT_EQ(RunTopK(x, k, 1), SortReference(x, k)) << "k=" << k;
  }
}

TEST(TopKTest, KZeroAndKEqualsD) {
  const std::vector<float> x = Gaussian(1000, 2);
  EXPECT_TRUE(RunTopK(x, 0, 0).empty());
  std::vector<uint32_t> all = RunTopK(x, 1000, 0);
  for (uint32_t i = 0; i < 1000; ++i) ASSERT_EQ(all[i], i);
  EXPECT_TRUE(RunTopK({}, 0, 0).empty());
}

TEST(TopKTest, TiesTakeLowestIndices) {
  // Many equal magnitudes with mixed signs.
  std::vector<float> x(5000);
  std::mt19937 rng(3);
  for (float& v : x) {
    v = static_cast<float>(rng() % 7) * ((rng() & 1) ? 1.0f : -1.0f);
  }
  for (int64_t k : {1, 3, 700, 714, 715, 2500, 4999}) {
    EXPECT_EQ(RunTopK(x, k, 1), SortReference(x, k)) << "k=" << k;
  }
  // All equal: the first k.
  std::vector<float> same(3000, -2.5f);
  std::vector<uint32_t> got = RunTopK(same, 10, 1);
  for (uint32_t i = 0; i < 10; ++i) EXPECT_EQ(got[i], i);
}

TEST(TopKTest, SignedZerosInfAndNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = {0.0f, -0.0f, 1.0f,  -inf, nan, 3.0f,
                          inf,  -nan,  -0.0f, 2.0f, 0.0f};
  for (int64_t k = 0; k <= static_cast<int64_t>(x.size()); ++k) {
    EXPECT_EQ(RunTopK(x, k, 1), SortReference(x, k)) << "k=" << k;
  }
  // NaN beats infinity.
  EXPECT_EQ(RunTopK(x, 2, 1), (std::vector<uint32_t>{4, 7}));
  // Denormals order by magnitude too.
  const float dm = std::numeric_limits<float>::denorm_min();
  std::vector<float> tiny = {dm, -3 * dm, 2 * dm, 0.0f};
  EXPECT_EQ(RunTopK(tiny, 2, 1), (std::vector<uint32_t>{1, 2}));
}

TEST(TopKTest, MultithreadedMatchesAndIsThreadCountIndependent) {
  // d not a multiple of any chunk size, large enough for several threads.
  const int64_t d = (int64_t{1} << 19) + 12345;
  std::vector<float> x = Gaussian(d, 4);
  // Plant ties across thread boundaries at the threshold.
  for (int64_t i = 0; i < d; i += 997) x[i] = 3.25f;
  for (int64_t k : {int64_t{1}, int64_t{5000}, d / 100, d / 2, d - 1}) {
    const std::vector<uint32_t> expected = SortReference(x, k);
    for (int threads : {1, 2, 3, 5, 8}) {
      EXPECT_EQ(RunTopK(x, k, threads), expected)
          << "k=" << k << " threads=" << threads;
    }
  }
}

TEST(TopKTest, LargeTieBlockAcrossThreads) {
  const int64_t d = 300000;
  std::vector<float> x(d, 1.0f);
  for (int64_t i = 0; i < d; i += 3) x[i] = -1.0f;
  x[d - 1] = 5.0f;
  for (int64_t k : {int64_t{1}, int64_t{2}, int64_t{150001}, d - 7}) {
    for (int threads : {1, 4}) {
      EXPECT_EQ(RunTopK(x, k, threads), SortReference(x, k))
          << "k=" << k << " threads=" << threads;
    }
  }
}

TEST(TopKTest, TiesAtTheThresholdInASmallBin) {
  // Gaussian data (the candidate path: the threshold bin is small) with
  // 3000 planted copies of 2.6 and k cutting through them.
  const int64_t d = 400000;
  std::vector<float> x = Gaussian(d, 7);
  for (int64_t j = 0; j < 3000; ++j) x[(j * 7919) % d] = (j & 1) ? 2.6f : -2.6f;
  int64_t above = 0;
  for (float v : x) above += std::fabs(v) > 2.6f;
  for (int64_t k : {above + 1, above + 1500, above + 2999, above + 3000}) {
    const std::vector<uint32_t> expected = SortReference(x, k);
    for (int threads : {1, 2, 3}) {
      EXPECT_EQ(RunTopK(x, k, threads), expected)
          << "k=" << k << " threads=" << threads;
    }
  }
}

TEST(TopKTest, ThresholdKeyIsKthLargest) {
  const std::vector<float> x = Gaussian(200000, 5);
  for (int64_t k : {1, 1000, 199999}) {
    std::vector<uint32_t> idx = SortReference(x, k);
    uint32_t min_key = 0xffffffffu;
    for (uint32_t i : idx) {
      uint32_t bits;
      std::memcpy(&bits, &x[i], 4);
      min_key = std::min(min_key, MagnitudeKey(bits));
    }
    TopKThreshold th = TopKThresholdKey(x.data(), 200000, k, 2);
    EXPECT_EQ(th.key, min_key);
    EXPECT_GE(th.ties_taken, 1);
  }
}

TEST(TopKTest, RandomizedAgainstSort) {
  std::mt19937 rng(6);
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t d = 1 + rng() % 3000;
    std::vector<float> x(d);
    const int mode = trial % 3;
    for (float& v : x) {
      if (mode == 0) {
        v = std::ldexp(static_cast<float>(rng() % 1000) - 500.0f,
                       static_cast<int>(rng() % 40) - 20);
      } else if (mode == 1) {
        v = static_cast<float>(rng() % 4);
      } else {
        uint32_t bits = rng();
        std::memcpy(&v, &bits, 4);  // Any bit pattern, NaNs included.
      }
    }
    const int64_t k = rng() % (d + 1);
    ASSERT_EQ(RunTopK(x, k, 1 + trial % 3), SortReference(x, k))
        << "trial=" << trial << " d=" << d << " k=" << k;
  }
}

}  // namespace
}  // namespace kernels
}  // namespace terse
