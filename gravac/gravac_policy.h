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
  bool exponential = true;  // false: geometric
  double ewma = 0.04;       // weight of the newest gain, in (0, 1]
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

 private:
  void AtWindowBoundary();
  double NextScale(double s) const;

  const GravacOptions options_;
  int64_t step_ = 0;
  double theta_min_;
  double theta_s_ = 1;  // Rung of the candidate ladder.
  double delta_min_ = 1;
  double delta_candidate_ = 1;
  bool has_gains_ = false;
  struct Throughput {
    double sum = 0;
    int64_t count = 0;
    double mean() const { return count ? sum / count : 0; }
  };
  std::map<double, Throughput> throughput_;  // By CF sent.
  bool settled_ = false;
  double theta_ideal_ = 0;
  Decision last_decision_;
};

}  // namespace gravac
}  // namespace terse

#endif  // TERSE_GRAVAC_GRAVAC_POLICY_H_
