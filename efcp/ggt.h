// GGT (Agarwal et al., 2019): full-matrix adaptive preconditioning with a
// window of the last r gradients, on one flat float vector of d parameters.
//
// With G the r x d window (unwritten rows zero) the preconditioner is the
// d x d matrix (eps*I + (G^T G)^{1/2})^-1. It is applied through the r x r
// Gram matrix G G^T = V S^2 V^T (Eigen's self-adjoint eigensolver, O(r^3)
// per step, as in the paper): with U = G^T V S^-1,
//   u = U diag(1/(s + eps)) U^T x + (x - U U^T x) / eps.
// For the newest gradient (a row of G) the second term vanishes and
// u = G^T V diag(1/(s + eps)) V^T e_slot, which Step uses (no float
// cancellation). Eigen-directions with s^2 <= r * 16 * 2^-52 * s_max^2 are
// rounding noise of zero and count as outside the span.
//
// beta2 < 1 (the paper's decay) weights the row written `a` steps ago by
// beta2^a: G becomes D G with D = diag(beta2^age), so the eigendecomposition
// is of D (G G^T) D and the products with G carry D. The raw rows and their
// exact Gram matrix are what is stored; the ages follow from the step count,
// so the state blobs do not change.
//
// Ggt keeps the window dense (r*d*4 bytes). SparseGgt keeps it like
// SparseMfac: error feedback, top-k at a density, SparseWindow storage, and
// preconditions the kept part c (Step returns (eps*I + (G^T G)^{1/2})^-1 c).
// Not thread-safe (see preconditioner.h).
#ifndef TERSE_EFCP_GGT_H_
#define TERSE_EFCP_GGT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "Eigen/Core"
#include "absl/status/statusor.h"
#include "efcp/dense_history.h"
#include "efcp/gradient_window.h"
#include "efcp/preconditioner.h"
#include "efcp/sparse_history.h"
#include "efcp/sparse_window.h"

namespace terse {
namespace efcp {

// The r x r part: the exact Gram matrix and its eigendecomposition.
class GgtSystem {
 public:
  // r >= 1, epsilon > 0 and finite, 0 <= beta2 <= 1 (checked by the
  // owners' Create).
  GgtSystem(int64_t r, double epsilon, double beta2 = 1.0);

  int64_t r() const { return r_; }

  // Row `slot` now holds a new vector: dots[i] = <new row, row i>. Updates
  // the Gram matrix, makes `slot` the newest row (age 0) and recomputes the
  // eigendecomposition.
  void ReplaceRow(int64_t slot, const double* dots);
  // x <- (eps I + (G^T G)^{1/2})^-1 x given dots = G x.
  void Apply(const GradientWindow& window, const double* dots, float* x) const;
  // out <- the same applied to row `slot` of the window (overwrites out).
  void ApplyToRow(const GradientWindow& window, int64_t slot, float* out) const;

  // Replaces the Gram matrix, with `newest_slot` the row of age 0;
  // InvalidArgument (old state kept) unless it is r x r, finite, symmetric
  // and positive semi-definite up to rounding, and 0 <= newest_slot < r.
  absl::Status SetGram(const Eigen::MatrixXd& gram, int64_t newest_slot);
  const Eigen::MatrixXd& gram() const { return gram_; }
  int64_t memory_bytes() const;

 private:
  void Decompose();

  int64_t r_;
  double epsilon_;
  double beta2_;
  int64_t newest_ = 0;       // slot of age 0
  Eigen::VectorXd scale_;    // D: beta2^age per slot
  Eigen::MatrixXd gram_;     // G G^T of the raw rows, exact
  Eigen::MatrixXd vectors_;  // V, of D G G^T D
  Eigen::VectorXd sigma_;    // s (0 for directions outside the span)
};

struct GgtOptions {
  int64_t dim = 0;        // d >= 1, < 2^32
  int64_t window = 100;   // r >= 1
  double epsilon = 1e-4;  // > 0
  double beta2 = 1.0;     // [0, 1]: weight beta2^age of older rows
  int num_threads = 0;    // 0: min(hardware, 8)
};

struct SparseGgtOptions {
  int64_t dim = 0;
  int64_t window = 100;
  double epsilon = 1e-4;
  double beta2 = 1.0;
  double density = 0.01;  // 0 < density <= 1
  WindowStorage storage = WindowStorage::kIndex32Fp32;
  int num_threads = 0;
};

class Ggt final : public Preconditioner {
 public:
  static absl::StatusOr<std::unique_ptr<Ggt>> Create(const GgtOptions& options);

  int64_t dim() const override { return options_.dim; }
  absl::Status Step(absl::Span<const float> grad,
                    absl::Span<float> update) override;
  absl::Status Apply(absl::Span<const float> x,
                     absl::Span<float> out) const override;
  int64_t steps() const override { return history_.steps(); }
  MemoryUsage memory() const override;
  std::string SaveState() const override;
  absl::Status RestoreState(absl::string_view blob) override;
  absl::string_view name() const override { return "ggt"; }

  const DenseWindow& window() const { return history_.window(); }

 private:
  explicit Ggt(const GgtOptions& options);

  GgtOptions options_;
  DenseHistory history_;
  GgtSystem system_;
};

class SparseGgt final : public Preconditioner {
 public:
  static absl::StatusOr<std::unique_ptr<SparseGgt>> Create(
      const SparseGgtOptions& options);

  int64_t dim() const override { return options_.dim; }
  absl::Status Step(absl::Span<const float> grad,
                    absl::Span<float> update) override;
  absl::Status Apply(absl::Span<const float> x,
                     absl::Span<float> out) const override;
  int64_t steps() const override { return history_.steps(); }
  MemoryUsage memory() const override;
  std::string SaveState() const override;
  absl::Status RestoreState(absl::string_view blob) override;
  absl::string_view name() const override { return "sparse_ggt"; }

  int64_t k() const { return history_.k(); }
  const SparseWindow& window() const { return history_.window(); }
  const std::vector<float>& error() const { return history_.error(); }

 private:
  explicit SparseGgt(const SparseGgtOptions& options);

  SparseGgtOptions options_;
  SparseHistory history_;
  GgtSystem system_;
};

}  // namespace efcp
}  // namespace terse

#endif  // TERSE_EFCP_GGT_H_
