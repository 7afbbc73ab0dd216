// The optimizer step around a Preconditioner: learning rate, decoupled
// weight decay in two conventions, and heavy-ball / Nesterov momentum on the
// preconditioned direction (as M-FAC and EFCP do), over one flat float
// vector of parameters.
//
// One step with u = preconditioner.Step(g):
//   momentum > 0:  buf = u on the first step, else buf = mu*buf + (1-damp)*u;
//                  u = nesterov ? u + mu*buf : buf            (torch.optim.SGD)
//   kLrScaled:     w <- (1 - lr*wd) * w - lr * u
//   kUnscaled:     w <- (1 - wd) * w - lr * u
//
// PreconditionedOptimizer owns the preconditioner, the momentum buffer and
// an update buffer (d floats each). A bad gradient (NaN/Inf, wrong length)
// is an InvalidArgument Status that changes neither the parameters nor any
// state. Not thread-safe.
#ifndef TERSE_EFCP_OPTIMIZER_STEP_H_
#define TERSE_EFCP_OPTIMIZER_STEP_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "efcp/preconditioner.h"

namespace terse {
namespace efcp {

enum class WeightDecayMode : uint32_t {
  kLrScaled = 0,  // w <- (1 - lr*wd) w   (AdamW / M-FAC convention)
  kUnscaled = 1,  // w <- (1 - wd) w
};

struct OptimizerStepOptions {
  double lr = 1e-3;           // >= 0
  double momentum = 0.0;      // [0, 1)
  double dampening = 0.0;     // [0, 1]
  bool nesterov = false;      // needs momentum > 0 and dampening 0
  double weight_decay = 0.0;  // >= 0, the decay factor must stay in [0, 1]
  WeightDecayMode weight_decay_mode = WeightDecayMode::kLrScaled;
};

// InvalidArgument naming the bad field.
absl::Status ValidateOptimizerStepOptions(const OptimizerStepOptions& options);

// params <- decay * params - lr * direction, decay as the mode says; the
// momentum part is PreconditionedOptimizer's. All arrays have d entries.
void ApplyDecayAndUpdate(const OptimizerStepOptions& options,
                         const float* direction, int64_t d, float* params);

class PreconditionedOptimizer {
 public:
  // InvalidArgument for a null preconditioner or bad options.
  static absl::StatusOr<std::unique_ptr<PreconditionedOptimizer>> Create(
      std::unique_ptr<Preconditioner> preconditioner,
      const OptimizerStepOptions& options);

  // One step: params and grad have preconditioner().dim() entries.
  absl::Status Step(absl::Span<float> params, absl::Span<const float> grad);

  // For learning-rate schedules and param-group edits between steps.
  absl::Status SetOptions(const OptimizerStepOptions& options);
  const OptimizerStepOptions& options() const { return options_; }

  Preconditioner& preconditioner() { return *preconditioner_; }
  const Preconditioner& preconditioner() const { return *preconditioner_; }
  int64_t steps() const { return steps_; }
  // The preconditioner's usage plus the momentum and update buffers (as
  // scratch).
  MemoryUsage memory() const;

  // Blob "optimizer": steps, the momentum buffer if one exists, and the
  // preconditioner's own blob. Hyper-parameters are not included (they come
  // from the options). Restore is all-or-nothing.
  std::string SaveState() const;
  absl::Status RestoreState(absl::string_view blob);

 private:
  PreconditionedOptimizer(std::unique_ptr<Preconditioner> preconditioner,
                          const OptimizerStepOptions& options);

  std::unique_ptr<Preconditioner> preconditioner_;
  OptimizerStepOptions options_;
  std::vector<float> update_;
  std::vector<float> momentum_;  // empty until the first step with momentum
  int64_t steps_ = 0;
};

}  // namespace efcp
}  // namespace terse

#endif  // TERSE_EFCP_OPTIMIZER_STEP_H_
