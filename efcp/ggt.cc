#include "efcp/ggt.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <utility>
#include <vector>

#include "Eigen/Eigenvalues"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "compressors/kernels/sparse_ops.h"
#include "efcp/validate.h"
#include "efcp/window_apply.h"
#include "efcp/window_state.h"

namespace terse {
namespace efcp {
namespace {

absl::Status CheckBeta2(double beta2) {
  if (!(beta2 >= 0.0 && beta2 <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("efcp: beta2 = ", beta2, " (accepted: [0, 1])"));
  }
  return absl::OkStatus();
}

// The slot the last of `steps` steps wrote (0 before the first).
int64_t NewestSlot(int64_t steps, int64_t window) {
  return steps > 0 ? (steps - 1) % window : 0;
}

}  // namespace

GgtSystem::GgtSystem(int64_t r, double epsilon, double beta2)
    : r_(r),
      epsilon_(epsilon),
      beta2_(beta2),
      scale_(Eigen::VectorXd::Ones(r)),
      gram_(Eigen::MatrixXd::Zero(r, r)),
      vectors_(Eigen::MatrixXd::Identity(r, r)),
      sigma_(Eigen::VectorXd::Zero(r)) {}

void GgtSystem::Decompose() {
  if (beta2_ == 1.0) {
    scale_.setOnes();
  } else {
    for (int64_t i = 0; i < r_; ++i) {
      const int64_t age = (newest_ - i + r_) % r_;
      scale_[i] = std::pow(beta2_, static_cast<double>(age));
    }
  }
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(
      beta2_ == 1.0
          ? gram_
          : Eigen::MatrixXd(scale_.asDiagonal() * gram_ * scale_.asDiagonal()));
  vectors_ = eig.eigenvectors();
  const Eigen::VectorXd& lambda = eig.eigenvalues();
  const double cutoff = std::max(lambda.maxCoeff(), 0.0) *
                        static_cast<double>(std::max<int64_t>(r_, 1)) * 16.0 *
                        DBL_EPSILON;
  for (int64_t j = 0; j < r_; ++j) {
    sigma_[j] = lambda[j] > cutoff ? std::sqrt(lambda[j]) : 0.0;
  }
}

void GgtSystem::ReplaceRow(int64_t slot, const double* dots) {
  for (int64_t i = 0; i < r_; ++i) {
    gram_(i, slot) = dots[i];
    gram_(slot, i) = dots[i];
  }
  newest_ = slot;
  Decompose();
}

void GgtSystem::Apply(const GradientWindow& window, const double* dots,
                      float* x) const {
  // u = x/eps + G^T V diag(f) V^T p, f = (1/(s+eps) - 1/eps) / s^2
  //   = -1 / (eps s (s + eps)); computed as (x + G^T (eps * coeffs)) / eps.
  // G is the weighted D G_raw: p = D (G_raw x), and G^T c = G_raw^T (D c).
  Eigen::Map<const Eigen::VectorXd> dots_raw(dots, r_);
  const Eigen::VectorXd p = scale_.cwiseProduct(dots_raw);
  Eigen::VectorXd projected = vectors_.transpose() * p;
  for (int64_t j = 0; j < r_; ++j) {
    const double s = sigma_[j];
    projected[j] = s > 0 ? -projected[j] / (s * (s + epsilon_)) : 0.0;
  }
  const Eigen::VectorXd coeffs = scale_.cwiseProduct(vectors_ * projected);
  window.AddLinearCombination(coeffs.data(), x);
  const float inv_eps = static_cast<float>(1.0 / epsilon_);
  for (int64_t j = 0; j < window.dim(); ++j) x[j] *= inv_eps;
}

void GgtSystem::ApplyToRow(const GradientWindow& window, int64_t slot,
                           float* out) const {
  // With x = G^T e_slot: U^T x = S V^T e_slot and x - U U^T x = 0, so
  // u = G^T V diag(1/(s+eps)) V^T e_slot. The raw row is G^T e_slot / D_slot
  // (D_slot = 1 for the newest row), and G^T c = G_raw^T (D c).
  Eigen::VectorXd weights(r_);
  for (int64_t j = 0; j < r_; ++j) {
    const double s = sigma_[j];
    weights[j] = s > 0 ? vectors_(slot, j) / (s + epsilon_) : 0.0;
  }
  const Eigen::VectorXd coeffs =
      scale_.cwiseProduct(vectors_ * weights) / scale_[slot];
  std::fill(out, out + window.dim(), 0.0f);
  window.AddLinearCombination(coeffs.data(), out);
}

absl::Status GgtSystem::SetGram(const Eigen::MatrixXd& gram,
                                int64_t newest_slot) {
  if (gram.rows() != r_ || gram.cols() != r_) {
    return absl::InvalidArgumentError("efcp: Gram matrix has the wrong shape");
  }
  if (newest_slot < 0 || newest_slot >= r_) {
    return absl::InvalidArgumentError("efcp: newest slot out of range");
  }
  if (!gram.allFinite()) {
    return absl::InvalidArgumentError("efcp: Gram matrix is not finite");
  }
  if (gram != gram.transpose()) {
    return absl::InvalidArgumentError("efcp: Gram matrix is not symmetric");
  }
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(gram,
                                                     Eigen::EigenvaluesOnly);
  const double top = std::max(eig.eigenvalues().maxCoeff(), 0.0);
  if (eig.eigenvalues().minCoeff() < -1e-10 * top) {
    return absl::InvalidArgumentError(
        "efcp: Gram matrix is not positive semi-definite");
  }
  gram_ = gram;
  newest_ = newest_slot;
  Decompose();
  return absl::OkStatus();
}

int64_t GgtSystem::memory_bytes() const {
  return static_cast<int64_t>(sizeof(double)) * (2 * r_ * r_ + 2 * r_);
}

// ---------------------------------------------------------------- Ggt

absl::StatusOr<std::unique_ptr<Ggt>> Ggt::Create(const GgtOptions& options) {
  TERSE_RETURN_IF_ERROR(CheckShape(options.dim, options.window));
  TERSE_RETURN_IF_ERROR(CheckDenseWindowSize(options.dim, options.window));
  TERSE_RETURN_IF_ERROR(CheckPositive(options.epsilon, "epsilon"));
  TERSE_RETURN_IF_ERROR(CheckBeta2(options.beta2));
  return std::unique_ptr<Ggt>(new Ggt(options));
}

Ggt::Ggt(const GgtOptions& options)
    : options_(options),
      history_(options.dim, options.window, options.num_threads),
      system_(options.window, options.epsilon, options.beta2) {}

absl::Status Ggt::Step(absl::Span<const float> grad, absl::Span<float> update) {
  TERSE_RETURN_IF_ERROR(history_.CheckStep(grad, update));
  std::vector<double> dots(options_.window);
  const int64_t slot = history_.Push(grad.data(), dots.data());
  system_.ReplaceRow(slot, dots.data());
  system_.ApplyToRow(history_.window(), slot, update.data());
  return absl::OkStatus();
}

absl::Status Ggt::Apply(absl::Span<const float> x,
                        absl::Span<float> out) const {
  return ApplyOverWindow(history_.window(), x, out,
                         [this](const double* dots, float* y) {
                           system_.Apply(history_.window(), dots, y);
                         });
}

MemoryUsage Ggt::memory() const {
  return history_.Memory(system_.memory_bytes());
}

std::string Ggt::SaveState() const {
  return history_.Save(name(), system_.gram());
}

absl::Status Ggt::RestoreState(absl::string_view blob) {
  TERSE_ASSIGN_OR_RETURN(DenseHistoryState state, history_.Parse(blob, name()));
  TERSE_RETURN_IF_ERROR(
      system_.SetGram(state.gram, NewestSlot(state.steps, options_.window)));
  history_.Commit(state);  // Cannot fail.
  return absl::OkStatus();
}

// ---------------------------------------------------------------- SparseGgt

absl::StatusOr<std::unique_ptr<SparseGgt>> SparseGgt::Create(
    const SparseGgtOptions& options) {
  TERSE_RETURN_IF_ERROR(CheckShape(options.dim, options.window));
  TERSE_RETURN_IF_ERROR(CheckPositive(options.epsilon, "epsilon"));
  TERSE_RETURN_IF_ERROR(CheckBeta2(options.beta2));
  TERSE_RETURN_IF_ERROR(CheckDensity(options.density));
  if (options.storage != WindowStorage::kIndex32Fp32 &&
      options.storage != WindowStorage::kBlock16Bf16) {
    return absl::InvalidArgumentError("efcp: unknown window storage");
  }
  return std::unique_ptr<SparseGgt>(new SparseGgt(options));
}

SparseGgt::SparseGgt(const SparseGgtOptions& options)
    : options_(options),
      history_(options.dim, options.window, options.density, options.storage,
               options.num_threads),
      system_(options.window, options.epsilon, options.beta2) {}

absl::Status SparseGgt::Step(absl::Span<const float> grad,
                             absl::Span<float> update) {
  TERSE_RETURN_IF_ERROR(history_.CheckStep(grad, update));
  std::vector<double> dots(options_.window);
  const int64_t slot = history_.Push(grad.data(), update.data(), dots.data());
  system_.ReplaceRow(slot, dots.data());
  system_.ApplyToRow(history_.window(), slot, update.data());
  return absl::OkStatus();
}

absl::Status SparseGgt::Apply(absl::Span<const float> x,
                              absl::Span<float> out) const {
  return ApplyOverWindow(history_.window(), x, out,
                         [this](const double* dots, float* y) {
                           system_.Apply(history_.window(), dots, y);
                         });
}

MemoryUsage SparseGgt::memory() const {
  return history_.Memory(system_.memory_bytes());
}

std::string SparseGgt::SaveState() const {
  return history_.Save(name(), system_.gram());
}

absl::Status SparseGgt::RestoreState(absl::string_view blob) {
  TERSE_ASSIGN_OR_RETURN(SparseHistoryState state,
                         history_.Parse(blob, name()));
  TERSE_RETURN_IF_ERROR(
      system_.SetGram(state.gram, NewestSlot(state.steps, options_.window)));
  history_.Commit(std::move(state));  // Cannot fail.
  return absl::OkStatus();
}

}  // namespace efcp
}  // namespace terse
