// SparseHistory: what the sparse preconditioners (SparseMfac, SparseGgt)
// keep besides their small system, and the half of a step they share:
//   a = e + g;  c = top-k(a) trimmed to what the window holds
//   (error_feedback.h, SparseWindow::Fit);  e = a - c;  store c in ring slot t
//   mod m; dots[i] = <row i, c> (c scattered densely into a caller buffer, then
//   SparseDenseDots of the m rows against it).
// The owner then updates its m x m system with the dots and applies it.
// Also the memory report and the state blob of window + error + steps
// (window_state.h). Not thread-safe for writes.
#ifndef TERSE_EFCP_SPARSE_HISTORY_H_
#define TERSE_EFCP_SPARSE_HISTORY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "Eigen/Core"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "efcp/error_feedback.h"
#include "efcp/preconditioner.h"
#include "efcp/sparse_window.h"
#include "efcp/window_state.h"

namespace terse {
namespace efcp {

class SparseHistory {
 public:
  // dim in [1, 2^32), window >= 1, 0 < density <= 1 (checked by the owners'
  // Create).
  SparseHistory(int64_t dim, int64_t window, double density,
                WindowStorage storage, int num_threads);

  int64_t dim() const { return window_.dim(); }
  int64_t rows() const { return window_.rows(); }
  int64_t k() const { return feedback_.k(); }
  int64_t steps() const { return steps_; }
  const SparseWindow& window() const { return window_; }
  const std::vector<float>& error() const { return feedback_.error(); }

  // InvalidArgument unless grad and update have dim() entries and e + grad
  // is finite.
  absl::Status CheckStep(absl::Span<const float> grad,
                         absl::Span<const float> update) const;
  // The shared half of a step on a checked gradient (see above): returns
  // the slot written, fills dots (rows() entries) and leaves the dense c in
  // `dense_c` (dim() floats, overwritten). Counts the step.
  int64_t Push(const float* grad, float* dense_c, double* dots);

  // window + error buffer + the row scratch, with the owner's `small` bytes.
  MemoryUsage Memory(int64_t small_bytes) const;

  std::string Save(absl::string_view kind, const Eigen::MatrixXd& gram) const;
  // Validates a blob against this history's shape; changes nothing.
  absl::StatusOr<SparseHistoryState> Parse(absl::string_view blob,
                                           absl::string_view kind) const;
  // Takes the rows, error buffer and step count of a parsed state (the
  // owner has accepted its Gram matrix). Cannot fail.
  void Commit(SparseHistoryState state);
  // Replaces the rows only (ImportWindow); the step count becomes
  // rows.size(), the error buffer is kept.
  void CommitRows(const std::vector<SparseVector>& rows);

 private:
  ErrorFeedbackTopK feedback_;
  SparseWindow window_;
  std::vector<uint32_t> indices_;  // scratch, k entries
  std::vector<float> values_;      // scratch, k entries
  int64_t steps_ = 0;
};

}  // namespace efcp
}  // namespace terse

#endif  // TERSE_EFCP_SPARSE_HISTORY_H_
