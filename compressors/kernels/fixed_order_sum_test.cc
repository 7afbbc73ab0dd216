#include "compressors/kernels/fixed_order_sum.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace terse {
namespace kernels {
namespace {

// Terms spread over many magnitudes, so that a different order rounds
// differently.
std::vector<double> Terms(int64_t n, uint32_t seed) {
  std::vector<double> t(n);
  uint32_t s = seed;
  for (int64_t i = 0; i < n; ++i) {
    s ^= s << 13;
    s ^= s >> 17;
    s ^= s << 5;
    t[i] = std::ldexp(static_cast<double>(s) / 4294967296.0,
                      static_cast<int>(s % 40) - 20);
  }
  return t;
}

// An independent model of the documented order, written as the GPU runs it:
// rounds of 32 lanes over each chunk, then warp shuffles that read every
// lane's old value (a lane past the end reads its own, as
// __shfl_down_sync does), then the chunk sums from +0.0.
double WarpModelSum(const std::vector<double>& t) {
  const int64_t n = static_cast<int64_t>(t.size());
  double total = 0.0;
  for (int64_t chunk = 0; chunk < n; chunk += kFixedSumChunk) {
    std::vector<double> lanes(32, 0.0);
    for (int64_t round = chunk; round < chunk + kFixedSumChunk; round += 32) {
      for (int l = 0; l < 32; ++l) {
        if (round + l < n) lanes[l] = lanes[l] + t[round + l];
      }
    }
    for (int offset : {16, 8, 4, 2, 1}) {
      std::vector<double> next(32);
      for (int l = 0; l < 32; ++l) {
        next[l] = lanes[l] + (l + offset < 32 ? lanes[l + offset] : lanes[l]);
      }
      lanes = next;
    }
    total = total + lanes[0];
  }
  return total;
}

bool SameBits(double a, double b) { return std::memcmp(&a, &b, 8) == 0; }

TEST(FixedOrderSumTest, MatchesTheWarpModelBitwise) {
  for (int64_t n : {0, 1, 5, 31, 32, 33, 100, 4095, 4096, 4097, 8192,
                    3 * 4096 + 17, 40000}) {
    const std::vector<double> t = Terms(n, 7 + static_cast<uint32_t>(n));
    const double got = FixedOrderSum(n, [&](int64_t i) { return t[i]; });
    EXPECT_TRUE(SameBits(got, WarpModelSum(t)))
        << "n = " << n << ": " << got << " vs " << WarpModelSum(t);
  }
}

TEST(FixedOrderSumTest, PinnedExample) {
  // 1 then 31 terms of 2^-53. In index order each 2^-53 rounds away
  // (ties to even) and the sum stays 1. In the fixed order the small terms
  // meet each other first: the fold adds 2^-53, 2^-52, 2^-51, 2^-50, 2^-49
  // to lane 0 in turn, of which all but the first survive: 1 + 15 * 2^-52.
  std::vector<double> t(32, std::ldexp(1.0, -53));
  t[0] = 1.0;
  double sequential = 0;
  for (double v : t) sequential += v;
  EXPECT_EQ(sequential, 1.0);
  const double got = FixedOrderSum(32, [&](int64_t i) { return t[i]; });
  EXPECT_EQ(got, 1.0 + 15 * std::ldexp(1.0, -52));
}

TEST(FixedOrderSumTest, CloseToTheExactSum) {
  // Within a few ulps of a long double sum (the order only moves
  // roundings): the relative error bound of a tree of depth ~n/32 + 5.
  const int64_t n = 100000;
  const std::vector<double> t = Terms(n, 3);
  long double exact = 0;
  for (double v : t) exact += v;
  const double got = FixedOrderSum(n, [&](int64_t i) { return t[i]; });
  EXPECT_NEAR(got, static_cast<double>(exact),
              1e-12 * static_cast<double>(exact));
}

TEST(FixedOrderSumTest, CallsTermOncePerIndexInOrder) {
  std::vector<int64_t> seen;
  FixedOrderSum(9000, [&](int64_t i) {
    seen.push_back(i);
    return 1.0;
  });
  ASSERT_EQ(seen.size(), 9000u);
  for (int64_t i = 0; i < 9000; ++i) ASSERT_EQ(seen[i], i);
}

TEST(FixedOrderSumTest, NonFiniteTerms) {
  std::vector<double> t = Terms(5000, 1);
  t[4500] = std::numeric_limits<double>::infinity();
  EXPECT_EQ(FixedOrderSum(5000, [&](int64_t i) { return t[i]; }),
            std::numeric_limits<double>::infinity());
  t[17] = std::nan("");
  EXPECT_TRUE(std::isnan(FixedOrderSum(5000, [&](int64_t i) { return t[i]; })));
}

}  // namespace
}  // namespace kernels
}  // namespace terse
