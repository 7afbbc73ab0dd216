#include "efcp/dense_mfac.h"

#include <algorithm>
#include <vector>

#include "common/status.h"
#include "efcp/validate.h"
#include "efcp/window_apply.h"
#include "efcp/window_state.h"

namespace terse {
namespace efcp {

absl::StatusOr<std::unique_ptr<DenseMfac>> DenseMfac::Create(
    const DenseMfacOptions& options) {
  TERSE_RETURN_IF_ERROR(CheckShape(options.dim, options.window));
  TERSE_RETURN_IF_ERROR(CheckDenseWindowSize(options.dim, options.window));
  TERSE_RETURN_IF_ERROR(CheckPositive(options.damp, "damp (lambda)"));
  if (options.refresh_interval < -1) {
    return absl::InvalidArgumentError(
        "efcp: refresh_interval must be -1 (= window), 0 (never) or > 0");
  }
  return std::unique_ptr<DenseMfac>(new DenseMfac(options));
}

DenseMfac::DenseMfac(const DenseMfacOptions& options)
    : options_(options),
      history_(options.dim, options.window, options.num_threads),
      system_(options.window, options.damp,
              options.refresh_interval < 0 ? options.window
                                           : options.refresh_interval) {}

absl::Status DenseMfac::Step(absl::Span<const float> grad,
                             absl::Span<float> update) {
  TERSE_RETURN_IF_ERROR(history_.CheckStep(grad, update));
  std::vector<double> dots(options_.window);
  const int64_t slot = history_.Push(grad.data(), dots.data());
  system_.ReplaceRow(slot, dots.data());
  system_.ApplyInverseToRow(history_.window(), slot, update.data());
  return absl::OkStatus();
}

absl::Status DenseMfac::Apply(absl::Span<const float> x,
                              absl::Span<float> out) const {
  return ApplyOverWindow(history_.window(), x, out,
                         [this](const double* dots, float* y) {
                           system_.ApplyInverse(history_.window(), dots, y);
                         });
}

MemoryUsage DenseMfac::memory() const {
  return history_.Memory(system_.memory_bytes());
}

std::string DenseMfac::SaveState() const {
  return history_.Save(name(), system_.gram());
}

absl::Status DenseMfac::RestoreState(absl::string_view blob) {
  TERSE_ASSIGN_OR_RETURN(DenseHistoryState state, history_.Parse(blob, name()));
  TERSE_RETURN_IF_ERROR(system_.SetGram(state.gram));
  history_.Commit(state);  // Cannot fail.
  return absl::OkStatus();
}

}  // namespace efcp
}  // namespace terse
