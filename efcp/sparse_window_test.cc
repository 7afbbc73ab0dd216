#include "efcp/sparse_window.h"

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include "common/half.h"
#include "gtest/gtest.h"

namespace terse {
namespace efcp {
namespace {

struct Row {
  std::vector<uint32_t> indices;
  std::vector<float> values;
};

Row RandomRow(int64_t d, int64_t nnz, std::mt19937* rng) {
  std::set<uint32_t> picked;
  std::uniform_int_distribution<uint32_t> pick(0, static_cast<uint32_t>(d - 1));
  while (static_cast<int64_t>(picked.size()) < nnz) picked.insert(pick(*rng));
  std::normal_distribution<float> normal;
  Row row;
  row.indices.assign(picked.begin(), picked.end());
  for (size_t j = 0; j < row.indices.size(); ++j) {
    row.values.push_back(normal(*rng));
  }
  return row;
}

class SparseWindowTest : public ::testing::TestWithParam<WindowStorage> {};

// Rows spanning several 65536-wide blocks: read-back, both products against
// naive loops over the stored values, and empty slots.
TEST_P(SparseWindowTest, ProductsMatchNaiveLoops) {
  const WindowStorage storage = GetParam();
  std::mt19937 rng(20);
  const int64_t d = 200000, m = 4, capacity = 3000;
  SparseWindow window(m, d, capacity, storage, 2);
  std::vector<Row> stored(m);
  for (int64_t slot = 0; slot < m - 1; ++slot) {
    Row row = RandomRow(d, slot == 1 ? 17 : capacity, &rng);
    if (slot == 2) {
      // No entry in block 1: a block16 row needs a jump marker, so its
      // smallest entry gives up its slot.
      row = RandomRow(d - 65536, capacity, &rng);
      for (uint32_t& i : row.indices) i += i >= 65536 ? 65536 : 0;
    }
    const int64_t n = window.Fit(row.indices.data(), row.values.data(),
                                 static_cast<int64_t>(row.indices.size()));
    if (slot == 2 && storage == WindowStorage::kBlock16Bf16) {
      EXPECT_EQ(n, capacity - 1);
    } else {
      EXPECT_EQ(n, static_cast<int64_t>(row.indices.size()));
    }
    row.indices.resize(n);
    row.values.resize(n);
    EXPECT_LE(window.Slots(row.indices.data(), n), capacity);
    window.SetRow(slot, row.indices.data(), row.values.data(), n);
    for (float& v : row.values) v = window.RoundToStorage(v);
    stored[slot] = row;
  }
  for (int64_t slot = 0; slot < m; ++slot) {
    std::vector<uint32_t> indices;
    std::vector<float> values;
    window.ReadRow(slot, &indices, &values);
    EXPECT_EQ(indices, stored[slot].indices);
    EXPECT_EQ(values, stored[slot].values);
    EXPECT_EQ(window.nnz(slot), static_cast<int64_t>(indices.size()));
  }
  std::vector<float> x(d);
  std::normal_distribution<float> normal;
  for (float& v : x) v = normal(rng);
  std::vector<double> dots(m);
  window.Dots(x.data(), dots.data());
  std::vector<double> coeffs = {0.5, -2.0, 1.5, 3.0};
  std::vector<double> want_comb(x.begin(), x.end());
  for (int64_t slot = 0; slot < m; ++slot) {
    double want = 0;
    for (size_t j = 0; j < stored[slot].indices.size(); ++j) {
      want += double(stored[slot].values[j]) * x[stored[slot].indices[j]];
      want_comb[stored[slot].indices[j]] +=
          coeffs[slot] * stored[slot].values[j];
    }
    EXPECT_NEAR(dots[slot], want, 1e-9 * (1 + std::abs(want)));
  }
  EXPECT_EQ(dots[m - 1], 0.0);
  std::vector<float> out = x;
  window.AddLinearCombination(coeffs.data(), out.data());
  for (int64_t j = 0; j < d; ++j) {
    ASSERT_NEAR(out[j], want_comb[j], 1e-5 * (1 + std::abs(want_comb[j])));
  }
  // A cleared slot is an empty row again.
  window.ClearRow(0);
  EXPECT_EQ(window.nnz(0), 0);
  window.Dots(x.data(), dots.data());
  EXPECT_EQ(dots[0], 0.0);
}

TEST_P(SparseWindowTest, MemoryIsTheEncodedArrays) {
  const WindowStorage storage = GetParam();
  const int64_t d = 1 << 20, m = 16, capacity = 10485;
  SparseWindow window(m, d, capacity, storage, 1);
  if (storage == WindowStorage::kIndex32Fp32) {
    EXPECT_EQ(window.memory_bytes(), m * capacity * 8);
  } else {
    // Nothing but the slots: <= 1% of m dense rows of d floats.
    EXPECT_EQ(window.memory_bytes(), m * capacity * 4);
    EXPECT_LE(window.memory_bytes() * 100, m * d * 4);
  }
  EXPECT_GT(window.bookkeeping_bytes(), 0);
}

TEST_P(SparseWindowTest, RoundToStorage) {
  SparseWindow window(1, 10, 2, GetParam(), 1);
  const float v = 1.0f + 1.0f / 1024;  // not a bf16 value
  if (GetParam() == WindowStorage::kIndex32Fp32) {
    EXPECT_EQ(window.RoundToStorage(v), v);
  } else {
    EXPECT_EQ(window.RoundToStorage(v), BFloat16ToFloat(FloatToBFloat16(v)));
    EXPECT_NE(window.RoundToStorage(v), v);
  }
}

INSTANTIATE_TEST_SUITE_P(Storages, SparseWindowTest,
                         ::testing::Values(WindowStorage::kIndex32Fp32,
                                           WindowStorage::kBlock16Bf16),
                         [](const auto& info) {
                           return std::string(WindowStorageName(info.param));
                         });

}  // namespace
}  // namespace efcp
}  // namespace terse
