#include "efcp/ggt.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "efcp/oracle_testutil.h"
#include "gtest/gtest.h"

namespace terse {
namespace efcp {
namespace {

constexpr int64_t kDim = 50;
constexpr int64_t kWindow = 8;

std::unique_ptr<Ggt> MakeDense(double eps) {
  GgtOptions options;
  options.dim = kDim;
  options.window = kWindow;
  options.epsilon = eps;
  options.num_threads = 2;
  absl::StatusOr<std::unique_ptr<Ggt>> ggt = Ggt::Create(options);
  EXPECT_TRUE(ggt.ok()) << ggt.status();
  return std::move(*ggt);
}

std::unique_ptr<SparseGgt> MakeSparse(double eps, WindowStorage storage,
                                      double density = 0.2) {
  SparseGgtOptions options;
  options.dim = kDim;
  options.window = kWindow;
  options.epsilon = eps;
  options.density = density;
  options.storage = storage;
  options.num_threads = 2;
  absl::StatusOr<std::unique_ptr<SparseGgt>> ggt = SparseGgt::Create(options);
  EXPECT_TRUE(ggt.ok()) << ggt.status();
  return std::move(*ggt);
}

std::vector<double> DenseRow(const SparseWindow& window, int64_t slot) {
  std::vector<uint32_t> indices;
  std::vector<float> values;
  window.ReadRow(slot, &indices, &values);
  std::vector<double> row(window.dim(), 0.0);
  for (size_t j = 0; j < indices.size(); ++j) row[indices[j]] = values[j];
  return row;
}

// Step against (eps I + (G^T G)^{1/2})^-1 g from the d x d eigendecomposition
// in fp64, from an empty window through wrap-around.
TEST(GgtTest, StepMatchesFullEigendecomposition) {
  for (double eps : {1e-3, 0.1, 1.0}) {
    std::mt19937 rng(50);
    auto ggt = MakeDense(eps);
    RingReference ring(kWindow);
    std::vector<float> u(kDim);
    for (int step = 0; step < 3 * kWindow + 2; ++step) {
      const std::vector<float> g = RandomVector(kDim, &rng, 1.0 + step % 3);
      ASSERT_TRUE(ggt->Step(g, absl::MakeSpan(u)).ok());
      ring.Push(g);
      EXPECT_LT(RelativeError(u, GgtReference(ring.rows(), eps, ToDouble(g))),
                2e-6)
          << "eps " << eps << " step " << step;
    }
  }
}

// Apply to vectors mostly outside the span of the window.
TEST(GgtTest, ApplyMatchesFullEigendecomposition) {
  for (double eps : {1e-2, 1.0}) {
    std::mt19937 rng(51);
    auto ggt = MakeDense(eps);
    RingReference ring(kWindow);
    std::vector<float> u(kDim);
    for (int step = 0; step < kWindow + 3; ++step) {
      const std::vector<float> g = RandomVector(kDim, &rng);
      ASSERT_TRUE(ggt->Step(g, absl::MakeSpan(u)).ok());
      ring.Push(g);
      if (step == 2 || step == kWindow + 2) {
        const std::vector<float> x = RandomVector(kDim, &rng, 2.0);
        ASSERT_TRUE(ggt->Apply(x, absl::MakeSpan(u)).ok());
        EXPECT_LT(RelativeError(u, GgtReference(ring.rows(), eps, ToDouble(x))),
                  1e-5)
            << "eps " << eps << " step " << step;
      }
    }
  }
}

// An empty window is (eps I)^-1.
TEST(GgtTest, EmptyWindowScalesByInverseEpsilon) {
  auto ggt = MakeDense(0.5);
  std::vector<float> x(kDim, 3.0f), u(kDim);
  ASSERT_TRUE(ggt->Apply(x, absl::MakeSpan(u)).ok());
  for (float v : u) EXPECT_FLOAT_EQ(v, 6.0f);
}

// A rank-deficient window (the same gradient twice, and a zero gradient).
TEST(GgtTest, RankDeficientWindow) {
  std::mt19937 rng(52);
  const double eps = 0.01;
  auto ggt = MakeDense(eps);
  RingReference ring(kWindow);
  const std::vector<float> g = RandomVector(kDim, &rng);
  const std::vector<float> zero(kDim, 0.0f);
  std::vector<float> u(kDim);
  for (const std::vector<float>* grad : {&g, &g, &zero}) {
    ASSERT_TRUE(ggt->Step(*grad, absl::MakeSpan(u)).ok());
    ring.Push(*grad);
    if (grad != &zero) {
      EXPECT_LT(
          RelativeError(u, GgtReference(ring.rows(), eps, ToDouble(*grad))),
          2e-6);
    } else {
      for (float v : u) EXPECT_EQ(v, 0.0f);
    }
  }
  const std::vector<float> x = RandomVector(kDim, &rng);
  ASSERT_TRUE(ggt->Apply(x, absl::MakeSpan(u)).ok());
  EXPECT_LT(RelativeError(u, GgtReference(ring.rows(), eps, ToDouble(x))),
            1e-5);
}

class SparseGgtTest : public ::testing::TestWithParam<WindowStorage> {};

TEST_P(SparseGgtTest, StepMatchesOracleAndConserves) {
  std::mt19937 rng(53);
  const double eps = 0.05;
  auto ggt = MakeSparse(eps, GetParam());
  ASSERT_EQ(ggt->k(), 10);
  RingReference ring(kWindow);
  std::vector<double> sum_g(kDim, 0.0), sum_c(kDim, 0.0);
  std::vector<float> u(kDim);
  for (int step = 0; step < 2 * kWindow + 3; ++step) {
    const std::vector<float> g = RandomVector(kDim, &rng);
    ASSERT_TRUE(ggt->Step(g, absl::MakeSpan(u)).ok());
    const int64_t slot = step % kWindow;
    EXPECT_EQ(ggt->window().nnz(slot), 10);
    const std::vector<double> c = DenseRow(ggt->window(), slot);
    ring.Push(c);
    for (int64_t i = 0; i < kDim; ++i) {
      sum_g[i] += g[i];
      sum_c[i] += c[i];
    }
    EXPECT_LT(RelativeError(u, GgtReference(ring.rows(), eps, c)), 2e-6)
        << "step " << step;
  }
  for (int64_t i = 0; i < kDim; ++i) {
    EXPECT_NEAR(ggt->error()[i] + sum_c[i], sum_g[i], 1e-5);
  }
  const std::vector<float> x = RandomVector(kDim, &rng);
  ASSERT_TRUE(ggt->Apply(x, absl::MakeSpan(u)).ok());
  EXPECT_LT(RelativeError(u, GgtReference(ring.rows(), eps, ToDouble(x))),
            1e-5);
}

TEST_P(SparseGgtTest, SaveRestoreAndBadInput) {
  std::mt19937 rng(54);
  auto a = MakeSparse(0.1, GetParam());
  std::vector<float> u(kDim), v(kDim);
  for (int step = 0; step < kWindow + 2; ++step) {
    ASSERT_TRUE(a->Step(RandomVector(kDim, &rng), absl::MakeSpan(u)).ok());
  }
  const std::string saved = a->SaveState();
  std::vector<float> bad = RandomVector(kDim, &rng);
  bad[0] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(a->Step(bad, absl::MakeSpan(u)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a->SaveState(), saved);

  auto b = MakeSparse(0.1, GetParam());
  for (size_t cut = 0; cut < saved.size(); cut += 9) {
    EXPECT_FALSE(b->RestoreState(saved.substr(0, cut)).ok());
  }
  EXPECT_EQ(b->steps(), 0);
  ASSERT_TRUE(b->RestoreState(saved).ok());
  EXPECT_EQ(b->steps(), kWindow + 2);
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> g = RandomVector(kDim, &rng);
    ASSERT_TRUE(a->Step(g, absl::MakeSpan(u)).ok());
    ASSERT_TRUE(b->Step(g, absl::MakeSpan(v)).ok());
    EXPECT_LT(RelativeError(u, ToDouble(v)), 1e-6);
  }
  EXPECT_FALSE(MakeDense(0.1)->RestoreState(saved).ok());  // other kind
}

TEST_P(SparseGgtTest, MemoryReport) {
  SparseGgtOptions options;
  options.dim = 1 << 20;
  options.window = 4;
  options.storage = GetParam();
  auto ggt = *SparseGgt::Create(options);
  const int64_t per_entry = GetParam() == WindowStorage::kIndex32Fp32 ? 8 : 4;
  // The slots only (block16: no per-row block table).
  EXPECT_EQ(ggt->memory().window, 4 * 10485 * per_entry);
  EXPECT_EQ(ggt->memory().error, (1 << 20) * 4);
}

INSTANTIATE_TEST_SUITE_P(Storages, SparseGgtTest,
                         ::testing::Values(WindowStorage::kIndex32Fp32,
                                           WindowStorage::kBlock16Bf16),
                         [](const auto& info) {
                           return std::string(WindowStorageName(info.param));
                         });

TEST(GgtTest, SaveRestoreContinuesIdentically) {
  std::mt19937 rng(55);
  auto a = MakeDense(0.1);
  std::vector<float> u(kDim), v(kDim);
  for (int step = 0; step < kWindow + 3; ++step) {
    ASSERT_TRUE(a->Step(RandomVector(kDim, &rng), absl::MakeSpan(u)).ok());
  }
  auto b = MakeDense(0.1);
  ASSERT_TRUE(b->RestoreState(a->SaveState()).ok());
  for (int step = 0; step < kWindow; ++step) {
    const std::vector<float> g = RandomVector(kDim, &rng);
    ASSERT_TRUE(a->Step(g, absl::MakeSpan(u)).ok());
    ASSERT_TRUE(b->Step(g, absl::MakeSpan(v)).ok());
    EXPECT_LT(RelativeError(u, ToDouble(v)), 1e-6);
  }
  const std::string good = a->SaveState();
  std::string corrupt = good;
  corrupt[corrupt.size() - 3] ^= 0x7f;  // the last Gram entry
  EXPECT_FALSE(b->RestoreState(corrupt).ok());
  EXPECT_FALSE(b->RestoreState(good + "!").ok());
}

// The last rows of `ring` (oldest first) weighted by beta2^age.
DoubleRows Decayed(const RingReference& ring, double beta2) {
  DoubleRows rows = ring.rows();
  const int64_t n = static_cast<int64_t>(rows.size());
  for (int64_t i = 0; i < n; ++i) {
    const double w = std::pow(beta2, static_cast<double>(n - 1 - i));
    for (double& v : rows[i]) v *= w;
  }
  return rows;
}

// beta2 < 1: the oracle on rows weighted by beta2^age, through wrap-around,
// for Step and Apply, dense and sparse, and across a save/restore.
TEST(GgtTest, Beta2DecaysOlderRows) {
  const double eps = 0.05;
  for (double beta2 : {0.0, 0.6, 0.95}) {
    std::mt19937 rng(56);
    GgtOptions options;
    options.dim = kDim;
    options.window = kWindow;
    options.epsilon = eps;
    options.beta2 = beta2;
    auto ggt = *Ggt::Create(options);
    SparseGgtOptions sparse_options;
    sparse_options.dim = kDim;
    sparse_options.window = kWindow;
    sparse_options.epsilon = eps;
    sparse_options.beta2 = beta2;
    sparse_options.density = 0.2;
    auto sparse = *SparseGgt::Create(sparse_options);
    RingReference ring(kWindow), sparse_ring(kWindow);
    std::vector<float> u(kDim);
    for (int step = 0; step < 2 * kWindow + 3; ++step) {
      const std::vector<float> g = RandomVector(kDim, &rng, 1.0 + step % 3);
      ASSERT_TRUE(ggt->Step(g, absl::MakeSpan(u)).ok());
      ring.Push(g);
      EXPECT_LT(RelativeError(
                    u, GgtReference(Decayed(ring, beta2), eps, ToDouble(g))),
                2e-6)
          << "beta2 " << beta2 << " step " << step;
      ASSERT_TRUE(sparse->Step(g, absl::MakeSpan(u)).ok());
      const std::vector<double> c = DenseRow(sparse->window(), step % kWindow);
      sparse_ring.Push(c);
      EXPECT_LT(
          RelativeError(u, GgtReference(Decayed(sparse_ring, beta2), eps, c)),
          2e-6)
          << "sparse, beta2 " << beta2 << " step " << step;
      if (step == 3 || step == kWindow + 5) {
        const std::vector<float> x = RandomVector(kDim, &rng);
        ASSERT_TRUE(ggt->Apply(x, absl::MakeSpan(u)).ok());
        EXPECT_LT(RelativeError(
                      u, GgtReference(Decayed(ring, beta2), eps, ToDouble(x))),
                  1e-5);
      }
    }
    // A restored copy weights the rows the same way.
    auto copy = *Ggt::Create(options);
    ASSERT_TRUE(copy->RestoreState(ggt->SaveState()).ok());
    std::vector<float> v(kDim);
    for (int step = 0; step < 3; ++step) {
      const std::vector<float> g = RandomVector(kDim, &rng);
      ASSERT_TRUE(ggt->Step(g, absl::MakeSpan(u)).ok());
      ASSERT_TRUE(copy->Step(g, absl::MakeSpan(v)).ok());
      EXPECT_EQ(u, v);
    }
  }
}

TEST(GgtTest, CreateRejectsBadOptions) {
  GgtOptions options;
  options.dim = 0;
  EXPECT_FALSE(Ggt::Create(options).ok());
  options.dim = 5;
  options.window = 0;
  EXPECT_FALSE(Ggt::Create(options).ok());
  options.window = 2;
  for (double eps : {0.0, -1.0, std::nan("")}) {
    options.epsilon = eps;
    EXPECT_FALSE(Ggt::Create(options).ok());
  }
  SparseGgtOptions sparse;
  sparse.dim = 5;
  sparse.window = 2;
  for (double density : {0.0, 1.5, -0.1}) {
    sparse.density = density;
    EXPECT_FALSE(SparseGgt::Create(sparse).ok());
  }
  sparse.density = 0.5;
  options.epsilon = 1.0;
  for (double beta2 : {-0.1, 1.5, std::nan("")}) {
    options.beta2 = beta2;
    sparse.beta2 = beta2;
    EXPECT_EQ(Ggt::Create(options).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(SparseGgt::Create(sparse).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  options.beta2 = 1.0;
  auto ggt = MakeDense(1.0);
  std::vector<float> g(kDim, 1.0f), u(kDim);
  g[7] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(ggt->Step(g, absl::MakeSpan(u)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ggt->steps(), 0);
}

}  // namespace
}  // namespace efcp
}  // namespace terse
