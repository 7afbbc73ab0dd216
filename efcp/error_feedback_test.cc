#include "efcp/error_feedback.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "common/half.h"
#include "gtest/gtest.h"

namespace terse {
namespace efcp {
namespace {

TEST(ErrorFeedbackTest, KeptEntries) {
  EXPECT_EQ(ErrorFeedbackTopK::KeptEntries(0.01, 1 << 20), 10485);
  EXPECT_EQ(ErrorFeedbackTopK::KeptEntries(0.2, 50), 10);
  EXPECT_EQ(ErrorFeedbackTopK::KeptEntries(0.3, 10), 3);  // 0.3*10 < 3 in fp
  EXPECT_EQ(ErrorFeedbackTopK::KeptEntries(1.0, 77), 77);
  EXPECT_EQ(ErrorFeedbackTopK::KeptEntries(0.01, 50), 1);  // at least one
}

// The independent reference: sort by |a| descending, ties by index.
std::vector<uint32_t> SortTopK(const std::vector<float>& a, int64_t k) {
  std::vector<uint32_t> order(a.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t x, uint32_t y) {
    return std::abs(a[x]) > std::abs(a[y]);
  });
  order.resize(k);
  std::sort(order.begin(), order.end());
  return order;
}

int64_t KeepAll(uint32_t*, float*, int64_t n) { return n; }

// e_T + sum_t c_t = sum_t g_t, and each step keeps the top-k of e + g.
TEST(ErrorFeedbackTest, ConservesAndKeepsTheLargest) {
  for (bool bf16 : {false, true}) {
    std::mt19937 rng(30);
    std::normal_distribution<float> normal;
    const int64_t d = 300, k = 12;
    ErrorFeedbackTopK feedback(d, k, bf16, 2);
    std::vector<double> sum_g(d, 0.0), sum_c(d, 0.0);
    std::vector<uint32_t> indices(k);
    std::vector<float> values(k);
    for (int step = 0; step < 200; ++step) {
      std::vector<float> g(d);
      for (float& v : g) v = normal(rng);
      ASSERT_TRUE(feedback.Check(g).ok());
      std::vector<float> a(d);
      for (int64_t i = 0; i < d; ++i) a[i] = feedback.error()[i] + g[i];
      ASSERT_EQ(
          feedback.Compress(g.data(), indices.data(), values.data(), KeepAll),
          k);
      EXPECT_EQ(indices, SortTopK(a, k)) << "step " << step;
      for (int64_t j = 0; j < k; ++j) {
        const float want = bf16
                               ? BFloat16ToFloat(FloatToBFloat16(a[indices[j]]))
                               : a[indices[j]];
        EXPECT_EQ(values[j], want);
        sum_c[indices[j]] += values[j];
      }
      for (int64_t i = 0; i < d; ++i) sum_g[i] += g[i];
    }
    for (int64_t i = 0; i < d; ++i) {
      EXPECT_NEAR(feedback.error()[i] + sum_c[i], sum_g[i], 1e-4)
          << "bf16 " << bf16 << " i " << i;
    }
  }
}

// Entries the fit drops (as a block16 window does when its markers take
// slots) stay in e: e = a exactly there, and a - c where kept.
TEST(ErrorFeedbackTest, DroppedEntriesStayInTheError) {
  std::mt19937 rng(31);
  std::normal_distribution<float> normal;
  const int64_t d = 100, k = 10;
  ErrorFeedbackTopK feedback(d, k, /*bf16_values=*/true, 1);
  std::vector<uint32_t> indices(k);
  std::vector<float> values(k);
  std::vector<double> sum_g(d, 0.0), sum_c(d, 0.0);
  for (int step = 0; step < 50; ++step) {
    std::vector<float> g(d);
    for (float& v : g) v = normal(rng);
    std::vector<float> a(d);
    for (int64_t i = 0; i < d; ++i) a[i] = feedback.error()[i] + g[i];
    // Keep every other entry.
    const int64_t n =
        feedback.Compress(g.data(), indices.data(), values.data(),
                          [](uint32_t* idx, float* val, int64_t count) {
                            int64_t kept = 0;
                            for (int64_t j = 0; j < count; j += 2, ++kept) {
                              idx[kept] = idx[j];
                              val[kept] = val[j];
                            }
                            return kept;
                          });
    ASSERT_EQ(n, k / 2);
    std::vector<float> want = a;
    for (int64_t j = 0; j < n; ++j) {
      want[indices[j]] -= values[j];
      sum_c[indices[j]] += values[j];
    }
    ASSERT_EQ(feedback.error(), want) << "step " << step;
    for (int64_t i = 0; i < d; ++i) sum_g[i] += g[i];
  }
  for (int64_t i = 0; i < d; ++i) {
    EXPECT_NEAR(feedback.error()[i] + sum_c[i], sum_g[i], 1e-4);
  }
}

TEST(ErrorFeedbackTest, CheckRejectsNonFiniteAndOverflow) {
  ErrorFeedbackTopK feedback(4, 1, false, 1);
  std::vector<uint32_t> indices(1);
  std::vector<float> values(1);
  const float big = 3e38f;
  std::vector<float> g = {big, big, 0, 0};
  ASSERT_TRUE(feedback.Check(g).ok());
  feedback.Compress(g.data(), indices.data(), values.data(), KeepAll);
  EXPECT_EQ(indices[0], 0u);  // the tie goes to the lower index
  EXPECT_EQ(feedback.error()[1], big);
  const std::vector<float> before = feedback.error();
  std::vector<float> overflow = {0, big, 0, 0};  // e + g = inf
  EXPECT_EQ(feedback.Check(overflow).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<float> nan = {0, 0, std::numeric_limits<float>::quiet_NaN(), 0};
  EXPECT_FALSE(feedback.Check(nan).ok());
  std::vector<float> inf = {0, 0, 0, -std::numeric_limits<float>::infinity()};
  EXPECT_FALSE(feedback.Check(inf).ok());
  std::vector<float> short_g = {1, 2, 3};
  EXPECT_FALSE(feedback.Check(short_g).ok());
  EXPECT_EQ(feedback.error(), before);
}

}  // namespace
}  // namespace efcp
}  // namespace terse
