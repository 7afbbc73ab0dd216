#include "efcp/dense_window.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace terse {
namespace efcp {
namespace {

// Sizes around the column block (2048) and the parallel threshold, several
// thread counts: both products against plain double loops.
TEST(DenseWindowTest, ProductsMatchNaiveLoops) {
  std::mt19937 rng(4);
  std::normal_distribution<float> normal;
  for (int64_t d : {1, 5, 2047, 2048, 2049, 70000}) {
    for (int threads : {1, 2, 3}) {
      const int64_t m = 5;
      DenseWindow window(m, d, threads);
      std::vector<std::vector<float>> rows(m, std::vector<float>(d, 0.0f));
      for (int64_t i = 0; i < m - 1; ++i) {  // the last slot stays unwritten
        for (float& v : rows[i]) v = normal(rng);
        window.SetRow(i, rows[i].data());
      }
      std::vector<float> x(d);
      for (float& v : x) v = normal(rng);
      std::vector<double> dots(m);
      window.Dots(x.data(), dots.data());
      for (int64_t i = 0; i < m; ++i) {
        double want = 0;
        for (int64_t j = 0; j < d; ++j) want += double(rows[i][j]) * x[j];
        EXPECT_NEAR(dots[i], want, 1e-9 * (1 + std::abs(want)));
      }
      EXPECT_EQ(dots[m - 1], 0.0);

      const std::vector<double> coeffs = {0.5, -1.0, 2.0, 0.0, 3.0};
      std::vector<float> out = x;
      window.AddLinearCombination(coeffs.data(), out.data());
      for (int64_t j = 0; j < d; ++j) {
        double want = x[j];
        for (int64_t i = 0; i < m; ++i) want += coeffs[i] * rows[i][j];
        ASSERT_NEAR(out[j], want, 1e-5 * (1 + std::abs(want))) << j;
      }
    }
  }
}

TEST(DenseWindowTest, MemoryAndClear) {
  DenseWindow window(3, 10, 1);
  EXPECT_EQ(window.memory_bytes(), 3 * 10 * 4);
  std::vector<float> ones(10, 1.0f);
  window.SetRow(1, ones.data());
  EXPECT_EQ(window.row(1)[9], 1.0f);
  window.Clear();
  EXPECT_EQ(window.row(1)[9], 0.0f);
}

TEST(DenseWindowTest, DotF64AccumulatesInDouble) {
  // One 1e8 per accumulator lane, then ones: a float sum would drop them.
  const int64_t n = 4000;
  std::vector<float> a(n, 1.0f), ones(n, 1.0f);
  for (int i = 0; i < 4; ++i) a[i] = 1e8f;
  EXPECT_EQ(DotF64(a.data(), ones.data(), n), 4e8 + (n - 4));
}

}  // namespace
}  // namespace efcp
}  // namespace terse
