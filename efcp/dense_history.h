// DenseHistory: what the dense preconditioners (DenseMfac, Ggt) keep besides
// their small system, and the half of a step they share: store g in ring
// slot t mod m and form dots[i] = <row i, g>; the owner then updates its
// m x m system with the dots and applies it. Also the memory report and the
// state blob of window + steps (window_state.h). Not thread-safe for writes.
#ifndef TERSE_EFCP_DENSE_HISTORY_H_
#define TERSE_EFCP_DENSE_HISTORY_H_

#include <cstdint>
#include <string>

#include "Eigen/Core"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "efcp/dense_window.h"
#include "efcp/preconditioner.h"
#include "efcp/window_state.h"

namespace terse {
namespace efcp {

class DenseHistory {
 public:
  // dim, window >= 1 and m * d within CheckDenseWindowSize (checked by the
  // owners' Create).
  DenseHistory(int64_t dim, int64_t window, int num_threads);

  int64_t dim() const { return window_.dim(); }
  int64_t rows() const { return window_.rows(); }
  int64_t steps() const { return steps_; }
  const DenseWindow& window() const { return window_; }

  // InvalidArgument unless grad (finite) and update have dim() entries.
  absl::Status CheckStep(absl::Span<const float> grad,
                         absl::Span<const float> update) const;
  // Stores a checked gradient in slot steps % rows(), fills dots (rows()
  // entries) and returns the slot. Counts the step.
  int64_t Push(const float* grad, double* dots);

  // The window, with the owner's `small` bytes.
  MemoryUsage Memory(int64_t small_bytes) const;

  std::string Save(absl::string_view kind, const Eigen::MatrixXd& gram) const;
  // Validates a blob against this history's shape; changes nothing.
  absl::StatusOr<DenseHistoryState> Parse(absl::string_view blob,
                                          absl::string_view kind) const;
  // Takes the rows and step count of a parsed state (the owner has accepted
  // its Gram matrix). Cannot fail.
  void Commit(const DenseHistoryState& state);

 private:
  DenseWindow window_;
  int64_t steps_ = 0;
};

}  // namespace efcp
}  // namespace terse

#endif  // TERSE_EFCP_DENSE_HISTORY_H_
