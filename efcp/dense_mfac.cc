#include "efcp/dense_mfac.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/status.h"
#include "efcp/validate.h"
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
      window_(options.window, options.dim, options.num_threads),
      system_(options.window, options.damp,
              options.refresh_interval < 0 ? options.window
                                           : options.refresh_interval) {}

absl::Status DenseMfac::Step(absl::Span<const float> grad,
                             absl::Span<float> update) {
  TERSE_RETURN_IF_ERROR(CheckFiniteVector(grad, dim(), "gradient"));
  TERSE_RETURN_IF_ERROR(CheckOutputVector(update, dim(), "update"));
  const int64_t slot = steps_ % options_.window;
  window_.SetRow(slot, grad.data());
  std::vector<double> dots(options_.window);
  window_.Dots(grad.data(), dots.data());
  system_.ReplaceRow(slot, dots.data());
  system_.ApplyInverseToRow(window_, slot, update.data());
  ++steps_;
  return absl::OkStatus();
}

absl::Status DenseMfac::Apply(absl::Span<const float> x,
                              absl::Span<float> out) const {
  TERSE_RETURN_IF_ERROR(CheckFiniteVector(x, dim(), "x"));
  TERSE_RETURN_IF_ERROR(CheckOutputVector(out, dim(), "out"));
  std::vector<double> dots(options_.window);
  window_.Dots(x.data(), dots.data());
  std::memcpy(out.data(), x.data(), sizeof(float) * dim());
  system_.ApplyInverse(window_, dots.data(), out.data());
  return absl::OkStatus();
}

MemoryUsage DenseMfac::memory() const {
  MemoryUsage usage;
  usage.window = window_.memory_bytes();
  usage.small = system_.memory_bytes();
  return usage;
}

std::string DenseMfac::SaveState() const {
  return SaveDenseHistory(name(), dim(), options_.window, steps_,
                          window_.row(0), system_.gram());
}

absl::Status DenseMfac::RestoreState(absl::string_view blob) {
  TERSE_ASSIGN_OR_RETURN(
      DenseHistoryState state,
      ParseDenseHistory(blob, name(), dim(), options_.window));
  TERSE_RETURN_IF_ERROR(system_.SetGram(state.gram));
  // Nothing below can fail.
  CommitDenseRows(state.rows, std::min(state.steps, options_.window), &window_);
  steps_ = state.steps;
  return absl::OkStatus();
}

}  // namespace efcp
}  // namespace terse
