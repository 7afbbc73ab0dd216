#include "efcp/gradient_momentum.h"

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "efcp/ggt.h"
#include "efcp/oracle_testutil.h"
#include "gtest/gtest.h"

namespace terse {
namespace efcp {
namespace {

constexpr int64_t kDim = 40;
constexpr int64_t kWindow = 6;
constexpr double kEps = 0.05;

std::unique_ptr<GradientMomentum> Make(double beta1) {
  GgtOptions options;
  options.dim = kDim;
  options.window = kWindow;
  options.epsilon = kEps;
  auto momentum = GradientMomentum::Create(*Ggt::Create(options), beta1);
  EXPECT_TRUE(momentum.ok()) << momentum.status();
  return std::move(*momentum);
}

// u = (eps I + (G^T G)^{1/2})^-1 v with v the fp64 moving average and G the
// last raw gradients, through wrap-around. v lies partly outside the span of
// the window, where float cancellation is amplified by 1/eps: 1e-4.
TEST(GradientMomentumTest, PreconditionsTheAverage) {
  for (double beta1 : {0.0, 0.5, 0.9}) {
    std::mt19937 rng(60);
    auto momentum = Make(beta1);
    RingReference ring(kWindow);
    std::vector<double> v(kDim, 0.0);
    std::vector<float> u(kDim);
    for (int step = 0; step < 2 * kWindow + 2; ++step) {
      const std::vector<float> g = RandomVector(kDim, &rng);
      ASSERT_TRUE(momentum->Step(g, absl::MakeSpan(u)).ok());
      ring.Push(g);
      for (int64_t i = 0; i < kDim; ++i)
        v[i] = beta1 * v[i] + (1 - beta1) * g[i];
      EXPECT_LT(RelativeError(u, GgtReference(ring.rows(), kEps, v)), 1e-4)
          << "beta1 " << beta1 << " step " << step;
      EXPECT_EQ(momentum->steps(), step + 1);
    }
    EXPECT_EQ(momentum->name(), "ggt");
  }
}

TEST(GradientMomentumTest, SaveRestoreContinuesIdentically) {
  std::mt19937 rng(61);
  auto a = Make(0.8);
  std::vector<float> u(kDim), w(kDim);
  for (int step = 0; step < kWindow + 1; ++step) {
    ASSERT_TRUE(a->Step(RandomVector(kDim, &rng), absl::MakeSpan(u)).ok());
  }
  const std::string saved = a->SaveState();
  auto b = Make(0.8);
  for (size_t cut = 0; cut < saved.size(); cut += 97) {
    EXPECT_FALSE(b->RestoreState(saved.substr(0, cut)).ok());
  }
  EXPECT_EQ(b->steps(), 0);
  ASSERT_TRUE(b->RestoreState(saved).ok());
  EXPECT_EQ(b->average(), a->average());
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> g = RandomVector(kDim, &rng);
    ASSERT_TRUE(a->Step(g, absl::MakeSpan(u)).ok());
    ASSERT_TRUE(b->Step(g, absl::MakeSpan(w)).ok());
    EXPECT_EQ(u, w);
  }
  EXPECT_GT(a->memory().scratch, b->inner().memory().scratch);
}

TEST(GradientMomentumTest, BadInputChangesNothing) {
  std::mt19937 rng(62);
  auto momentum = Make(0.5);
  std::vector<float> u(kDim);
  ASSERT_TRUE(momentum->Step(RandomVector(kDim, &rng), absl::MakeSpan(u)).ok());
  const std::string saved = momentum->SaveState();
  std::vector<float> g = RandomVector(kDim, &rng);
  g[3] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(momentum->Step(g, absl::MakeSpan(u)).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<float> short_g(kDim - 1, 1.0f);
  EXPECT_EQ(momentum->Step(short_g, absl::MakeSpan(u)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(momentum->SaveState(), saved);

  GgtOptions options;
  options.dim = kDim;
  options.window = kWindow;
  for (double beta1 : {-0.1, 1.0, std::nan("")}) {
    EXPECT_EQ(
        GradientMomentum::Create(*Ggt::Create(options), beta1).status().code(),
        absl::StatusCode::kInvalidArgument);
  }
  EXPECT_FALSE(GradientMomentum::Create(nullptr, 0.5).ok());
}

}  // namespace
}  // namespace efcp
}  // namespace terse
