#include "efcp/dense_mfac.h"

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

std::unique_ptr<DenseMfac> Make(double damp, int64_t refresh = -1) {
  DenseMfacOptions options;
  options.dim = kDim;
  options.window = kWindow;
  options.damp = damp;
  options.refresh_interval = refresh;
  options.num_threads = 2;
  absl::StatusOr<std::unique_ptr<DenseMfac>> mfac = DenseMfac::Create(options);
  EXPECT_TRUE(mfac.ok()) << mfac.status();
  return std::move(*mfac);
}

// Every step, from an empty window through several wrap-arounds, against the
// d x d closed form in fp64 over the last m gradients.
TEST(DenseMfacTest, StepMatchesClosedFormThroughWrapAround) {
  for (double damp : {1e-5, 1e-3, 1e-1, 10.0}) {
    std::mt19937 rng(10);
    auto mfac = Make(damp);
    RingReference ring(kWindow);
    for (int step = 0; step < 3 * kWindow + 3; ++step) {
      const std::vector<float> g = RandomVector(kDim, &rng);
      std::vector<float> u(kDim);
      ASSERT_TRUE(mfac->Step(g, absl::MakeSpan(u)).ok());
      ring.Push(g);
      const std::vector<double> want =
          MfacReference(ring.rows(), kWindow, damp, ToDouble(g));
      EXPECT_LT(RelativeError(u, want), 2e-6)
          << "damp " << damp << " step " << step;
    }
    EXPECT_EQ(mfac->steps(), 3 * kWindow + 3);
  }
}

// Apply(x) for x other than the last gradient, with the window unfilled and
// after wrap-around; Apply changes nothing.
TEST(DenseMfacTest, ApplyToOtherVectors) {
  std::mt19937 rng(11);
  const double damp = 1e-2;
  auto mfac = Make(damp);
  RingReference ring(kWindow);
  std::vector<float> u(kDim);
  for (int step = 0; step < 2 * kWindow + 1; ++step) {
    // Gradients on different scales, as in training.
    const std::vector<float> g = RandomVector(kDim, &rng, 1.0 + step);
    ASSERT_TRUE(mfac->Step(g, absl::MakeSpan(u)).ok());
    ring.Push(g);
    if (step == 2 || step == 2 * kWindow) {
      for (int trial = 0; trial < 3; ++trial) {
        const std::vector<float> x = RandomVector(kDim, &rng, 3.0);
        ASSERT_TRUE(mfac->Apply(x, absl::MakeSpan(u)).ok());
        EXPECT_LT(RelativeError(u, MfacReference(ring.rows(), kWindow, damp,
                                                 ToDouble(x))),
                  2e-6);
      }
    }
  }
  EXPECT_EQ(mfac->steps(), 2 * kWindow + 1);
}

// Without the scheduled refresh the incremental factor drifts; after 2000
// steps it still matches the closed form, and a refresh keeps it there.
TEST(DenseMfacTest, ManyStepsStayAccurate) {
  std::mt19937 rng(12);
  const double damp = 1e-3;
  auto drifting = Make(damp, /*refresh=*/0);
  auto refreshed = Make(damp);
  RingReference ring(kWindow);
  std::vector<float> u(kDim), v(kDim);
  for (int step = 0; step < 2000; ++step) {
    const std::vector<float> g =
        RandomVector(kDim, &rng, std::pow(10.0, step % 4 - 1));
    ASSERT_TRUE(drifting->Step(g, absl::MakeSpan(u)).ok());
    ASSERT_TRUE(refreshed->Step(g, absl::MakeSpan(v)).ok());
    ring.Push(g);
  }
  EXPECT_EQ(drifting->system().refactor_count(), 1);
  EXPECT_GT(refreshed->system().refactor_count(), 2000 / kWindow);
  const std::vector<float> x = RandomVector(kDim, &rng);
  const std::vector<double> want =
      MfacReference(ring.rows(), kWindow, damp, ToDouble(x));
  ASSERT_TRUE(drifting->Apply(x, absl::MakeSpan(u)).ok());
  EXPECT_LT(RelativeError(u, want), 1e-5);
  ASSERT_TRUE(refreshed->Apply(x, absl::MakeSpan(v)).ok());
  EXPECT_LT(RelativeError(v, want), 2e-6);
  drifting->Refactorize();
  ASSERT_TRUE(drifting->Apply(x, absl::MakeSpan(u)).ok());
  EXPECT_LT(RelativeError(u, want), 2e-6);
}

TEST(DenseMfacTest, MemoryReportsWindowAndSmallMatrices) {
  auto mfac = Make(1.0);
  EXPECT_EQ(mfac->memory().window, kWindow * kDim * 4);
  EXPECT_EQ(mfac->memory().small, (2 * kWindow * kWindow + kWindow) * 8);
  EXPECT_EQ(mfac->memory().error, 0);
  EXPECT_EQ(mfac->memory_bytes(), mfac->memory().total());
}

