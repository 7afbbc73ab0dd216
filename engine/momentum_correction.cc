#include "engine/momentum_correction.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

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

std::string MomentumCorrection::KeyOf(const std::string& name,
                                      int64_t tensor_offset, int64_t count) {
  return absl::StrCat(name, "#", tensor_offset, "+", count);
}

void MomentumCorrection::Accumulate(absl::Span<float> g,
                                    const std::vector<Segment>& segments) {
  if (!enabled()) return;
  const float m = static_cast<float>(momentum_);
  for (const Segment& s : segments) {
    if (!Applies(s.name)) continue;
    ResidualStore::Entry& e =
        velocities_[KeyOf(s.name, s.tensor_offset, s.count)];
    float* x = g.data() + s.offset;
    if (e.values.empty()) {  // First step: u = g.
      e.name = s.name;
      e.tensor_offset = s.tensor_offset;
      e.values.assign(x, x + s.count);
      continue;
    }
    float* u = e.values.data();
    for (int64_t i = 0; i < s.count; ++i) {
      u[i] = m * u[i] + x[i];
      x[i] = u[i];
    }
  }
}

void MomentumCorrection::MaskSent(absl::Span<const float> sent,
                                  const std::vector<Segment>& segments) {
  if (!enabled()) return;
  for (const Segment& s : segments) {
    if (!Applies(s.name)) continue;
    auto it = velocities_.find(KeyOf(s.name, s.tensor_offset, s.count));
    if (it == velocities_.end()) continue;
    float* u = it->second.values.data();
    const float* x = sent.data() + s.offset;
    for (int64_t i = 0; i < s.count; ++i) {
      if (x[i] != 0.0f) u[i] = 0.0f;
    }
  }
}

std::vector<ResidualStore::Entry> MomentumCorrection::Export() const {
  std::vector<ResidualStore::Entry> out;
  out.reserve(velocities_.size());
  for (const auto& [key, e] : velocities_) out.push_back(e);
  return out;
}

void MomentumCorrection::Import(
    const std::vector<ResidualStore::Entry>& entries) {
  velocities_.clear();
  for (const ResidualStore::Entry& e : entries) {
    velocities_[KeyOf(e.name, e.tensor_offset,
                      static_cast<int64_t>(e.values.size()))] = e;
  }
}

}  // namespace terse
