#include "compressors/kernels/sparse_ops.h"

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include "common/half.h"
#include "gtest/gtest.h"

namespace terse {
namespace kernels {
namespace {

std::vector<uint32_t> RandomAscending(int64_t d, int64_t k, std::mt19937* rng) {
  std::set<uint32_t> chosen;
  while (static_cast<int64_t>(chosen.size()) < k) {
    chosen.insert(static_cast<uint32_t>((*rng)() % d));
  }
  return std::vector<uint32_t>(chosen.begin(), chosen.end());
}

std::vector<float> RandomValues(int64_t n, std::mt19937* rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

TEST(SparseOpsTest, GatherAndScatterAdd) {
  std::mt19937 rng(1);
  const std::vector<float> dense = RandomValues(100, &rng);
  const std::vector<uint32_t> idx = {5, 0, 99, 5, 42};
  std::vector<float> values(idx.size());
  Gather(dense.data(), idx.data(), idx.size(), values.data());
  for (size_t j = 0; j < idx.size(); ++j) EXPECT_EQ(values[j], dense[idx[j]]);

  std::vector<float> acc(100, 1.0f);
  const std::vector<float> add = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f};
  ScatterAdd(idx.data(), add.data(), idx.size(), acc.data());
  EXPECT_EQ(acc[5], 1.0f + 1.0f + 4.0f);  // Duplicates summed.
  EXPECT_EQ(acc[0], 3.0f);
  EXPECT_EQ(acc[99], 4.0f);
  EXPECT_EQ(acc[42], 6.0f);
  EXPECT_EQ(acc[1], 1.0f);
  ScatterAdd(idx.data(), add.data(), 0, acc.data());  // k = 0: no-op.
}

TEST(SparseOpsTest, Block16RoundTrip) {
  std::mt19937 rng(2);
  const int64_t d = 3 * kBlock16Size + 1234;  // Last block partial.
  std::vector<uint32_t> idx = RandomAscending(d, 5000, &rng);
  idx.back() = static_cast<uint32_t>(d - 1);
  std::sort(idx.begin(), idx.end());
  idx.erase(std::unique(idx.begin(), idx.end()), idx.end());
  const std::vector<float> val = RandomValues(idx.size(), &rng);
  std::vector<uint16_t> i16(idx.size()), v16(idx.size());
  std::vector<uint32_t> offsets;
  EncodeBlock16BF16(idx.data(), val.data(), idx.size(), d, i16.data(),
                    v16.data(), &offsets);
  ASSERT_EQ(offsets.size(), 5u);
  EXPECT_EQ(offsets.front(), 0u);
  EXPECT_EQ(offsets.back(), idx.size());
  const SparseRow row = Block16Row(i16.data(), v16.data(), offsets);
  EXPECT_EQ(row.nnz, static_cast<int64_t>(idx.size()));
  for (int64_t b = 0; b < row.num_blocks; ++b) {
    for (uint32_t j = offsets[b]; j < offsets[b + 1]; ++j) {
      ASSERT_EQ(b * kBlock16Size + i16[j], idx[j]);
      ASSERT_EQ(v16[j], FloatToBFloat16(val[j]));
    }
  }
  // Empty input.
  EncodeBlock16BF16(nullptr, nullptr, 0, 10, nullptr, nullptr, &offsets);
  EXPECT_EQ(offsets, (std::vector<uint32_t>{0, 0}));
}

struct TestRows {
  std::vector<std::vector<uint32_t>> idx;
  std::vector<std::vector<float>> val;
  std::vector<std::vector<uint16_t>> i16, v16;
  std::vector<std::vector<uint32_t>> offsets;
  std::vector<SparseRow> rows;
};

// Rows alternate between format A and B; format-B rows keep the bf16 value.
TestRows MakeRows(int64_t m, int64_t d, int64_t nnz, std::mt19937* rng) {
  TestRows t;
  t.idx.resize(m);
  t.val.resize(m);
  t.i16.resize(m);
  t.v16.resize(m);
  t.offsets.resize(m);
  for (int64_t i = 0; i < m; ++i) {
    t.idx[i] = RandomAscending(d, nnz + i, rng);
    t.val[i] = RandomValues(t.idx[i].size(), rng);
    SparseRow row;
    if (i % 2 == 0) {
      row.nnz = t.idx[i].size();
      row.index32 = t.idx[i].data();
      row.value32 = t.val[i].data();
    } else {
      t.i16[i].resize(t.idx[i].size());
      t.v16[i].resize(t.idx[i].size());
      EncodeBlock16BF16(t.idx[i].data(), t.val[i].data(), t.idx[i].size(), d,
                        t.i16[i].data(), t.v16[i].data(), &t.offsets[i]);
      for (size_t j = 0; j < t.val[i].size(); ++j) {
        t.val[i][j] = BFloat16ToFloat(t.v16[i][j]);
      }
      row = Block16Row(t.i16[i].data(), t.v16[i].data(), t.offsets[i]);
    }
    t.rows.push_back(row);
  }
  return t;
}

TEST(SparseOpsTest, DotsMatchDoubleReference) {
  std::mt19937 rng(3);
  const int64_t d = 2 * kBlock16Size + 77;
  const int64_t m = 7;
  TestRows t = MakeRows(m, d, 40000, &rng);
  const std::vector<float> dense = RandomValues(d, &rng);
  for (int threads : {1, 3}) {
    std::vector<double> out(m, -1.0);
    SparseDenseDots(t.rows.data(), m, dense.data(), out.data(), threads);
    for (int64_t i = 0; i < m; ++i) {
      double ref = 0;
      for (size_t j = 0; j < t.idx[i].size(); ++j) {
        ref += static_cast<double>(t.val[i][j]) * dense[t.idx[i][j]];
      }
      EXPECT_EQ(out[i], ref) << "row " << i;  // Same order: bit-exact.
    }
  }
}

TEST(SparseOpsTest, LinearCombinationMatchesRowOrderReference) {
  std::mt19937 rng(4);
  const int64_t d = 3 * kBlock16Size;
  const int64_t m = 5;
  TestRows t = MakeRows(m, d, 60000, &rng);
  const std::vector<double> coeffs = {0.5, -1.25, 3.0, 1e-3, -7.0};
  std::vector<float> ref = RandomValues(d, &rng);
  std::vector<float> base = ref;
  for (int64_t i = 0; i < m; ++i) {
    for (size_t j = 0; j < t.idx[i].size(); ++j) {
      ref[t.idx[i][j]] += static_cast<float>(coeffs[i] * t.val[i][j]);
    }
  }
  for (int threads : {1, 2, 5}) {
    std::vector<float> dense = base;
    SparseLinearCombination(t.rows.data(), m, coeffs.data(), dense.data(),
                            threads);
    ASSERT_EQ(dense, ref) << "threads=" << threads;
  }
}

TEST(SparseOpsTest, EmptyRows) {
  SparseRow empty;
  double out = 5;
  float dense[4] = {1, 2, 3, 4};
  SparseDenseDots(&empty, 1, dense, &out);
  EXPECT_EQ(out, 0.0);
  const double c = 2.0;
  SparseLinearCombination(&empty, 1, &c, dense);
  EXPECT_EQ(dense[3], 4.0f);
}

}  // namespace
}  // namespace kernels
}  // namespace terse
