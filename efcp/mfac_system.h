// The small m x m system of M-FAC: K = m*lambda*I + G G^T, kept factorised.
//
// M-FAC applies F^-1 with F = lambda*I + (1/m) G^T G (G the m x d window,
// unwritten rows zero) through the Woodbury identity
//   F^-1 x = (x - G^T K^-1 G x) / lambda.
// MfacSystem holds the Gram matrix G G^T exactly (every entry is a dot
// product of stored rows, computed by the caller in double) and the Cholesky
// factor L L^T = K. Replacing one row of G changes one row and column of K, a
// symmetric rank-2 change, applied to L as one rank-1 update and one rank-1
// downdate (O(m^2) each). Every `refresh_interval` replacements, or when a
// downdate breaks down numerically, L is recomputed from the Gram matrix
// (O(m^3), so O(m^2) amortised), which bounds the drift of the updates.
// All in double. Not thread-safe.
#ifndef TERSE_EFCP_MFAC_SYSTEM_H_
#define TERSE_EFCP_MFAC_SYSTEM_H_

#include <cstdint>

#include "Eigen/Cholesky"
#include "Eigen/Core"
#include "absl/status/status.h"
#include "efcp/gradient_window.h"

namespace terse {
namespace efcp {

class MfacSystem {
 public:
  // m >= 1, lambda > 0 and finite (checked by the owners' Create).
  // refresh_interval 0 means never refactorise on a schedule.
  MfacSystem(int64_t m, double lambda, int64_t refresh_interval);

  int64_t m() const { return m_; }
  double lambda() const { return lambda_; }

  // Row `slot` of G now holds a new vector r: dots[i] = <r, row i> for every
  // i (dots[slot] = |r|^2). Updates the Gram matrix and the factor.
  void ReplaceRow(int64_t slot, const double* dots);

  // out = K^-1 b (m entries each; may alias).
  void Solve(const double* b, double* out) const;

  // The row coefficients behind the two applications below (m entries):
  // coeffs = -K^-1 dots (then F^-1 x = (x + G^T coeffs) / lambda), and
  // coeffs = m K^-1 e_slot (then F^-1 row_slot = G^T coeffs).
  void InverseCoefficients(const double* dots, double* coeffs) const;
  void RowInverseCoefficients(int64_t slot, double* coeffs) const;

  // x <- F^-1 x = (x - G^T K^-1 dots) / lambda, where dots = G x was computed
  // by the caller (window.Dots(x, dots)). `x` has window.dim() entries.
  void ApplyInverse(const GradientWindow& window, const double* dots,
                    float* x) const;

  // out <- F^-1 r for r = row `slot` of the window, as m * G^T K^-1 e_slot
  // (since F G^T = G^T K / m). Exact algebra, but unlike ApplyInverse it
  // has no (r - G^T K^-1 G r) cancellation, so float rounding is not
  // amplified by |G|^2 / (m lambda). Overwrites all of `out`.
  void ApplyInverseToRow(const GradientWindow& window, int64_t slot,
                         float* out) const;

  // Recomputes the factor from the Gram matrix (O(m^3)).
  void Refactorize();

  // Replaces the Gram matrix (e.g. from a saved state) and refactorises.
  // InvalidArgument, with the old state kept, when it is not symmetric,
  // has a non-finite entry, or K is not positive definite.
  absl::Status SetGram(const Eigen::MatrixXd& gram);
  const Eigen::MatrixXd& gram() const { return gram_; }

  // Replacements since the last full factorisation; full factorisations so
  // far (including the initial one).
  int64_t updates_since_refactor() const { return updates_since_refactor_; }
  int64_t refactor_count() const { return refactor_count_; }

  int64_t memory_bytes() const;

 private:
  int64_t m_;
  double lambda_;
  int64_t refresh_interval_;
  Eigen::MatrixXd gram_;             // G G^T, exact.
  Eigen::LLT<Eigen::MatrixXd> llt_;  // of m*lambda*I + gram_.
  Eigen::VectorXd delta_;            // scratch for ReplaceRow
  int64_t updates_since_refactor_ = 0;
  int64_t refactor_count_ = 0;
};

}  // namespace efcp
}  // namespace terse

#endif  // TERSE_EFCP_MFAC_SYSTEM_H_
