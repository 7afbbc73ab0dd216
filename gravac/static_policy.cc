#include "gravac/static_policy.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace terse {
namespace gravac {

StaticPolicy::StaticPolicy(std::string compressor, double cf)
    : compressor_(std::move(compressor)), cf_(cf) {}

Decision StaticPolicy::Decide() {
  Decision d;
  d.compressor = compressor_;
  d.send_cf = compressor_ == "none" ? 1 : cf_;
  return d;
}

void StaticPolicy::Observe(const Decision& taken, const StepStats& stats) {
  (void)taken;
  (void)stats;
  ++step_;
}

std::string StaticPolicy::Describe() const {
  if (compressor_ == "none") return "none";
  return absl::StrCat(compressor_, " cf=", cf_);
}

void StaticPolicy::SaveState(proto::PolicyState* state) const {
  state->Clear();
  state->set_kind("static");
  state->set_step(step_);
}

absl::Status StaticPolicy::RestoreState(const proto::PolicyState& state) {
  if (state.kind() != "static") {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot restore a '", state.kind(), "' policy state into static"));
  }
  step_ = state.step();
  return absl::OkStatus();
}

}  // namespace gravac
}  // namespace terse
