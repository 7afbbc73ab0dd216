#include "efcp/sparse_mfac.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "efcp/dense_mfac.h"
#include "efcp/oracle_testutil.h"
#include "gtest/gtest.h"

namespace terse {
namespace efcp {
namespace {

constexpr int64_t kDim = 50;
constexpr int64_t kWindow = 8;

std::unique_ptr<SparseMfac> Make(WindowStorage storage, double damp,
                                 double density = 0.2) {
  SparseMfacOptions options;
  options.dim = kDim;
  options.window = kWindow;
  options.damp = damp;
  options.density = density;
  options.storage = storage;
  options.num_threads = 2;
  absl::StatusOr<std::unique_ptr<SparseMfac>> mfac =
      SparseMfac::Create(options);
  EXPECT_TRUE(mfac.ok()) << mfac.status();
  return std::move(*mfac);
}

// The stored row of a slot as a dense double vector.
std::vector<double> DenseRow(const SparseMfac& mfac, int64_t slot) {
  std::vector<uint32_t> indices;
  std::vector<float> values;
  mfac.window().ReadRow(slot, &indices, &values);
  std::vector<double> row(mfac.dim(), 0.0);
  for (size_t j = 0; j < indices.size(); ++j) row[indices[j]] = values[j];
  return row;
}

class SparseMfacTest : public ::testing::TestWithParam<WindowStorage> {};

// Every step through wrap-around: nnz = floor(density * d) per stored row,
// the update equals the fp64 closed form F^-1 c over the stored rows, and
// error feedback conserves the gradient sum.
TEST_P(SparseMfacTest, StepMatchesClosedFormAndConserves) {
  const WindowStorage storage = GetParam();
  for (double damp : {1e-4, 1e-2, 1.0}) {
    std::mt19937 rng(40);
    auto mfac = Make(storage, damp);
    ASSERT_EQ(mfac->k(), 10);
    RingReference ring(kWindow);
    std::vector<double> sum_g(kDim, 0.0), sum_c(kDim, 0.0);
    for (int step = 0; step < 3 * kWindow + 2; ++step) {
      const std::vector<float> g = RandomVector(kDim, &rng);
      std::vector<float> u(kDim);
      ASSERT_TRUE(mfac->Step(g, absl::MakeSpan(u)).ok());
      const int64_t slot = step % kWindow;
      EXPECT_EQ(mfac->window().nnz(slot), 10);
      const std::vector<double> c = DenseRow(*mfac, slot);
      ring.Push(c);
      for (int64_t i = 0; i < kDim; ++i) {
        sum_g[i] += g[i];
        sum_c[i] += c[i];
      }
      EXPECT_LT(RelativeError(u, MfacReference(ring.rows(), kWindow, damp, c)),
                2e-6)
          << "damp " << damp << " step " << step;
    }
    for (int64_t i = 0; i < kDim; ++i) {
      EXPECT_NEAR(mfac->error()[i] + sum_c[i], sum_g[i], 1e-5);
    }
  }
}

TEST_P(SparseMfacTest, ApplyToOtherVectors) {
  std::mt19937 rng(41);
  const double damp = 1e-2;
  auto mfac = Make(GetParam(), damp);
  std::vector<float> u(kDim);
  for (int step = 0; step < kWindow + 3; ++step) {
    ASSERT_TRUE(mfac->Step(RandomVector(kDim, &rng), absl::MakeSpan(u)).ok());
    if (step == 1 || step == kWindow + 2) {
      DoubleRows rows;
      for (int64_t s = 0; s < std::min<int64_t>(step + 1, kWindow); ++s) {
        rows.push_back(DenseRow(*mfac, s));
      }
      const std::vector<float> x = RandomVector(kDim, &rng);
      ASSERT_TRUE(mfac->Apply(x, absl::MakeSpan(u)).ok());
      EXPECT_LT(
          RelativeError(u, MfacReference(rows, kWindow, damp, ToDouble(x))),
          2e-6);
    }
  }
}

TEST_P(SparseMfacTest, MemoryReport) {
  SparseMfacOptions options;
  options.dim = 1 << 20;
  options.window = 4;
  options.storage = GetParam();
  auto mfac = *SparseMfac::Create(options);
  const int64_t k = 10485;
  ASSERT_EQ(mfac->k(), k);
  const MemoryUsage usage = mfac->memory();
  if (GetParam() == WindowStorage::kIndex32Fp32) {
    EXPECT_EQ(usage.window, 4 * k * 8);
  } else {
    // Slots only, no per-row table: <= 1% of the dense window.
    EXPECT_EQ(usage.window, 4 * k * 4);
    EXPECT_LE(usage.window * 100, int64_t{4} * (1 << 20) * 4);
  }
  EXPECT_EQ(usage.error, (1 << 20) * 4);
  EXPECT_EQ(usage.small, (2 * 16 + 4) * 8);
  EXPECT_EQ(mfac->memory_bytes(), usage.total());
}

// Several 65536-wide blocks: with top-k entries spread over the blocks every
// block boundary is a descent of the relative index, so a block16 row holds
// all k = floor(density * d) entries (no marker); u32 rows always do. The
// general bound (k - (blocks - 1) <= nnz <= k) is asserted too.
TEST_P(SparseMfacTest, MultiBlockRowsHoldKEntries) {
  SparseMfacOptions options;
  options.dim = 3 * 65536 + 3392;  // 4 blocks, the last partial
  options.window = 3;
  options.damp = 1e-2;
  options.density = 0.01;
  options.storage = GetParam();
  options.num_threads = 2;
  auto mfac = *SparseMfac::Create(options);
  const int64_t k = mfac->k();
  ASSERT_EQ(k, 2000);
  std::mt19937 rng(43);
  std::vector<double> sum_g(options.dim, 0.0), sum_c(options.dim, 0.0);
  std::vector<float> u(options.dim);
  for (int step = 0; step < 5; ++step) {
    const std::vector<float> g = RandomVector(options.dim, &rng);
    ASSERT_TRUE(mfac->Step(g, absl::MakeSpan(u)).ok());
    const int64_t slot = step % options.window;
    const int64_t nnz = mfac->window().nnz(slot);
    EXPECT_GE(nnz, k - 3);
    EXPECT_LE(mfac->window().used_slots(slot), k);
    EXPECT_EQ(nnz, k) << "step " << step;
    const std::vector<double> c = DenseRow(*mfac, slot);
    for (int64_t i = 0; i < options.dim; ++i) {
      sum_g[i] += g[i];
      sum_c[i] += c[i];
    }
  }
  for (int64_t i = 0; i < options.dim; ++i) {
    ASSERT_NEAR(mfac->error()[i] + sum_c[i], sum_g[i], 1e-5);
  }
}

// A gradient whose top k need jump markers (one entry per block, relative
// indices rising): a block16 row drops its smallest entries until entries +
// markers fit k slots, and they stay in the error buffer exactly; the update
// is still F^-1 c over what the window stores.
TEST(SparseMfacBlock16Test, MarkersDropTheSmallestIntoTheError) {
  SparseMfacOptions options;
  options.dim = 10 * 65536;
  options.window = 2;
  options.damp = 1e-2;
  options.density = 10.0 / options.dim;
  options.storage = WindowStorage::kBlock16Bf16;
  options.num_threads = 1;
  auto mfac = *SparseMfac::Create(options);
  ASSERT_EQ(mfac->k(), 10);
  std::vector<float> g(options.dim, 0.0f);
  for (int b = 0; b < 10; ++b) g[b * 65536 + b] = 10.0f - b;  // bf16-exact
  std::vector<float> u(options.dim);
  ASSERT_TRUE(mfac->Step(g, absl::MakeSpan(u)).ok());
  // Entries 0..4 + 4 jumps = 9 slots; adding entry 5 would need 11.
  std::vector<uint32_t> indices;
  std::vector<float> values;
  mfac->window().ReadRow(0, &indices, &values);
  ASSERT_EQ(indices.size(), 5u);
  EXPECT_EQ(mfac->window().used_slots(0), 9);
  for (int b = 0; b < 5; ++b) {
    EXPECT_EQ(indices[b], static_cast<uint32_t>(b * 65536 + b));
    EXPECT_EQ(values[b], 10.0f - b);
  }
  for (int64_t i = 0; i < options.dim; ++i) {
    const bool kept = i % 65536 == i / 65536 && i / 65536 < 5;
    ASSERT_EQ(mfac->error()[i], kept ? 0.0f : g[i]) << i;
  }
  // One stored row c (the other slot zero): F = lambda I + c c^T / m, so
  // F^-1 c = c / (lambda + |c|^2 / m).
  const std::vector<double> c = DenseRow(*mfac, 0);
  double norm2 = 0;
  for (double v : c) norm2 += v * v;
  std::vector<double> want(c.size());
  for (size_t i = 0; i < c.size(); ++i) want[i] = c[i] / (1e-2 + norm2 / 2);
  EXPECT_LT(RelativeError(u, want), 2e-6);
}

// With density 1 nothing is dropped (and fp32 storage rounds nothing), so
// EFCP is dense M-FAC.
TEST(SparseMfacDensityOneTest, EqualsDenseMfac) {
  std::mt19937 rng(42);
  for (double damp : {1e-2, 1.0}) {
    auto sparse = Make(WindowStorage::kIndex32Fp32, damp, /*density=*/1.0);
    DenseMfacOptions options;
    options.dim = kDim;
    options.window = kWindow;
    options.damp = damp;
    auto dense = *DenseMfac::Create(options);
    RingReference ring(kWindow);
    std::vector<float> u(kDim), v(kDim);
    for (int step = 0; step < 2 * kWindow + 3; ++step) {
      const std::vector<float> g = RandomVector(kDim, &rng);
      ASSERT_TRUE(sparse->Step(g, absl::MakeSpan(u)).ok());
      ASSERT_TRUE(dense->Step(g, absl::MakeSpan(v)).ok());
      ring.Push(g);
      for (float e : sparse->error()) ASSERT_EQ(e, 0.0f);
      EXPECT_LT(RelativeError(u, ToDouble(v)), 2e-6);
    }
    const std::vector<float> x = RandomVector(kDim, &rng);
    ASSERT_TRUE(sparse->Apply(x, absl::MakeSpan(u)).ok());
    ASSERT_TRUE(dense->Apply(x, absl::MakeSpan(v)).ok());
    EXPECT_LT(RelativeError(u, ToDouble(v)), 1e-6);
  }
}

TEST(SparseMfacCreateTest, RejectsBadOptions) {
  SparseMfacOptions options;
  options.dim = 0;
  EXPECT_EQ(SparseMfac::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.dim = 100;
  options.window = 0;
  EXPECT_FALSE(SparseMfac::Create(options).ok());
  options.window = 4;
  for (double density : {0.0, -0.5, 1.0000001, 2.0, std::nan("")}) {
    options.density = density;
    EXPECT_FALSE(SparseMfac::Create(options).ok()) << density;
  }
  options.density = 1.0;
  EXPECT_TRUE(SparseMfac::Create(options).ok());
  options.damp = -1;
  EXPECT_FALSE(SparseMfac::Create(options).ok());
  options.damp = 1;
  options.storage = static_cast<WindowStorage>(7);
  EXPECT_FALSE(SparseMfac::Create(options).ok());
  options.storage = WindowStorage::kBlock16Bf16;
  options.dim = int64_t{1} << 32;
  EXPECT_FALSE(SparseMfac::Create(options).ok());
}

TEST_P(SparseMfacTest, BadGradientLeavesStateUntouched) {
  std::mt19937 rng(43);
  auto mfac = Make(GetParam(), 0.1);
  std::vector<float> u(kDim);
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(mfac->Step(RandomVector(kDim, &rng), absl::MakeSpan(u)).ok());
  }
  const std::string before = mfac->SaveState();
  for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity()}) {
    std::vector<float> g = RandomVector(kDim, &rng);
    g[3] = bad;
    EXPECT_EQ(mfac->Step(g, absl::MakeSpan(u)).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_FALSE(mfac->Apply(g, absl::MakeSpan(u)).ok());
  }
  std::vector<float> short_out(kDim + 1);
  EXPECT_FALSE(
      mfac->Step(RandomVector(kDim, &rng), absl::MakeSpan(short_out)).ok());
  EXPECT_EQ(mfac->SaveState(), before);
  EXPECT_EQ(mfac->steps(), 3);
}

TEST_P(SparseMfacTest, SaveRestoreContinuesIdentically) {
  for (int64_t saved : {int64_t{0}, int64_t{5}, 2 * kWindow + 1}) {
    std::mt19937 rng(44);
    auto a = Make(GetParam(), 0.05);
    std::vector<float> u(kDim), v(kDim);
    for (int64_t step = 0; step < saved; ++step) {
      ASSERT_TRUE(a->Step(RandomVector(kDim, &rng), absl::MakeSpan(u)).ok());
    }
    auto b = Make(GetParam(), 0.05);
    ASSERT_TRUE(b->Step(RandomVector(kDim, &rng), absl::MakeSpan(v)).ok());
    ASSERT_TRUE(b->RestoreState(a->SaveState()).ok());
    EXPECT_EQ(b->steps(), saved);
    EXPECT_EQ(b->error(), a->error());
    for (int step = 0; step < kWindow + 1; ++step) {
      const std::vector<float> g = RandomVector(kDim, &rng);
      ASSERT_TRUE(a->Step(g, absl::MakeSpan(u)).ok());
      ASSERT_TRUE(b->Step(g, absl::MakeSpan(v)).ok());
      for (int64_t j = 0; j < kDim; ++j) {
        EXPECT_NEAR(u[j], v[j], 1e-5 * (1 + std::abs(u[j])));
      }
    }
  }
}

TEST_P(SparseMfacTest, RestoreRejectsBadBlobsAndKeepsState) {
  std::mt19937 rng(45);
  auto a = Make(GetParam(), 0.5);
  std::vector<float> u(kDim);
  for (int step = 0; step < 4; ++step) {
    ASSERT_TRUE(a->Step(RandomVector(kDim, &rng), absl::MakeSpan(u)).ok());
  }
  const std::string good = a->SaveState();
  auto b = Make(GetParam(), 0.5);
  ASSERT_TRUE(b->Step(RandomVector(kDim, &rng), absl::MakeSpan(u)).ok());
  const std::string b_before = b->SaveState();
  for (size_t cut = 0; cut < good.size(); cut += 5) {
    EXPECT_FALSE(b->RestoreState(good.substr(0, cut)).ok()) << cut;
  }
  EXPECT_FALSE(b->RestoreState(good + "zz").ok());
  // Header: magic 4, version 4, kind (8 + 11), dim 8, m 8, k 8, storage 4,
  // steps 8, error 50*4; then the first row: nnz 8, indices, values.
  const size_t first_row = 4 + 4 + 8 + 11 + 8 + 8 + 8 + 4 + 8 + kDim * 4;
  std::string corrupt = good;
  const uint32_t out_of_range = 1000;
  std::memcpy(&corrupt[first_row + 8], &out_of_range, 4);
  EXPECT_FALSE(b->RestoreState(corrupt).ok());
  corrupt = good;
  const int64_t too_many = 11;
  std::memcpy(&corrupt[first_row], &too_many, 8);
  EXPECT_FALSE(b->RestoreState(corrupt).ok());
  corrupt = good;
  const float nan = std::nanf("");
  std::memcpy(&corrupt[first_row - 4], &nan, 4);  // last error entry
  EXPECT_FALSE(b->RestoreState(corrupt).ok());
  corrupt = good;
  corrupt[corrupt.size() - 1] ^= 0x40;  // Gram(m-1, m-1) of an empty slot
  EXPECT_FALSE(b->RestoreState(corrupt).ok());
  auto other = Make(GetParam() == WindowStorage::kIndex32Fp32
                        ? WindowStorage::kBlock16Bf16
                        : WindowStorage::kIndex32Fp32,
                    0.5);
  EXPECT_FALSE(other->RestoreState(good).ok());
  EXPECT_EQ(b->SaveState(), b_before);
  EXPECT_TRUE(b->RestoreState(good).ok());
}

// A window imported with its true Gram matrix behaves like the original.
TEST_P(SparseMfacTest, ImportWindowMatchesOriginal) {
  std::mt19937 rng(46);
  auto a = Make(GetParam(), 0.1);
  std::vector<float> u(kDim), v(kDim);
  for (int step = 0; step < 5; ++step) {
    ASSERT_TRUE(a->Step(RandomVector(kDim, &rng), absl::MakeSpan(u)).ok());
  }
  std::vector<SparseVector> rows(5);
  std::vector<double> gram(25);
  for (int i = 0; i < 5; ++i) {
    a->window().ReadRow(i, &rows[i].indices, &rows[i].values);
    for (int j = 0; j < 5; ++j) gram[i * 5 + j] = a->system().gram()(i, j);
  }
  auto b = Make(GetParam(), 0.1);
  ASSERT_TRUE(b->ImportWindow(rows, gram).ok());
  EXPECT_EQ(b->steps(), 5);
  const std::vector<float> x = RandomVector(kDim, &rng);
  ASSERT_TRUE(a->Apply(x, absl::MakeSpan(u)).ok());
  ASSERT_TRUE(b->Apply(x, absl::MakeSpan(v)).ok());
  EXPECT_LT(RelativeError(u, ToDouble(v)), 1e-6);

  const std::string before = b->SaveState();
  std::vector<double> bad_gram = gram;
  bad_gram[0] *= 2;  // diagonal does not match row 0
  EXPECT_FALSE(b->ImportWindow(rows, bad_gram).ok());
  std::vector<SparseVector> bad_rows = rows;
  bad_rows[2].indices[0] = kDim;
  EXPECT_FALSE(b->ImportWindow(bad_rows, gram).ok());
  bad_rows = rows;
  std::swap(bad_rows[1].indices[0], bad_rows[1].indices[1]);
  EXPECT_FALSE(b->ImportWindow(bad_rows, gram).ok());
  bad_rows = rows;
  bad_rows[0].values[0] = 1.0f + 1.0f / 1024;  // not a bf16 value
  gram[0] = 0;
  for (float val : bad_rows[0].values) gram[0] += double(val) * val;
  EXPECT_EQ(b->ImportWindow(bad_rows, gram).ok(),
            GetParam() == WindowStorage::kIndex32Fp32);
  std::vector<SparseVector> too_many(kWindow + 1);
  EXPECT_FALSE(b->ImportWindow(too_many, std::vector<double>(81)).ok());
  if (GetParam() == WindowStorage::kBlock16Bf16) {
    EXPECT_EQ(b->SaveState(), before);
  }
}

INSTANTIATE_TEST_SUITE_P(Storages, SparseMfacTest,
                         ::testing::Values(WindowStorage::kIndex32Fp32,
                                           WindowStorage::kBlock16Bf16),
                         [](const auto& info) {
                           return std::string(WindowStorageName(info.param));
                         });

}  // namespace
}  // namespace efcp
}  // namespace terse