TEST(DenseMfacTest, CreateRejectsBadOptions) {
  DenseMfacOptions options;
  options.dim = 0;
  EXPECT_EQ(DenseMfac::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.dim = 10;
  options.window = 0;
  EXPECT_FALSE(DenseMfac::Create(options).ok());
  options.window = 4;
  for (double damp :
       {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    options.damp = damp;
    EXPECT_FALSE(DenseMfac::Create(options).ok()) << damp;
  }
  options.damp = 1.0;
  options.refresh_interval = -2;
  EXPECT_FALSE(DenseMfac::Create(options).ok());
  options.refresh_interval = 0;
  EXPECT_TRUE(DenseMfac::Create(options).ok());
}

// A bad gradient is an error that changes nothing: the next steps agree with
// a twin that never saw it.
TEST(DenseMfacTest, BadInputLeavesStateUntouched) {
  std::mt19937 rng(13);
  auto mfac = Make(0.1);
  auto twin = Make(0.1);
  std::vector<float> u(kDim), v(kDim);
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> g = RandomVector(kDim, &rng);
    ASSERT_TRUE(mfac->Step(g, absl::MakeSpan(u)).ok());
    ASSERT_TRUE(twin->Step(g, absl::MakeSpan(v)).ok());
  }
  const std::string before = mfac->SaveState();
  for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    std::vector<float> g = RandomVector(kDim, &rng);
    g[17] = bad;
    absl::Status status = mfac->Step(g, absl::MakeSpan(u));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("gradient[17]"), std::string::npos)
        << status;
    EXPECT_FALSE(mfac->Apply(g, absl::MakeSpan(u)).ok());
  }
  std::vector<float> short_grad(kDim - 1, 1.0f), short_out(kDim - 1);
  EXPECT_FALSE(mfac->Step(short_grad, absl::MakeSpan(u)).ok());
  EXPECT_FALSE(
      mfac->Step(RandomVector(kDim, &rng), absl::MakeSpan(short_out)).ok());
  EXPECT_EQ(mfac->SaveState(), before);
  EXPECT_EQ(mfac->steps(), 3);
  for (int step = 0; step < 10; ++step) {
    const std::vector<float> g = RandomVector(kDim, &rng);
    ASSERT_TRUE(mfac->Step(g, absl::MakeSpan(u)).ok());
    ASSERT_TRUE(twin->Step(g, absl::MakeSpan(v)).ok());
    EXPECT_EQ(u, v);
  }
}

TEST(DenseMfacTest, SaveRestoreContinuesIdentically) {
  for (int64_t saved_steps : {int64_t{0}, int64_t{3}, 2 * kWindow + 3}) {
    std::mt19937 rng(14);
    auto a = Make(0.05);
    std::vector<float> u(kDim), v(kDim);
    for (int step = 0; step < saved_steps; ++step) {
      ASSERT_TRUE(a->Step(RandomVector(kDim, &rng), absl::MakeSpan(u)).ok());
    }
    auto b = Make(0.05);
    // b has history of its own that the restore must replace.
    ASSERT_TRUE(b->Step(RandomVector(kDim, &rng), absl::MakeSpan(v)).ok());
    ASSERT_TRUE(b->RestoreState(a->SaveState()).ok());
    EXPECT_EQ(b->steps(), saved_steps);
    for (int step = 0; step < kWindow + 2; ++step) {
      const std::vector<float> g = RandomVector(kDim, &rng);
      ASSERT_TRUE(a->Step(g, absl::MakeSpan(u)).ok());
      ASSERT_TRUE(b->Step(g, absl::MakeSpan(v)).ok());
      for (int64_t j = 0; j < kDim; ++j) {
        EXPECT_NEAR(u[j], v[j], 1e-5 * (1 + std::abs(u[j])));
      }
    }
  }
}

TEST(DenseMfacTest, RestoreRejectsBadBlobsAndKeepsState) {
  std::mt19937 rng(15);
  auto a = Make(0.5);
  std::vector<float> u(kDim);
  for (int step = 0; step < 5; ++step) {
    ASSERT_TRUE(a->Step(RandomVector(kDim, &rng), absl::MakeSpan(u)).ok());
  }
  const std::string good = a->SaveState();
  auto b = Make(0.5);
  ASSERT_TRUE(b->Step(RandomVector(kDim, &rng), absl::MakeSpan(u)).ok());
  const std::string b_before = b->SaveState();

  // Every truncation, a flipped Gram entry, a NaN row entry, trailing bytes.
  for (size_t cut = 0; cut < good.size(); cut += 7) {
    EXPECT_FALSE(b->RestoreState(good.substr(0, cut)).ok()) << cut;
  }
  std::string corrupt = good;
  const size_t gram_start = good.size() - kWindow * kWindow * 8;
  double huge = 1e300;
  std::memcpy(&corrupt[gram_start], &huge, 8);  // Gram(0, 0)
  EXPECT_FALSE(b->RestoreState(corrupt).ok());
  corrupt = good;
  float nan = std::nanf("");
  std::memcpy(&corrupt[gram_start - 4], &nan, 4);  // last stored row entry
  EXPECT_FALSE(b->RestoreState(corrupt).ok());
  EXPECT_FALSE(b->RestoreState(good + "x").ok());

  DenseMfacOptions other;
  other.dim = kDim + 1;
  other.window = kWindow;
  auto wrong_shape = *DenseMfac::Create(other);
  EXPECT_FALSE(wrong_shape->RestoreState(good).ok());
  EXPECT_EQ(b->SaveState(), b_before);
  EXPECT_TRUE(b->RestoreState(good).ok());
}

}  // namespace
}  // namespace efcp
}  // namespace terse
