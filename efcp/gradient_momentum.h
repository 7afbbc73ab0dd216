// GradientMomentum: a Preconditioner decorator that preconditions an
// exponential moving average of the gradients instead of the gradient itself
// (GGT's beta1, Agarwal et al. 2019):
//
//   Step(g):  v <- beta1 * v + (1 - beta1) * g     (v starts at zero)
//             inner.Step(g, scratch)               (g enters the history)
//             update <- inner.Apply(v)
//
// so the history holds the raw gradients and only the direction uses v.
// Apply is the inner Apply. This costs one more pass over the inner window
// per step than the inner Step alone.
//
// Ownership: owns the inner preconditioner. Errors: a gradient with NaN/Inf,
// the wrong length, or one that would make v overflow is InvalidArgument and
// changes nothing. Not thread-safe (see preconditioner.h).
#ifndef TERSE_EFCP_GRADIENT_MOMENTUM_H_
#define TERSE_EFCP_GRADIENT_MOMENTUM_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "efcp/preconditioner.h"

namespace terse {
namespace efcp {

class GradientMomentum final : public Preconditioner {
 public:
  // InvalidArgument for a null inner preconditioner or beta1 outside [0, 1).
  static absl::StatusOr<std::unique_ptr<GradientMomentum>> Create(
      std::unique_ptr<Preconditioner> inner, double beta1);

  int64_t dim() const override { return inner_->dim(); }
  absl::Status Step(absl::Span<const float> grad,
                    absl::Span<float> update) override;
  absl::Status Apply(absl::Span<const float> x,
                     absl::Span<float> out) const override;
  int64_t steps() const override { return inner_->steps(); }
  // The inner usage plus v (as scratch).
  MemoryUsage memory() const override;
  // Blob "gradient_momentum": dim, v, and the inner blob.
  std::string SaveState() const override;
  absl::Status RestoreState(absl::string_view blob) override;
  // The inner name ("ggt", "sparse_ggt", ...).
  absl::string_view name() const override { return inner_->name(); }

  const Preconditioner& inner() const { return *inner_; }
  const std::vector<float>& average() const { return average_; }

 private:
  GradientMomentum(std::unique_ptr<Preconditioner> inner, double beta1);

  std::unique_ptr<Preconditioner> inner_;
  double beta1_;
  std::vector<float> average_;  // v
  std::vector<float> next_;     // scratch: the candidate v
};

}  // namespace efcp
}  // namespace terse

#endif  // TERSE_EFCP_GRADIENT_MOMENTUM_H_
