#include "efcp/sparse_history.h"

#include <algorithm>
#include <utility>

#include "common/status.h"
#include "compressors/kernels/sparse_ops.h"
#include "efcp/validate.h"

namespace terse {
namespace efcp {

SparseHistory::SparseHistory(int64_t dim, int64_t window, double density,
                             WindowStorage storage, int num_threads)
    : feedback_(dim, ErrorFeedbackTopK::KeptEntries(density, dim),
                storage == WindowStorage::kBlock16Bf16, num_threads),
      window_(window, dim, feedback_.k(), storage, num_threads),
      indices_(feedback_.k()),
      values_(feedback_.k()) {}

absl::Status SparseHistory::CheckStep(absl::Span<const float> grad,
                                      absl::Span<const float> update) const {
  TERSE_RETURN_IF_ERROR(feedback_.Check(grad));
  return CheckOutputVector(update, dim(), "update");
}

int64_t SparseHistory::Push(const float* grad, float* dense_c, double* dots) {
  const int64_t slot = steps_ % rows();
  // The entries the window cannot hold stay in the error buffer.
  const int64_t n = feedback_.Compress(
      grad, indices_.data(), values_.data(),
      [this](uint32_t* indices, float* values, int64_t count) {
        return window_.Fit(indices, values, count);
      });
  window_.SetRow(slot, indices_.data(), values_.data(), n);
  std::fill(dense_c, dense_c + dim(), 0.0f);
  kernels::ScatterAdd(indices_.data(), values_.data(), n, dense_c);
  window_.Dots(dense_c, dots);
  ++steps_;
  return slot;
}

MemoryUsage SparseHistory::Memory(int64_t small_bytes) const {
  MemoryUsage usage;
  usage.window = window_.memory_bytes();
  usage.error = static_cast<int64_t>(error().size() * sizeof(float));
  usage.small = small_bytes;
  usage.scratch = window_.bookkeeping_bytes() +
                  static_cast<int64_t>(indices_.size() * sizeof(uint32_t) +
                                       values_.size() * sizeof(float));
  return usage;
}

std::string SparseHistory::Save(absl::string_view kind,
                                const Eigen::MatrixXd& gram) const {
  return SaveSparseHistory(kind, window_, steps_, error().data(), gram);
}

absl::StatusOr<SparseHistoryState> SparseHistory::Parse(
    absl::string_view blob, absl::string_view kind) const {
  return ParseSparseHistory(blob, kind, window_);
}

void SparseHistory::Commit(SparseHistoryState state) {
  CommitSparseRows(state.rows, &window_);
  *feedback_.mutable_error() = std::move(state.error);
  steps_ = state.steps;
}

void SparseHistory::CommitRows(const std::vector<SparseVector>& rows) {
  CommitSparseRows(rows, &window_);
  steps_ = static_cast<int64_t>(rows.size());
}

}  // namespace efcp
}  // namespace terse
