#include "efcp/sparse_mfac.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "compressors/kernels/sparse_ops.h"
#include "efcp/validate.h"
#include "efcp/window_apply.h"
#include "efcp/window_state.h"

namespace terse {
namespace efcp {

absl::StatusOr<std::unique_ptr<SparseMfac>> SparseMfac::Create(
    const SparseMfacOptions& options) {
  TERSE_RETURN_IF_ERROR(CheckShape(options.dim, options.window));
  TERSE_RETURN_IF_ERROR(CheckPositive(options.damp, "damp (lambda)"));
  TERSE_RETURN_IF_ERROR(CheckDensity(options.density));
  if (options.refresh_interval < -1) {
    return absl::InvalidArgumentError(
        "efcp: refresh_interval must be -1 (= window), 0 (never) or > 0");
  }
  if (options.storage != WindowStorage::kIndex32Fp32 &&
      options.storage != WindowStorage::kBlock16Bf16) {
    return absl::InvalidArgumentError("efcp: unknown window storage");
  }
  return std::unique_ptr<SparseMfac>(new SparseMfac(options));
}

SparseMfac::SparseMfac(const SparseMfacOptions& options)
    : options_(options),
      history_(options.dim, options.window, options.density, options.storage,
               options.num_threads),
      system_(options.window, options.damp,
              options.refresh_interval < 0 ? options.window
                                           : options.refresh_interval) {}

absl::Status SparseMfac::Step(absl::Span<const float> grad,
                              absl::Span<float> update) {
  TERSE_RETURN_IF_ERROR(history_.CheckStep(grad, update));
  std::vector<double> dots(options_.window);
  // G c through the dense scatter of c (in the output buffer).
  const int64_t slot = history_.Push(grad.data(), update.data(), dots.data());
  system_.ReplaceRow(slot, dots.data());
  // c is row `slot`: F^-1 c = m G^T K^-1 e_slot (overwrites the scatter).
  system_.ApplyInverseToRow(history_.window(), slot, update.data());
  return absl::OkStatus();
}

absl::Status SparseMfac::Apply(absl::Span<const float> x,
                               absl::Span<float> out) const {
  return ApplyOverWindow(history_.window(), x, out,
                         [this](const double* dots, float* y) {
                           system_.ApplyInverse(history_.window(), dots, y);
                         });
}

MemoryUsage SparseMfac::memory() const {
  return history_.Memory(system_.memory_bytes());
}

absl::Status SparseMfac::CommitWindow(const std::vector<SparseVector>& rows,
                                      const Eigen::MatrixXd& gram) {
  TERSE_RETURN_IF_ERROR(CheckGramMatchesRows(gram, SparseNorms2(rows)));
  TERSE_RETURN_IF_ERROR(system_.SetGram(gram));
  history_.CommitRows(rows);
  return absl::OkStatus();
}

absl::Status SparseMfac::ImportWindow(const std::vector<SparseVector>& rows,
                                      absl::Span<const double> gram) {
  const int64_t m = options_.window;
  const int64_t n = static_cast<int64_t>(rows.size());
  if (n > m) {
    return absl::InvalidArgumentError(
        absl::StrCat("efcp: ", n, " rows do not fit a window of ", m));
  }
  if (static_cast<int64_t>(gram.size()) != n * n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "efcp: Gram matrix has ", gram.size(), " entries, expected ", n * n));
  }
  for (const SparseVector& row : rows) {
    if (row.indices.size() != row.values.size()) {
      return absl::InvalidArgumentError(
          "efcp: sparse row has different numbers of indices and values");
    }
    TERSE_RETURN_IF_ERROR(
        CheckSparseRow(window(), row.indices.data(), row.values.data(),
                       static_cast<int64_t>(row.indices.size())));
  }
  Eigen::MatrixXd full = Eigen::MatrixXd::Zero(m, m);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) full(i, j) = gram[i * n + j];
  }
  return CommitWindow(rows, full);
}

std::string SparseMfac::SaveState() const {
  return history_.Save(name(), system_.gram());
}

absl::Status SparseMfac::RestoreState(absl::string_view blob) {
  TERSE_ASSIGN_OR_RETURN(SparseHistoryState state,
                         history_.Parse(blob, name()));
  TERSE_RETURN_IF_ERROR(system_.SetGram(state.gram));
  history_.Commit(std::move(state));  // Cannot fail.
  return absl::OkStatus();
}

}  // namespace efcp
}  // namespace terse
