#include "efcp/optimizer_step.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "efcp/state_blob.h"
#include "efcp/validate.h"

namespace terse {
namespace efcp {
namespace {

double DecayFactor(const OptimizerStepOptions& options) {
  return options.weight_decay_mode == WeightDecayMode::kLrScaled
             ? 1.0 - options.lr * options.weight_decay
             : 1.0 - options.weight_decay;
}

absl::Status Bad(absl::string_view field, double value,
                 absl::string_view accepted) {
  return absl::InvalidArgumentError(absl::StrCat(
      "efcp optimizer: ", field, " = ", value, " (accepted: ", accepted, ")"));
}

}  // namespace

absl::Status ValidateOptimizerStepOptions(const OptimizerStepOptions& options) {
  if (!(std::isfinite(options.lr) && options.lr >= 0)) {
    return Bad("lr", options.lr, "finite, >= 0");
  }
  if (!(options.momentum >= 0 && options.momentum < 1)) {
    return Bad("momentum", options.momentum, "[0, 1)");
  }
  if (!(options.dampening >= 0 && options.dampening <= 1)) {
    return Bad("dampening", options.dampening, "[0, 1]");
  }
  if (options.nesterov && (options.momentum <= 0 || options.dampening != 0)) {
    return absl::InvalidArgumentError(
        "efcp optimizer: nesterov needs momentum > 0 and dampening 0");
  }
  if (!(std::isfinite(options.weight_decay) && options.weight_decay >= 0)) {
    return Bad("weight_decay", options.weight_decay, "finite, >= 0");
  }
  if (options.weight_decay_mode != WeightDecayMode::kLrScaled &&
      options.weight_decay_mode != WeightDecayMode::kUnscaled) {
    return absl::InvalidArgumentError(
        "efcp optimizer: unknown weight_decay_mode");
  }
  const double decay = DecayFactor(options);
  if (!(decay >= 0 && decay <= 1)) {
    return Bad("weight decay factor", decay,
               "[0, 1]: lr*weight_decay (kLrScaled) or weight_decay "
               "(kUnscaled) at most 1");
  }
  return absl::OkStatus();
}

void ApplyDecayAndUpdate(const OptimizerStepOptions& options,
                         const float* direction, int64_t d, float* params) {
  const float decay = static_cast<float>(DecayFactor(options));
  const float lr = static_cast<float>(options.lr);
  if (decay == 1.0f) {
    for (int64_t i = 0; i < d; ++i) params[i] -= lr * direction[i];
  } else {
    for (int64_t i = 0; i < d; ++i) {
      params[i] = decay * params[i] - lr * direction[i];
    }
  }
}

absl::StatusOr<std::unique_ptr<PreconditionedOptimizer>>
PreconditionedOptimizer::Create(std::unique_ptr<Preconditioner> preconditioner,
                                const OptimizerStepOptions& options) {
  if (preconditioner == nullptr) {
    return absl::InvalidArgumentError("efcp optimizer: null preconditioner");
  }
  TERSE_RETURN_IF_ERROR(ValidateOptimizerStepOptions(options));
  return std::unique_ptr<PreconditionedOptimizer>(
      new PreconditionedOptimizer(std::move(preconditioner), options));
}

PreconditionedOptimizer::PreconditionedOptimizer(
    std::unique_ptr<Preconditioner> preconditioner,
    const OptimizerStepOptions& options)
    : preconditioner_(std::move(preconditioner)),
      options_(options),
      update_(static_cast<size_t>(preconditioner_->dim())) {}

absl::Status PreconditionedOptimizer::SetOptions(
    const OptimizerStepOptions& options) {
  TERSE_RETURN_IF_ERROR(ValidateOptimizerStepOptions(options));
  options_ = options;
  return absl::OkStatus();
}

absl::Status PreconditionedOptimizer::Step(absl::Span<float> params,
                                           absl::Span<const float> grad) {
  const int64_t d = preconditioner_->dim();
  TERSE_RETURN_IF_ERROR(CheckOutputVector(params, d, "params"));
  // Validates the gradient; on error nothing has changed.
  TERSE_RETURN_IF_ERROR(preconditioner_->Step(grad, absl::MakeSpan(update_)));
  const float* direction = update_.data();
  if (options_.momentum > 0) {
    const float mu = static_cast<float>(options_.momentum);
    if (momentum_.empty()) {
      momentum_ = update_;
    } else {
      const float keep = static_cast<float>(1.0 - options_.dampening);
      for (int64_t i = 0; i < d; ++i) {
        momentum_[i] = mu * momentum_[i] + keep * update_[i];
      }
    }
    if (options_.nesterov) {
      for (int64_t i = 0; i < d; ++i) update_[i] += mu * momentum_[i];
    } else {
      direction = momentum_.data();
    }
  }
  ApplyDecayAndUpdate(options_, direction, d, params.data());
  ++steps_;
  return absl::OkStatus();
}

MemoryUsage PreconditionedOptimizer::memory() const {
  MemoryUsage usage = preconditioner_->memory();
  usage.scratch +=
      static_cast<int64_t>((update_.size() + momentum_.size()) * sizeof(float));
  return usage;
}

std::string PreconditionedOptimizer::SaveState() const {
  BlobWriter writer("optimizer");
  writer.PutI64(preconditioner_->dim());
  writer.PutI64(steps_);
  writer.PutU32(momentum_.empty() ? 0 : 1);
  writer.PutArray(momentum_.data(), static_cast<int64_t>(momentum_.size()));
  writer.PutBytes(preconditioner_->SaveState());
  return writer.Release();
}

absl::Status PreconditionedOptimizer::RestoreState(absl::string_view blob) {
  TERSE_ASSIGN_OR_RETURN(BlobReader reader,
                         BlobReader::Open(blob, "optimizer"));
  const int64_t d = preconditioner_->dim();
  TERSE_ASSIGN_OR_RETURN(int64_t blob_dim, reader.GetI64());
  TERSE_ASSIGN_OR_RETURN(int64_t steps, reader.GetI64());
  TERSE_ASSIGN_OR_RETURN(uint32_t has_momentum, reader.GetU32());
  if (blob_dim != d || steps < 0 || has_momentum > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("efcp optimizer: state for dim ", blob_dim, " (this one ",
                     d, ") or corrupt header"));
  }
  std::vector<float> momentum;
  if (has_momentum == 1) {
    TERSE_ASSIGN_OR_RETURN(const char* bytes, reader.GetArray<float>(d));
    momentum.resize(d);
    BlobReader::CopyArray(bytes, d, momentum.data());
    for (float v : momentum) {
      if (!std::isfinite(v)) {
        return absl::InvalidArgumentError(
            "efcp optimizer: non-finite momentum buffer entry in state");
      }
    }
  }
  TERSE_ASSIGN_OR_RETURN(absl::string_view inner, reader.GetBytes());
  TERSE_RETURN_IF_ERROR(reader.ExpectEnd());
  // Atomic: on error it changes nothing, and nothing below can fail.
  TERSE_RETURN_IF_ERROR(preconditioner_->RestoreState(inner));
  momentum_ = std::move(momentum);
  steps_ = steps;
  return absl::OkStatus();
}

}  // namespace efcp
}  // namespace terse
