// GravacPolicy: the GraVAC controller (Tyagi & Swany, IEEE CLOUD 2023,
// Algorithm 1) for one scope (a bucket, or the whole model).
//
// Terms: g_ef = g + residual; compression gain d = ||C(g_ef)||^2/||g_ef||^2
// in (0, 1], smoothed by an EWMA; compression throughput
// T_c[cf] = (samples / seconds) * d, recorded per CF sent (dense is CF 1).
//
// Every step (Decide, from the gains so far):
//   if d_c >= epsilon          send g_c   at the candidate CF
//   elif d_min >= epsilon      send g_min at theta_min
//   else                       send dense and clear the residual
// Every `window` steps (in Observe), unless settled:
//   - if the two best recorded T_c are within omega (relative), settle on the
//     lower CF of the two (theta_ideal) and stop exploring;
//   - else if |d_min - d_c| / d_min <= omega, raise the floor: theta_min
//     becomes the candidate just evaluated;
//   - scale up: the candidate moves to the next rung of the ladder
//     theta_min0 * s, where s goes 1, 2, 4, 16, 256, ... (exponential:
//     s <- max(2, s^2)) or 1, 2, 4, 8, ... (geometric: s <- 2s), capped at
//     theta_max. With theta_min0 = 10: exponential 10, 20, 40, 160, 1000 (cap
//     1000); geometric 10, 20, ..., 1280, 2000 (cap 2000).
// Scale-up happens only at window boundaries; scale-down is immediate through
// the epsilon tests. The first step, with no gains measured yet, goes dense.
//
// Decision of the design where the paper's pseudo-code is ambiguous: raising
// the floor moves theta_min to the candidate that was evaluated (whose gain
// matched d_min), and the candidate ladder is anchored at the initial
// theta_min, so the sequence of candidates does not depend on floor raises.
//
// Throughput guard (this project's extension, `throughput_guard`, on by
// default; off is the paper's algorithm exactly). In the paper T_c only
// decides when two CFs tie, so on a fast link GraVAC keeps compressing (and
// probing) although dense moves more gain per second. The guard lets the
// measured T_c veto compression, in the paper's own measure:
//   - T_d, dense's throughput: the first kGuardDenseSteps decisions send
//     "plain dense" (no probes, residual cleared), and while compressing one
//     step is plain dense again at each guard probe (below), so T_d does not
//     go stale. Plain-dense steps pay no probe cost: T_d is what dense costs.
//   - T_c[cf] for the guard: every step sent at cf, probes included (every
//     compressed step pays them).
//   Both are EWMAs with weight kGuardEwma of the steps' T_c.
//   - Decide: the epsilon tests pick X (candidate, theta_min or dense). A
//     compressed X with T_c[X] < (1 - omega) * T_d (both measured) is vetoed:
//     a vetoed candidate falls back to theta_min (if its gain passes epsilon
//     and it is not vetoed), otherwise the step is plain dense with the
//     residual cleared, as the paper's dense fallback. A CF not yet measured
//     is never vetoed (it must be measured once). Vetoed steps want no
//     statistics (Decision::wants_stats) but one per window, which keeps
//     T_d measured: a fast link then pays no per-step statistics exchange.
//   - Guard probes: plain-dense steps measure no gains and no T_c[X]. Every
//     `interval` windows one decision skips the veto: it sends X (while
//     vetoed) or plain dense (while compressing) to refresh the other side.
//     The interval starts at 1 window, doubles (up to kGuardMaxInterval)
//     while the verdict stays the same, and goes back to 1 when it flips.
// The scale-up, floor and settling logic at window boundaries is the
// paper's; the guard only vetoes what is sent. Every input is an average
// over ranks, so every rank takes the same decisions.
#ifndef TERSE_GRAVAC_GRAVAC_POLICY_H_
#define TERSE_GRAVAC_GRAVAC_POLICY_H_

#include <map>
#include <string>

#include "gravac/policy.h"

namespace terse {
namespace gravac {

struct GravacOptions {
  std::string compressor = "topk";  // topk | dgc | redsync | randomk
  double cf_min = 10;
  double cf_max = 1000;
  double epsilon = 0.9;
  double omega = 0.01;
  int64_t window = 500;
  bool exponential = true;       // false: geometric
  double ewma = 0.04;            // weight of the newest gain, in (0, 1]
  bool throughput_guard = true;  // see the guard above; false: the paper
};

class GravacPolicy : public Policy {
 public:
  explicit GravacPolicy(const GravacOptions& options);

  Decision Decide() override;
  void Observe(const Decision& taken, const StepStats& stats) override;
  std::string Describe() const override;
  void SaveState(proto::PolicyState* state) const override;
  absl::Status RestoreState(const proto::PolicyState& state) override;

  // Introspection for tests and the progress print.
  double theta_min() const { return theta_min_; }
  double candidate_cf() const;
  bool settled() const { return settled_; }
  double delta_min() const { return delta_min_; }
  double delta_candidate() const { return delta_candidate_; }
  int64_t step() const { return step_; }
  // The guard's throughputs (0 while unmeasured) and whether it vetoed the
  // last decision.
  double guard_dense_throughput() const { return guard_dense_tc_; }
  double guard_throughput(double cf) const;
  bool guarded() const { return last_guarded_; }

  static constexpr int64_t kGuardDenseSteps = 2;
  static constexpr double kGuardEwma = 0.5;
  static constexpr int64_t kGuardMaxInterval = 8;

 private:
  void AtWindowBoundary();
  double NextScale(double s) const;
  // The epsilon tests of the paper (with probes), from the current gains.
  Decision PaperDecision() const;
  Decision PlainDense() const;
  bool Vetoed(double cf) const;
  // The guard applied to the paper's decision `x` (see above).
  Decision Guard(const Decision& x);

  const GravacOptions options_;
  int64_t step_ = 0;
  double theta_min_;
  double theta_s_ = 1;  // Rung of the candidate ladder.
  double delta_min_ = 1;
  double delta_candidate_ = 1;
  bool has_gains_ = false;
  std::map<double, RunningMean> throughput_;  // By CF sent.
  bool settled_ = false;
  double theta_ideal_ = 0;
  Decision last_decision_;
  // Throughput guard.
  int64_t decisions_ = 0;              // Decide() calls so far.
  double guard_dense_tc_ = 0;          // T_d (0: not measured)
  std::map<double, double> guard_tc_;  // T_c by CF sent, probes included
  int64_t guard_next_probe_ = 0;       // decision index of the next guard probe
  int64_t guard_interval_ = 1;         // windows between guard probes
  bool probe_verdict_guarded_ = false;  // verdict at the last guard probe
  bool last_guarded_ = false;
};

}  // namespace gravac
}  // namespace terse

#endif  // TERSE_GRAVAC_GRAVAC_POLICY_H_
