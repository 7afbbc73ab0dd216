#include "efcp/oracle_testutil.h"

#include <algorithm>
#include <cmath>

#include "Eigen/Cholesky"
#include "Eigen/Core"
#include "Eigen/Eigenvalues"

namespace terse {
namespace efcp {
namespace {

Eigen::MatrixXd OuterSum(const DoubleRows& rows, int64_t d) {
  Eigen::MatrixXd sum = Eigen::MatrixXd::Zero(d, d);
  for (const std::vector<double>& r : rows) {
    Eigen::Map<const Eigen::VectorXd> v(r.data(), d);
    sum.noalias() += v * v.transpose();
  }
  return sum;
}

}  // namespace

void RingReference::Push(const std::vector<double>& row) {
  rows_.push_back(row);
  if (static_cast<int64_t>(rows_.size()) > capacity_) rows_.pop_front();
}

void RingReference::Push(const std::vector<float>& row) { Push(ToDouble(row)); }

std::vector<double> MfacReference(const DoubleRows& rows, int64_t m,
                                  double lambda, const std::vector<double>& x) {
  const int64_t d = static_cast<int64_t>(x.size());
  Eigen::MatrixXd f = OuterSum(rows, d) / static_cast<double>(m);
  f.diagonal().array() += lambda;
  Eigen::VectorXd u =
      f.llt().solve(Eigen::Map<const Eigen::VectorXd>(x.data(), d));
  return {u.data(), u.data() + d};
}

std::vector<double> GgtReference(const DoubleRows& rows, double eps,
                                 const std::vector<double>& g) {
  const int64_t d = static_cast<int64_t>(g.size());
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(OuterSum(rows, d));
  // Eigenvalues below 1e-12 of the largest are rounding noise of zero (the
  // rank is at most the number of rows).
  Eigen::VectorXd mu = eig.eigenvalues();
  const double cutoff = 1e-12 * std::max(mu.maxCoeff(), 0.0);
  for (int64_t i = 0; i < d; ++i) mu[i] = mu[i] > cutoff ? mu[i] : 0.0;
  const Eigen::MatrixXd& q = eig.eigenvectors();
  Eigen::VectorXd proj =
      q.transpose() * Eigen::Map<const Eigen::VectorXd>(g.data(), d);
  for (int64_t i = 0; i < d; ++i) proj[i] /= std::sqrt(mu[i]) + eps;
  Eigen::VectorXd u = q * proj;
  return {u.data(), u.data() + d};
}

double RelativeError(const std::vector<float>& got,
                     const std::vector<double>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(diff / norm);
}

std::vector<float> RandomVector(int64_t d, std::mt19937* rng, double scale) {
  std::normal_distribution<float> normal(0.0f, static_cast<float>(scale));
  std::vector<float> v(d);
  for (float& x : v) x = normal(*rng);
  return v;
}

std::vector<double> ToDouble(const std::vector<float>& v) {
  return {v.begin(), v.end()};
}

}  // namespace efcp
}  // namespace terse
