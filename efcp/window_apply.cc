#include "efcp/window_apply.h"

#include <cstring>
#include <vector>

#include "common/status.h"
#include "efcp/validate.h"

namespace terse {
namespace efcp {

absl::Status ApplyOverWindow(
    const GradientWindow& window, absl::Span<const float> x,
    absl::Span<float> out,
    absl::FunctionRef<void(const double* dots, float* out)> finish) {
  TERSE_RETURN_IF_ERROR(CheckFiniteVector(x, window.dim(), "x"));
  TERSE_RETURN_IF_ERROR(CheckOutputVector(out, window.dim(), "out"));
  std::vector<double> dots(window.rows());
  window.Dots(x.data(), dots.data());
  std::memcpy(out.data(), x.data(), sizeof(float) * window.dim());
  finish(dots.data(), out.data());
  return absl::OkStatus();
}

}  // namespace efcp
}  // namespace terse
