#include "engine/momentum_correction.h"

#include "absl/strings/match.h"

namespace terse {

bool MomentumCorrection::Applies(absl::string_view name) {
  // The prefixes terse's gradient wrappers give: torch DistributedOptimizer
  // and tensorflow reduce_gradients ("grad."), DistributedGradientTape
  // ("tape.grad.") and the Keras DistributedOptimizer ("keras.grad.").
  return absl::StartsWith(name, "grad.") ||
         absl::StartsWith(name, "tape.grad.") ||
         absl::StartsWith(name, "keras.grad.");
}

bool MomentumCorrection::IsSparsifier(absl::string_view name) {
  return name == "topk" || name == "dgc" || name == "redsync" ||
         name == "randomk" || name == "threshold";
}

std::vector<Segment> MomentumCorrection::Gradients(
    const std::vector<Segment>& segments) {
  std::vector<Segment> out;
  for (const Segment& s : segments) {
    if (Applies(s.name)) out.push_back(s);
  }
  return out;
}

void MomentumCorrection::Accumulate(absl::Span<float> g,
                                    const std::vector<Segment>& segments) {
  if (!enabled()) return;
  velocities_.Accumulate(g, Gradients(segments), static_cast<float>(momentum_));
}

void MomentumCorrection::MaskSent(absl::Span<const float> sent,
                                  const std::vector<Segment>& segments) {
  if (!enabled()) return;
  velocities_.ClearSent(Gradients(segments), sent);
}

}  // namespace terse
