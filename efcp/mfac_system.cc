#include "efcp/mfac_system.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace terse {
namespace efcp {

MfacSystem::MfacSystem(int64_t m, double lambda, int64_t refresh_interval)
    : m_(m),
      lambda_(lambda),
      refresh_interval_(refresh_interval),
      gram_(Eigen::MatrixXd::Zero(m, m)),
      delta_(m) {
  Refactorize();
}

void MfacSystem::Refactorize() {
  Eigen::MatrixXd k = gram_;
  k.diagonal().array() += static_cast<double>(m_) * lambda_;
  llt_.compute(k);
  updates_since_refactor_ = 0;
  ++refactor_count_;
}

void MfacSystem::ReplaceRow(int64_t slot, const double* dots) {
  // delta = new column `slot` of K minus the old one.
  for (int64_t i = 0; i < m_; ++i) delta_[i] = dots[i] - gram_(i, slot);
  for (int64_t i = 0; i < m_; ++i) {
    gram_(i, slot) = dots[i];
    gram_(slot, i) = dots[i];
  }
  ++updates_since_refactor_;
  if (refresh_interval_ > 0 && updates_since_refactor_ >= refresh_interval_) {
    Refactorize();
    return;
  }
  // K' - K = e w^T + w e^T with e = e_slot, w = delta except w[slot] =
  // delta[slot] / 2. With a = s*e, b = w/s (s^2 = |w|, which balances the
  // two vectors): e w^T + w e^T = ((a+b)(a+b)^T - (a-b)(a-b)^T) / 2.
  delta_[slot] *= 0.5;
  const double norm = delta_.norm();
  if (norm == 0.0) return;
  const double s = std::sqrt(norm);
  Eigen::VectorXd plus = delta_ / s;
  Eigen::VectorXd minus = -plus;
  plus[slot] += s;
  minus[slot] += s;
  // Update first so that the intermediate matrix stays positive definite.
  llt_.rankUpdate(plus, 0.5);
  if (llt_.info() == Eigen::Success) llt_.rankUpdate(minus, -0.5);
  if (llt_.info() != Eigen::Success) Refactorize();
}

void MfacSystem::Solve(const double* b, double* out) const {
  Eigen::Map<const Eigen::VectorXd> rhs(b, m_);
  Eigen::VectorXd x = llt_.solve(rhs);
  Eigen::Map<Eigen::VectorXd>(out, m_) = x;
}

void MfacSystem::InverseCoefficients(const double* dots, double* coeffs) const {
  Solve(dots, coeffs);
  for (int64_t i = 0; i < m_; ++i) coeffs[i] = -coeffs[i];
}

void MfacSystem::RowInverseCoefficients(int64_t slot, double* coeffs) const {
  Eigen::VectorXd unit = Eigen::VectorXd::Zero(m_);
  unit[slot] = static_cast<double>(m_);
  Eigen::Map<Eigen::VectorXd>(coeffs, m_) = llt_.solve(unit);
}

void MfacSystem::ApplyInverse(const GradientWindow& window, const double* dots,
                              float* x) const {
  std::vector<double> coeffs(m_);
  InverseCoefficients(dots, coeffs.data());
  window.AddLinearCombination(coeffs.data(), x);
  const float inv_lambda = static_cast<float>(1.0 / lambda_);
  const int64_t d = window.dim();
  for (int64_t j = 0; j < d; ++j) x[j] *= inv_lambda;
}

void MfacSystem::ApplyInverseToRow(const GradientWindow& window, int64_t slot,
                                   float* out) const {
  std::vector<double> coeffs(m_);
  RowInverseCoefficients(slot, coeffs.data());
  std::fill(out, out + window.dim(), 0.0f);
  window.AddLinearCombination(coeffs.data(), out);
}

absl::Status MfacSystem::SetGram(const Eigen::MatrixXd& gram) {
  if (gram.rows() != m_ || gram.cols() != m_) {
    return absl::InvalidArgumentError("efcp: Gram matrix has the wrong shape");
  }
  if (!gram.allFinite()) {
    return absl::InvalidArgumentError("efcp: Gram matrix is not finite");
  }
  if (gram != gram.transpose()) {
    return absl::InvalidArgumentError("efcp: Gram matrix is not symmetric");
  }
  Eigen::MatrixXd k = gram;
  k.diagonal().array() += static_cast<double>(m_) * lambda_;
  Eigen::LLT<Eigen::MatrixXd> llt(k);
  if (llt.info() != Eigen::Success) {
    return absl::InvalidArgumentError(
        "efcp: m*lambda*I + Gram matrix is not positive definite");
  }
  gram_ = gram;
  llt_ = std::move(llt);
  updates_since_refactor_ = 0;
  ++refactor_count_;
  return absl::OkStatus();
}

int64_t MfacSystem::memory_bytes() const {
  // Gram matrix, factor, scratch vector.
  return static_cast<int64_t>(sizeof(double)) * (2 * m_ * m_ + m_);
}

}  // namespace efcp
}  // namespace terse
