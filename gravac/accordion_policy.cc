#include "gravac/accordion_policy.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace terse {
namespace gravac {

AccordionPolicy::AccordionPolicy(const AccordionOptions& options)
    : options_(options) {}

Decision AccordionPolicy::Decide() {
  Decision d;
  d.compressor = options_.compressor;
  if (switches_rank()) {
    d.level = critical_ ? options_.high_rank : options_.low_rank;
    d.send_cf = 1;
  } else {
    d.send_cf = critical_ ? options_.low_cf : options_.high_cf;
    if (d.send_cf <= 1) d.compressor = "none";
  }
  d.reset_accumulator = (step_ + 1) % options_.switch_steps == 0;
  return d;
}

void AccordionPolicy::Observe(const Decision& taken, const StepStats& stats) {
  (void)taken;
  ++step_;
  if (step_ % options_.switch_steps != 0) return;
  const double norm = std::sqrt(stats.accumulated_norm2);
  if (has_previous_ && previous_norm_ > 0) {
    double change = std::fabs(previous_norm_ - norm) / previous_norm_;
    critical_ = change >= options_.threshold;
    TERSE_LOG(Debug) << "accordion: step " << step_ << " norm change " << change
                     << (critical_ ? " critical" : " not critical");
  }
  previous_norm_ = norm;
  has_previous_ = true;
}

void AccordionPolicy::OnLearningRateDrop() { critical_ = true; }

std::string AccordionPolicy::Describe() const {
  if (switches_rank()) {
    return absl::StrCat("accordion powersgd rank=",
                        critical_ ? options_.high_rank : options_.low_rank,
                        critical_ ? " critical" : " not critical");
  }
  return absl::StrCat("accordion ", options_.compressor,
                      " cf=", critical_ ? options_.low_cf : options_.high_cf);
}

void AccordionPolicy::SaveState(proto::PolicyState* state) const {
  state->Clear();
  state->set_kind("accordion");
  state->set_step(step_);
  state->set_previous_norm(previous_norm_);
  state->set_has_previous(has_previous_);
  state->set_critical(critical_);
}

absl::Status AccordionPolicy::RestoreState(const proto::PolicyState& state) {
  if (state.kind() != "accordion") {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot restore a '", state.kind(), "' policy state into accordion"));
  }
  if (state.step() < 0) {
    return absl::InvalidArgumentError("accordion policy state is inconsistent");
  }
  step_ = state.step();
  previous_norm_ = state.previous_norm();
  has_previous_ = state.has_previous();
  critical_ = state.critical();
  return absl::OkStatus();
}

}  // namespace gravac
}  // namespace terse
