// The shape every full-matrix preconditioner's Apply shares: check x and
// out, form the m dots G x, copy x into out, and let the small system turn
// (dots, out) into the preconditioned vector in place.
#ifndef TERSE_EFCP_WINDOW_APPLY_H_
#define TERSE_EFCP_WINDOW_APPLY_H_

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "efcp/gradient_window.h"

namespace terse {
namespace efcp {

// InvalidArgument (nothing written) unless x is finite and x and out have
// window.dim() entries; otherwise calls finish(dots, out) with dots = G x
// (window.rows() entries) and out = x.
absl::Status ApplyOverWindow(
    const GradientWindow& window, absl::Span<const float> x,
    absl::Span<float> out,
    absl::FunctionRef<void(const double* dots, float* out)> finish);

}  // namespace efcp
}  // namespace terse

#endif  // TERSE_EFCP_WINDOW_APPLY_H_
