#include "gravac/gravac_policy.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace terse {
namespace gravac {

GravacPolicy::GravacPolicy(const GravacOptions& options)
    : options_(options),
      theta_min_(options.cf_min),
      guard_next_probe_(options.window) {}

double GravacPolicy::NextScale(double s) const {
  return options_.exponential ? std::max(2.0, s * s) : 2 * s;
}

double GravacPolicy::candidate_cf() const {
  if (settled_) return theta_ideal_;
  double rung = std::min(options_.cf_max, options_.cf_min * theta_s_);
  return std::max(rung, theta_min_);
}

Decision GravacPolicy::PaperDecision() const {
  Decision d;
  d.compressor = options_.compressor;
  d.probe_cf_min = theta_min_;
  d.probe_cf_candidate = candidate_cf();
  if (!has_gains_) {
    d.send_cf = 1;  // First step: measure before compressing.
    d.clear_residual = true;
  } else if (delta_candidate_ >= options_.epsilon) {
    d.send_cf = d.probe_cf_candidate;
  } else if (delta_min_ >= options_.epsilon) {
    d.send_cf = d.probe_cf_min;
  } else {
    d.send_cf = 1;
    d.clear_residual = true;
  }
  return d;
}

Decision GravacPolicy::PlainDense() const {
  Decision d;
  d.compressor = options_.compressor;
  d.send_cf = 1;
  d.clear_residual = true;
  return d;
}

double GravacPolicy::guard_throughput(double cf) const {
  auto it = guard_tc_.find(cf);
  return it == guard_tc_.end() ? 0 : it->second;
}

bool GravacPolicy::Vetoed(double cf) const {
  const double t = guard_throughput(cf);
  return guard_dense_tc_ > 0 && t > 0 &&
         t < (1 - options_.omega) * guard_dense_tc_;
}

Decision GravacPolicy::Guard(const Decision& x) {
  last_guarded_ = false;
  if (x.dense()) return x;  // The epsilon tests chose dense: nothing to veto.
  Decision out = x;
  if (Vetoed(x.send_cf)) {
    const bool can_fall_to_min = x.send_cf != x.probe_cf_min &&
                                 delta_min_ >= options_.epsilon &&
                                 !Vetoed(x.probe_cf_min);
    if (can_fall_to_min) {
      out.send_cf = x.probe_cf_min;
    } else {
      out = PlainDense();
      // One vetoed step per window measures T_d; the others skip the
      // engine's statistics exchange (Decision::wants_stats).
      out.wants_stats = decisions_ % options_.window == options_.window / 2;
    }
  }
  const bool guarded = out.dense();
  if (decisions_ >= guard_next_probe_) {
    guard_interval_ = guarded == probe_verdict_guarded_
                          ? std::min(2 * guard_interval_, kGuardMaxInterval)
                          : 1;
    probe_verdict_guarded_ = guarded;
    guard_next_probe_ = decisions_ + guard_interval_ * options_.window;
    // Refresh the side the verdict does not measure.
    out = guarded ? x : PlainDense();
    TERSE_LOG(Debug) << "gravac guard: probe at decision " << decisions_
                     << (guarded ? " (vetoed: sends cf " : " (plain dense")
                     << (guarded ? absl::StrCat(x.send_cf, ")") : ")")
                     << ", next in " << guard_interval_ << " windows";
  }
  last_guarded_ = guarded;
  return out;
}

Decision GravacPolicy::Decide() {
  Decision d;
  if (settled_ && theta_ideal_ <= 1) {
    d.compressor = "none";  // Settled on dense: nothing to probe.
  } else if (!options_.throughput_guard) {
    d = PaperDecision();
  } else if (decisions_ < kGuardDenseSteps) {
    d = PlainDense();  // The guard measures dense first.
  } else {
    d = Guard(PaperDecision());
  }
  ++decisions_;
  last_decision_ = d;
  return d;
}

void GravacPolicy::Observe(const Decision& taken, const StepStats& stats) {
  if (taken.probe_cf_min > 0 && stats.norm2_ef > 0) {
    double gain_min = std::min(1.0, stats.norm2_min / stats.norm2_ef);
    double gain_c = std::min(1.0, stats.norm2_candidate / stats.norm2_ef);
    if (!has_gains_) {
      delta_min_ = gain_min;
      delta_candidate_ = gain_c;
      has_gains_ = true;
    } else {
      const double a = options_.ewma;
      delta_min_ = a * gain_min + (1 - a) * delta_min_;
      delta_candidate_ = a * gain_c + (1 - a) * delta_candidate_;
    }
  }
  if (stats.seconds > 0) {
    double gain = 1;
    if (!taken.dense()) {
      gain = taken.send_cf == taken.probe_cf_candidate ? delta_candidate_
                                                       : delta_min_;
    }
    RunningMean& t = throughput_[taken.dense() ? 1.0 : taken.send_cf];
    t.sum += stats.samples / stats.seconds * gain;
    ++t.count;
    if (options_.throughput_guard) {
      // Dense steps count for T_d only without probes (see the header).
      double* smoothed = nullptr;
      if (!taken.dense()) {
        smoothed = &guard_tc_[taken.send_cf];
      } else if (taken.probe_cf_min <= 0) {
        smoothed = &guard_dense_tc_;
      }
      if (smoothed != nullptr) {
        const double x = stats.samples / stats.seconds * gain;
        *smoothed =
            *smoothed > 0 ? kGuardEwma * x + (1 - kGuardEwma) * *smoothed : x;
      }
    }
  }
  ++step_;
  if (step_ % options_.window == 0) AtWindowBoundary();
}

void GravacPolicy::AtWindowBoundary() {
  if (settled_) return;
  // The two best compression throughputs seen so far.
  std::vector<std::pair<double, double>> by_throughput;  // (T_c, cf)
  for (const auto& [cf, t] : throughput_) {
    if (t.count > 0) by_throughput.push_back({t.mean(), cf});
  }
  std::sort(by_throughput.rbegin(), by_throughput.rend());
  if (by_throughput.size() >= 2 && by_throughput[0].first > 0) {
    double best = by_throughput[0].first, second = by_throughput[1].first;
    if ((best - second) / best <= options_.omega) {
      settled_ = true;
      theta_ideal_ = std::min(by_throughput[0].second, by_throughput[1].second);
      theta_min_ = std::min(theta_min_, std::max(1.0, theta_ideal_));
      TERSE_LOG(Debug) << "gravac: settled on cf " << theta_ideal_ << " (T_c "
                       << best << " vs " << second << ")";
      return;
    }
  }
  const double evaluated = candidate_cf();
  if (has_gains_ && delta_min_ > 0 &&
      std::fabs(delta_min_ - delta_candidate_) / delta_min_ <= options_.omega) {
    theta_min_ = std::max(theta_min_, evaluated);
  }
  theta_s_ = NextScale(theta_s_);
  TERSE_LOG(Debug) << "gravac: step " << step_ << " theta_min " << theta_min_
                   << " next candidate " << candidate_cf() << " gains "
                   << delta_min_ << "/" << delta_candidate_;
}

std::string GravacPolicy::Describe() const {
  std::string throughputs;
  for (const auto& [cf, t] : throughput_) {
    absl::StrAppend(&throughputs, throughputs.empty() ? "" : ",", cf, ":",
                    absl::SixDigits(t.mean()));
  }
  return absl::StrCat(
      "gravac ", options_.compressor, " cf=", last_decision_.send_cf,
      " min=", theta_min_, " cand=", candidate_cf(),
      " gain_min=", absl::SixDigits(delta_min_),
      " gain_cand=", absl::SixDigits(delta_candidate_), " T_c=[", throughputs,
      "]", settled_ ? " settled" : "", last_guarded_ ? " guarded" : "");
}

void GravacPolicy::SaveState(proto::PolicyState* state) const {
  state->Clear();
  state->set_kind("gravac");
  state->set_step(step_);
  state->set_theta_min(theta_min_);
  state->set_theta_s(theta_s_);
  state->set_delta_min(delta_min_);
  state->set_delta_candidate(delta_candidate_);
  state->set_has_gains(has_gains_);
  for (const auto& [cf, t] : throughput_) {
    proto::ThroughputRecord* r = state->add_throughput();
    r->set_cf(cf);
    r->set_sum(t.sum);
    r->set_count(t.count);
  }
  state->set_settled(settled_);
  state->set_theta_ideal(theta_ideal_);
  state->set_decisions(decisions_);
  state->set_guard_dense_throughput(guard_dense_tc_);
  for (const auto& [cf, t] : guard_tc_) {
    proto::SmoothedThroughput* r = state->add_guard_throughput();
    r->set_cf(cf);
    r->set_smoothed(t);
  }
  state->set_guard_next_probe(guard_next_probe_);
  state->set_guard_interval(guard_interval_);
  state->set_guard_probe_verdict(probe_verdict_guarded_);
  state->set_guarded(last_guarded_);
}

absl::Status GravacPolicy::RestoreState(const proto::PolicyState& state) {
  if (state.kind() != "gravac") {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot restore a '", state.kind(), "' policy state into gravac"));
  }
  if (state.step() < 0 || !(state.theta_min() >= 1) ||
      !(state.theta_s() >= 1) || state.decisions() < 0 ||
      state.guard_interval() < 0 ||
      state.guard_interval() > kGuardMaxInterval) {
    return absl::InvalidArgumentError("gravac policy state is inconsistent");
  }
  step_ = state.step();
  theta_min_ = state.theta_min();
  theta_s_ = state.theta_s();
  delta_min_ = state.delta_min();
  delta_candidate_ = state.delta_candidate();
  has_gains_ = state.has_gains();
  throughput_.clear();
  for (const proto::ThroughputRecord& r : state.throughput()) {
    throughput_[r.cf()] = RunningMean{r.sum(), r.count()};
  }
  settled_ = state.settled();
  theta_ideal_ = state.theta_ideal();
  decisions_ = state.decisions();
  guard_dense_tc_ = state.guard_dense_throughput();
  guard_tc_.clear();
  for (const proto::SmoothedThroughput& r : state.guard_throughput()) {
    guard_tc_[r.cf()] = r.smoothed();
  }
  guard_next_probe_ = state.guard_next_probe();
  // A state saved before the guard existed has no interval: start at 1.
  guard_interval_ = std::max<int64_t>(1, state.guard_interval());
  probe_verdict_guarded_ = state.guard_probe_verdict();
  last_guarded_ = state.guarded();
  return absl::OkStatus();
}

}  // namespace gravac
}  // namespace terse
