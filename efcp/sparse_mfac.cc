#include "efcp/sparse_mfac.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "compressors/kernels/sparse_ops.h"
#include "efcp/validate.h"
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
      feedback_(options.dim,
                ErrorFeedbackTopK::KeptEntries(options.density, options.dim),
                options.storage == WindowStorage::kBlock16Bf16,
                options.num_threads),
      window_(options.window, options.dim, feedback_.k(), options.storage,
              options.num_threads),
      system_(options.window, options.damp,
              options.refresh_interval < 0 ? options.window
                                           : options.refresh_interval),
      indices_(feedback_.k()),
      values_(feedback_.k()) {}

absl::Status SparseMfac::Step(absl::Span<const float> grad,
                              absl::Span<float> update) {
  TERSE_RETURN_IF_ERROR(feedback_.Check(grad));
  TERSE_RETURN_IF_ERROR(CheckOutputVector(update, dim(), "update"));
  const int64_t slot = steps_ % options_.window;
  // The entries the window cannot hold stay in the error buffer.
  const int64_t k = feedback_.Compress(
      grad.data(), indices_.data(), values_.data(),
      [this](uint32_t* indices, float* values, int64_t n) {
        return window_.Fit(indices, values, n);
      });
  window_.SetRow(slot, indices_.data(), values_.data(), k);
  // G c through the dense scatter of c (in the output buffer).
  std::fill(update.begin(), update.end(), 0.0f);
  kernels::ScatterAdd(indices_.data(), values_.data(), k, update.data());
  std::vector<double> dots(options_.window);
  window_.Dots(update.data(), dots.data());
  system_.ReplaceRow(slot, dots.data());
  // c is row `slot`: F^-1 c = m G^T K^-1 e_slot (overwrites the scatter).
  system_.ApplyInverseToRow(window_, slot, update.data());
  ++steps_;
  return absl::OkStatus();
}

absl::Status SparseMfac::Apply(absl::Span<const float> x,
                               absl::Span<float> out) const {
  TERSE_RETURN_IF_ERROR(CheckFiniteVector(x, dim(), "x"));
  TERSE_RETURN_IF_ERROR(CheckOutputVector(out, dim(), "out"));
  std::vector<double> dots(options_.window);
  window_.Dots(x.data(), dots.data());
  std::memcpy(out.data(), x.data(), sizeof(float) * dim());
  system_.ApplyInverse(window_, dots.data(), out.data());
  return absl::OkStatus();
}

MemoryUsage SparseMfac::memory() const {
  MemoryUsage usage;
  usage.window = window_.memory_bytes();
  usage.error = static_cast<int64_t>(error().size() * sizeof(float));
  usage.small = system_.memory_bytes();
  usage.scratch = window_.bookkeeping_bytes() +
                  static_cast<int64_t>(indices_.size() * sizeof(uint32_t) +
                                       values_.size() * sizeof(float));
  return usage;
}

absl::Status SparseMfac::CommitWindow(const std::vector<SparseVector>& rows,
                                      const Eigen::MatrixXd& gram) {
  TERSE_RETURN_IF_ERROR(CheckGramMatchesRows(gram, SparseNorms2(rows)));
  TERSE_RETURN_IF_ERROR(system_.SetGram(gram));
  CommitSparseRows(rows, &window_);
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
        CheckSparseRow(window_, row.indices.data(), row.values.data(),
                       static_cast<int64_t>(row.indices.size())));
  }
  Eigen::MatrixXd full = Eigen::MatrixXd::Zero(m, m);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) full(i, j) = gram[i * n + j];
  }
  TERSE_RETURN_IF_ERROR(CommitWindow(rows, full));
  steps_ = n;
  return absl::OkStatus();
}

std::string SparseMfac::SaveState() const {
  return SaveSparseHistory(name(), window_, steps_, error().data(),
                           system_.gram());
}

absl::Status SparseMfac::RestoreState(absl::string_view blob) {
  TERSE_ASSIGN_OR_RETURN(SparseHistoryState state,
                         ParseSparseHistory(blob, name(), window_));
  TERSE_RETURN_IF_ERROR(system_.SetGram(state.gram));
  // Nothing below can fail.
  CommitSparseRows(state.rows, &window_);
  *feedback_.mutable_error() = std::move(state.error);
  steps_ = state.steps;
  return absl::OkStatus();
}

}  // namespace efcp
}  // namespace terse
