#include "efcp/mfac_system.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace terse {
namespace efcp {
namespace {

// A random m x d window kept in double, so the Gram matrix is exact.
class Rows {
 public:
  Rows(int64_t m, int64_t d, std::mt19937* rng) : rows_(m, d), rng_(rng) {
    rows_.setZero();
  }
  // Puts a fresh random row in `slot` and returns its dots with every row.
  std::vector<double> Replace(int64_t slot, double scale) {
    std::normal_distribution<double> normal(0.0, scale);
    for (int64_t j = 0; j < rows_.cols(); ++j) rows_(slot, j) = normal(*rng_);
    Eigen::VectorXd dots = rows_ * rows_.row(slot).transpose();
    return {dots.data(), dots.data() + dots.size()};
  }
  Eigen::MatrixXd gram() const { return rows_ * rows_.transpose(); }

 private:
  Eigen::MatrixXd rows_;
  std::mt19937* rng_;
};

// Relative error of the system's solve against a fresh fp64 factorisation of
// m*lambda*I + G G^T for a fixed right-hand side.
double SolveError(const MfacSystem& system, const Eigen::MatrixXd& gram) {
  const int64_t m = system.m();
  Eigen::MatrixXd k = gram;
  k.diagonal().array() += m * system.lambda();
  Eigen::VectorXd b = Eigen::VectorXd::LinSpaced(m, -1.0, 2.0);
  Eigen::VectorXd want = k.llt().solve(b);
  Eigen::VectorXd got(m);
  system.Solve(b.data(), got.data());
  return (got - want).norm() / want.norm();
}

TEST(MfacSystemTest, GramTracksReplacedRows) {
  std::mt19937 rng(1);
  const int64_t m = 6, d = 20;
  Rows rows(m, d, &rng);
  MfacSystem system(m, 0.1, m);
  for (int step = 0; step < 20; ++step) {
    std::vector<double> dots = rows.Replace(step % m, 1.0);
    system.ReplaceRow(step % m, dots.data());
    EXPECT_LT((system.gram() - rows.gram()).norm(), 1e-12 * rows.gram().norm());
    EXPECT_LT(SolveError(system, rows.gram()), 1e-12) << "step " << step;
  }
}

TEST(MfacSystemTest, ScheduledRefreshEveryInterval) {
  std::mt19937 rng(2);
  const int64_t m = 4;
  Rows rows(m, 10, &rng);
  MfacSystem system(m, 1.0, 3);
  EXPECT_EQ(system.refactor_count(), 1);  // the initial factorisation
  for (int step = 0; step < 9; ++step) {
    std::vector<double> dots = rows.Replace(step % m, 1.0);
    system.ReplaceRow(step % m, dots.data());
  }
  EXPECT_EQ(system.refactor_count(), 4);
  EXPECT_EQ(system.updates_since_refactor(), 0);
}

// Runs `steps` replacements of random rows whose scale cycles through
// 10^-spread .. 10^spread (spread 0: all rows alike); returns the worst solve
// error seen, sampled every 13 steps and at the end.
double RunReplacements(MfacSystem* system, Rows* rows, int steps, int spread) {
  const int64_t m = system->m();
  double worst = 0;
  for (int step = 0; step < steps; ++step) {
    const double scale = std::pow(10.0, step % (2 * spread + 1) - spread);
    std::vector<double> dots = rows->Replace(step % m, scale);
    system->ReplaceRow(step % m, dots.data());
    if (step % 13 == 0 || step == steps - 1) {
      worst = std::max(worst, SolveError(*system, rows->gram()));
    }
  }
  return worst;
}

// Rows of one scale: thousands of rank-2 updates without a refresh keep fp64
// accuracy.
TEST(MfacSystemTest, WellConditionedUpdatesDoNotDrift) {
  std::mt19937 rng(3);
  Rows rows(8, 50, &rng);
  MfacSystem system(8, 1e-3, /*refresh_interval=*/0);
  EXPECT_LT(RunReplacements(&system, &rows, 5000, 0), 1e-11);
  EXPECT_EQ(system.refactor_count(), 1) << "no downdate should break down";
}

// Rows whose scale jumps by 10^4 (K conditioned ~1e7): each downdate of a
// large row loses digits, so without a refresh the factor drifts (bounded,
// in practice ~1e-5 after thousands of steps); the scheduled refresh every
// m steps keeps the error near that of a fresh factorisation, and a
// refactorisation restores it.
TEST(MfacSystemTest, DriftIsBoundedAndRefreshRestoresIt) {
  const int64_t m = 8, d = 50;
  std::mt19937 rng(3);
  Rows rows(m, d, &rng);
  MfacSystem drifting(m, 1e-3, /*refresh_interval=*/0);
  const double drift = RunReplacements(&drifting, &rows, 4000, 2);
  EXPECT_LT(drift, 1e-3);
  EXPECT_EQ(drifting.updates_since_refactor(), 4000);
  drifting.Refactorize();
  const double fresh = SolveError(drifting, rows.gram());
  EXPECT_LT(fresh, 1e-8);
  EXPECT_LT(fresh, drift / 100);

  std::mt19937 rng2(3);
  Rows rows2(m, d, &rng2);
  MfacSystem refreshed(m, 1e-3, /*refresh_interval=*/m);
  EXPECT_LT(RunReplacements(&refreshed, &rows2, 4000, 2), 1e-7);
  EXPECT_GE(refreshed.refactor_count(), 4000 / m);
}

TEST(MfacSystemTest, SetGramChecksAndRefactorizes) {
  const int64_t m = 3;
  MfacSystem system(m, 0.5, m);
  Eigen::MatrixXd gram(m, m);
  gram << 4, 1, 0, 1, 3, 2, 0, 2, 5;
  ASSERT_TRUE(system.SetGram(gram).ok());
  EXPECT_LT(SolveError(system, gram), 1e-14);

  Eigen::MatrixXd asymmetric = gram;
  asymmetric(0, 1) = 7;
  EXPECT_EQ(system.SetGram(asymmetric).code(),
            absl::StatusCode::kInvalidArgument);
  Eigen::MatrixXd indefinite = -10 * gram;
  EXPECT_EQ(system.SetGram(indefinite).code(),
            absl::StatusCode::kInvalidArgument);
  Eigen::MatrixXd nan = gram;
  nan(2, 2) = std::nan("");
  EXPECT_EQ(system.SetGram(nan).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(system.SetGram(Eigen::MatrixXd::Zero(2, 2)).code(),
            absl::StatusCode::kInvalidArgument);
  // The failed calls kept the good state.
  EXPECT_EQ(system.gram(), gram);
  EXPECT_LT(SolveError(system, gram), 1e-14);
}

}  // namespace
}  // namespace efcp
}  // namespace terse
