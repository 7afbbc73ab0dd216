// Policy: picks, per bucket and step, which compressor and compression factor
// (CF) the engine uses, from statistics the engine measures.
//
// Protocol, per bucket and step (driven by the engine's background thread):
//   1. decision = policy->Decide();
//   2. the engine forms g_ef = g + residual and, when the decision asks for
//      probes, compresses it at probe_cf_min (g_min) and compresses g_min
//      again down to probe_cf_candidate in total (g_c, multi-level);
//   3. it sends what decision.send_cf names (1: dense, probe_cf_min: g_min,
//      probe_cf_candidate: g_c) and updates the residual (cleared when
//      decision.clear_residual);
//   4. it averages the step's statistics across ranks (piggy-backed on the
//      step's own traffic) and calls policy->Observe(decision, stats).
// Because every rank feeds the same averaged statistics into the same state,
// every rank takes the same decisions. A decision depends only on
// statistics of earlier steps (one step of lag), never on local data.
//
// Policies never touch a communicator or the engine's queue. Not
// thread-safe: one bucket's policy is used by one thread.
#ifndef TERSE_GRAVAC_POLICY_H_
#define TERSE_GRAVAC_POLICY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gravac/policy_state.pb.h"

namespace terse {
namespace gravac {

// One (compressor, level) pair: what a portfolio candidate or a gain probe
// names. cf is the compression factor the compressor is made with (1 for
// none, 2 for fp16/bf16, 32/bits for qsgd); level is PowerSGD's rank (0 for
// the others).
struct Choice {
  std::string compressor = "none";
  double cf = 1;
  int64_t level = 0;

  bool operator==(const Choice& o) const {
    return compressor == o.compressor && cf == o.cf && level == o.level;
  }
};

// A running mean (a throughput or a byte count per step) that policies keep
// per CF or candidate and checkpoint as its sum and count.
struct RunningMean {
  double sum = 0;
  int64_t count = 0;
  double mean() const { return count ? sum / count : 0; }
};

struct Decision {
  // Sparsifier for both probe levels and for sending; "none" means dense.
  std::string compressor = "none";
  // What to send: 1 = dense, otherwise probe_cf_min or probe_cf_candidate.
  double send_cf = 1;
  // The level of a compressor whose strength is not a CF: PowerSGD's rank.
  // 0: the compressor's configured level (TERSE_POWERSGD_RANK). A decision
  // with a level > 0 is never dense.
  int64_t level = 0;
  // Compression factors to probe (0 = no probe): level one compresses g_ef
  // at probe_cf_min, level two compresses that result to probe_cf_candidate.
  double probe_cf_min = 0;
  double probe_cf_candidate = 0;
  // Dense fallback of GraVAC: the error-feedback residual is dropped.
  bool clear_residual = false;
  // Accordion: restart the accumulated-gradient sum after this step.
  bool reset_accumulator = false;
  // The policy wants this step's statistics (time and norms). When neither
  // this decision nor the previous one (whose time this step's exchange
  // carries) wants them, the engine skips the exchange and Observe gets
  // zeros, identical on every rank. GraVAC's guard clears it on most vetoed
  // (plain-dense) steps, so a fast link pays no per-step statistics round.
  bool wants_stats = true;
  // Portfolio (gravac/portfolio_policy.h): compress g_ef with each of these
  // locally, send none of them, and report ||C(g_ef)||^2 of each in
  // StepStats::probe_norm2 (same order).
  std::vector<Choice> gain_probes;
  // Portfolio, window gain: keep (or start) the window of what is sent
  // (StepStats::window_*); the engine restarts it when the choice sent
  // changes or a window of `window_gain_steps` steps is complete.
  int64_t window_gain_steps = 0;  // 0: no window gain.

  bool dense() const { return level <= 0 && send_cf <= 1; }
};

// One step's statistics of one bucket, averaged over ranks.
struct StepStats {
  double norm2_ef = 0;         // ||g + residual||^2
  double norm2_min = 0;        // ||g_min||^2 (when probed)
  double norm2_candidate = 0;  // ||g_c||^2 (when probed)
  double seconds = 0;          // the bucket's time this step (> 0)
  double samples = 1;          // samples processed by all ranks this step
  // Accordion: ||sum of the reduced gradient since the last reset||^2.
  double accumulated_norm2 = 0;
  // ||what this rank sent, decoded||^2 (||g_ef||^2 when dense).
  double norm2_sent = 0;
  // ||C(g_ef)||^2 of each of Decision::gain_probes, in order (empty when the
  // decision had none or the exchange was skipped).
  std::vector<double> probe_norm2;
  // Window gain (Decision::window_gain_steps > 0): ||sum(g - sent)||^2 and
  // ||sum g||^2 over the steps of the current window so far, and how many
  // steps it holds. On the step that closes a window (window_steps ==
  // window_gain_steps) both norms are of the MEAN OVER RANKS of the ranks'
  // window sums (exact, or from a count sketch for large buckets: see
  // engine/compressed_reducer.cc); before, each rank's own norm averaged.
  double window_dev_norm2 = 0;
  double window_grad_norm2 = 0;
  double window_steps = 0;
  // Bytes a rank put on the wire for the bucket (averaged over ranks; 0 when
  // the exchange was skipped).
  double bytes_sent = 0;
};

class Policy {
 public:
  virtual ~Policy() = default;

  virtual Decision Decide() = 0;
  virtual void Observe(const Decision& taken, const StepStats& stats) = 0;
  // Tells the policy that the learning rate was just lowered (Accordion uses
  // the low CF right after a drop); others ignore it.
  virtual void OnLearningRateDrop() {}
  // One line for logs and the progress print: e.g. "gravac topk cf=40".
  virtual std::string Describe() const = 0;

  virtual void SaveState(proto::PolicyState* state) const = 0;
  // InvalidArgument when `state` is of another policy kind or inconsistent.
  virtual absl::Status RestoreState(const proto::PolicyState& state) = 0;
};

}  // namespace gravac
}  // namespace terse

#endif  // TERSE_GRAVAC_POLICY_H_
