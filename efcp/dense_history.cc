#include "efcp/dense_history.h"

#include <algorithm>

#include "common/status.h"
#include "efcp/validate.h"

namespace terse {
namespace efcp {

DenseHistory::DenseHistory(int64_t dim, int64_t window, int num_threads)
    : window_(window, dim, num_threads) {}

absl::Status DenseHistory::CheckStep(absl::Span<const float> grad,
                                     absl::Span<const float> update) const {
  TERSE_RETURN_IF_ERROR(CheckFiniteVector(grad, dim(), "gradient"));
  return CheckOutputVector(update, dim(), "update");
}

int64_t DenseHistory::Push(const float* grad, double* dots) {
  const int64_t slot = steps_ % rows();
  window_.SetRow(slot, grad);
  window_.Dots(grad, dots);
  ++steps_;
  return slot;
}

MemoryUsage DenseHistory::Memory(int64_t small_bytes) const {
  MemoryUsage usage;
  usage.window = window_.memory_bytes();
  usage.small = small_bytes;
  return usage;
}

std::string DenseHistory::Save(absl::string_view kind,
                               const Eigen::MatrixXd& gram) const {
  return SaveDenseHistory(kind, dim(), rows(), steps_, window_.row(0), gram);
}

absl::StatusOr<DenseHistoryState> DenseHistory::Parse(
    absl::string_view blob, absl::string_view kind) const {
  return ParseDenseHistory(blob, kind, dim(), rows());
}

void DenseHistory::Commit(const DenseHistoryState& state) {
  CommitDenseRows(state.rows, std::min(state.steps, rows()), &window_);
  steps_ = state.steps;
}

}  // namespace efcp
}  // namespace terse
