// PortfolioPolicy: GraVAC's controller over a portfolio of compressors, one
// per bucket (DESIGN §5, "Portfolio"; TERSE_GRAVAC_CANDIDATES).
//
// The candidates are (compressor, level) pairs across families: dense,
// fp16/bf16, PowerSGD ranks, sparsifier CFs, QSGD bits. Each has its own
// compression gain d_c = ||C(g_ef)||^2 / ||g_ef||^2 (an EWMA, as in the
// paper) and its compression throughput T_c = (samples / seconds) * d_c:
// the mean throughput over the steps it was sent times its current gain.
// The paper's rule picks among them:
//
//   eligible = { c : d_c >= epsilon }  (dense, d = 1, always is)
//   send argmax_{c in eligible} T_c; when the two best are within omega
//   (relative), the one with the lower compression factor, i.e. that sends
//   more bytes as measured (the paper settles on the lower CF of the two;
//   across families the CF is the measured one), or the higher gain while
//   the bytes of either are unknown (omega saturation).
//
// How the gains and throughputs are measured (every input is an average
// over ranks, so every rank takes the same decisions):
//   - Survey: the first decision of every window (`window` steps) asks the
//     engine to compress g_ef with every candidate locally and report their
//     norms (Decision::gain_probes); nothing extra is sent. The step sends
//     the current choice.
//   - Every step, the gain of what was sent is measured too
//     (StepStats::norm2_sent), so the current choice's gain stays fresh.
//   - Trials: after a survey, every eligible candidate whose T_c was never
//     measured is sent for `trial` steps in the order listed, its T_c the
//     mean over its trial (the first step of a trial, which pays for the
//     switch, is not counted when the trial is longer than two steps). Then
//     the policy settles on the rule above.
//   - Scale-down is immediate: when the gain of the choice drops below
//     epsilon, the next decision sends the best eligible other candidate.
// Exploration cost, bounded: a survey costs one local compression per
// candidate once per window; trials take at most K * trial steps, trial =
// max(2, window / (2K)) for K candidates, so at most half of a window, and
// only for candidates that became eligible unmeasured (all of them in the
// first window, few later). One step of lag: a decision uses statistics up
// to the previous step, like GravacPolicy.
//
// Window gain (this project's extension, TERSE_GRAVAC_GAIN=window, the
// default; `gain_window` > 0). The paper's gain compares one step's C(g_ef)
// with g_ef. Under error feedback a low-rank sketch sends little of each
// step (PowerSGD rank 4 on the experiment's MLP: gain 0.08) yet delivers
// nearly all of the gradient within a few steps, and trains as well as
// dense (integration/portfolio_gains.py, docs/gravac_portfolio.md). The
// window gain measures what got through: over `gain_window` consecutive
// steps sending the same candidate,
//   gain = 1 - ||sum_t (g_t - sent_t)||^2 / ||sum_t g_t||^2
// With error feedback the deviation telescopes to e_T - e_0, the change of
// the residual, so a compressor whose backlog stays bounded scores high
// however little one step sends. The sums are over the ranks too (what the
// model receives is the sum): the engine sketches each rank's window sums
// and sums the sketches, because a per-rank ratio charges PowerSGD with
// every rank's own noise outside the shared subspace, which the sum over
// ranks cancels (rank 4 on the MLP: 0.81-0.84 per rank, 0.95-0.97 summed). A
// switch from one lossy candidate to another first sends one dense step, which
// delivers the predecessor's backlog (nothing is lost) so that the newcomer
// starts from e_0 = 0; then its first window is a warm-up of gain_window / 5
// steps (PowerSGD's warm start converging) and not a sample. Without the flush
// a newcomer is charged with draining its predecessor's backlog (measured on
// the MLP at 100 Mbit/s: rank 4 after rank 1 scored 0.77, below rank 1's 0.79).
// In this mode there is no survey: every candidate gets one trial, lossy
// ones for trial = max(warm-up + gain_window, window / (2K)) steps (a warm-up
// and one sample), lossless ones (none, fp16, bf16: gain = their step gain,
// about 1) for kLosslessTrial steps, dense for kDenseTrial: at most K * trial
// steps, once. The order: the run's first step (not counted: it pays for
// starting up) sends the candidate with the fewest bytes; then dense, whose
// throughput bounds every other's (the ceiling, below); then the others by
// falling ceiling, i.e. fewest bytes first (PowerSGD's, which depend on the
// layers, count as fewest), in the order listed among equals. A finished
// lossy trial with another queued behind it is extended by up to kGainLag
// steps until its gain (one step of lag) arrives, so the next trial can be
// judged against it. The choice's gain is re-measured every gain_window steps
// while it is sent (one window in kGainEvery once settled with a gain clear
// of epsilon by kGainSlack), and the rule is applied again at each sample.
// Gains change as training goes on (PowerSGD rank 4 on the MLP: 0.82 in its
// trial at steps 70-130, 0.92 later), so every max(window, 4 * trial) decisions
// one failed candidate whose T_c beats the choice's (the one closest to
// epsilon) is tried again: at most a quarter of the steps. Window sums live in
// the engine and restart after a checkpoint restore.
//
// Throughput bound (window mode): a gain is at most 1, so a candidate's T_c
// is at most its raw throughput. Once a lossy trial has measured
// kBoundSteps steps (the switch step not counted), a candidate whose raw
// throughput is below (1 - kBoundMargin) times the best T_c measured among
// eligible candidates cannot win, and its trial ends there ("bounded"):
// where compression does not pay (a fast link, compute-bound compressors)
// the exploration costs about kBoundSteps + 2 steps per lossy candidate
// instead of a whole trial. A bounded candidate has no gain and is tried
// again only when its raw throughput beats the choice's T_c (MaybeRetry).
// The ceiling: before a trial, a candidate's throughput is bounded by
// dense's. A step's time is at least its traffic's share of dense's step
// (compression adds work, never removes it), and a candidate's traffic is
// at least MinBytesFraction of dense's: 1 / cf, times P / 2 for allgathered
// payloads (top-k, QSGD: every rank receives P - 1 payloads, where a ring
// allreduce moves 2 (P - 1) / P buffers). So T <= T_dense / fraction, and a
// candidate whose ceiling is under the bound is skipped without being sent
// (on the experiment's MLP at 100 Mbit/s: fp16 and top-k CF 10 once
// PowerSGD rank 4 is measured). Dense keeps its place unless a candidate's
// T_c beats it by kLeaveDenseMargin (a candidate whose raw throughput cannot
// is bounded out too), and before it is left for a candidate whose T_c is
// within 1 / (1 - kBoundMargin) of its own, or for a lossless one however
// far ahead (its lead over a one-step dense measure is as often stale as
// real), both are measured afresh, one after the other, for
// kRemeasureTrial steps each (the confirm): a trial's
// mean comes from another stretch of training, and on loopback with 4 ranks
// on 2 cores fp16's 3-step trial read 6% above dense while its steps were
// 10-34% slower. Dense's single-step measure is a cold one: once per
// re-trial period, while dense is within the margin of the choice's T_c, it
// is measured again, and a lossless choice right after it. Neither happens
// on a slow link, where dense is far behind: the counterpart of GraVAC's
// plain-dense guard.
// TERSE_GRAVAC_THROUGHPUT_GUARD=off turns the bound and the ceiling off
// (every trial runs to its end, as before the bound existed).
//
// While the choice is dense and nothing is being tried, only the survey and
// one mid-window step want statistics (Decision::wants_stats), so a fast link
// that settles on dense pays no per-step statistics exchange.
//
// Not thread-safe: one bucket's policy is used by one thread.
#ifndef TERSE_GRAVAC_PORTFOLIO_POLICY_H_
#define TERSE_GRAVAC_PORTFOLIO_POLICY_H_

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gravac/policy.h"

namespace terse {
namespace gravac {

// "none", "fp16", "powersgd:4", "topk:100", "qsgd:8".
std::string ChoiceName(const Choice& c);

// Expands TERSE_GRAVAC_CANDIDATES entries ("family[:level]", validated by
// the config parser) into choices, in the order listed, without duplicates.
// A sparsifier without a level expands to GraVAC's CF ladder from cf_min to
// cf_max (exponential: 10, 20, 40, 160, 1000 for 10..1000; geometric:
// doubling). InvalidArgument names a bad entry.
absl::StatusOr<std::vector<Choice>> ExpandCandidates(
    const std::vector<std::string>& entries, double cf_min, double cf_max,
    bool exponential);

// True, with *family set, when the entries are "paper" or name exactly one
// sparsifier family without a level (optionally beside "none"): GraVAC's
// single-family controller (GravacPolicy) then runs exactly as the paper.
// For "paper", *family is left unchanged (TERSE_GRAVAC_COMPRESSOR).
bool IsSingleFamily(const std::vector<std::string>& entries,
                    std::string* family);

struct PortfolioOptions {
  std::vector<Choice> candidates;  // Dense is added first if missing.
  double epsilon = 0.9;
  double omega = 0.01;
  int64_t window = 500;
  double ewma = 0.04;  // Weight of the newest gain, in (0, 1].
  // Window gain (extension, see the header comment); 0: the paper's step
  // gain.
  int64_t gain_window = 0;
  // The throughput bound (window mode; see the header comment):
  // TERSE_GRAVAC_THROUGHPUT_GUARD, like the single-family controller's guard.
  bool throughput_bound = true;
  // Ranks in the job: an allgathered payload costs P / 2 times an
  // allreduced one per byte (MinBytesFraction).
  int world_size = 1;
};

class PortfolioPolicy : public Policy {
 public:
  explicit PortfolioPolicy(const PortfolioOptions& options);

  Decision Decide() override;
  void Observe(const Decision& taken, const StepStats& stats) override;
  std::string Describe() const override;
  void SaveState(proto::PolicyState* state) const override;
  absl::Status RestoreState(const proto::PolicyState& state) override;

  // Introspection for tests and reports.
  const std::vector<Choice>& candidates() const { return candidates_; }
  const Choice& choice() const { return candidates_[current_]; }
  double gain(int i) const { return gains_[i]; }
  // T_c: the candidate's measured throughput (samples / s, mean over the
  // steps it was sent) times its current gain, so a gain measured at the end
  // of a trial (window mode) applies to the whole trial's throughput.
  double Tc(int i) const { return tc_[i].mean() * gains_[i]; }
  bool exploring() const { return !queue_.empty() || trial_left_ > 0; }
  int64_t trial_steps() const { return trial_; }

  // Steps a lossless candidate is tried for in window mode (its T_c only).
  static constexpr int64_t kLosslessTrial = 3;
  // Steps dense is tried for in window mode (all measured: dense has no
  // state to warm up). One: on a slow link a dense step is the dearest step
  // there is, and where dense could win, it is measured again beside its
  // rival before it is left (kRemeasureTrial, the confirm).
  static constexpr int64_t kDenseTrial = 1;
  // Steps of each side of a side-by-side measure: dense and its rival, one
  // after the other (the confirm before dense is left, and the re-measure
  // once per re-trial period); only where dense could still win.
  static constexpr int64_t kRemeasureTrial = 8;
  // Window mode with the bound on: a candidate replaces dense only when its
  // T_c beats dense's by this much (relative). Dense loses nothing and
  // costs no compute; a smaller edge is within the noise of a few steps'
  // mean (measured on loopback, 4 ranks on 2 cores: fp16's 3-step mean came
  // out 6% above dense's while its steps were 10-34% slower).
  static constexpr double kLeaveDenseMargin = 0.1;
  // The throughput bound (see the header comment).
  static constexpr int64_t kBoundSteps = 3;
  static constexpr double kBoundMargin = 0.2;
  // Window mode: steps a finished lossy trial is extended by while its gain
  // (one step of lag) is awaited, when another trial is queued behind it.
  static constexpr int64_t kGainLag = 2;
  // Window mode, settled on a lossy choice whose gain is at least epsilon +
  // kGainSlack: its gain is measured in one window of every kGainEvery
  // (each window costs the engine a pass over the bucket per step: 3% of
  // the MLP's step at 100 Mbit/s); a gain nearer epsilon, every window.
  static constexpr int64_t kGainEvery = 4;
  static constexpr double kGainSlack = 0.03;
  bool bounded(int i) const { return bounded_[i]; }

 private:
  int IndexOf(const Choice& c) const;
  // none, fp16, bf16: their gain is their step gain (about 1) in both modes.
  bool Lossless(int i) const;
  // Steps of candidate i's trial.
  int64_t TrialLength(int i) const;
  bool Eligible(int i) const;
  // argmax T_c among measured eligible candidates, with omega saturation;
  // `exclude` (or -1) is left out. Dense when nothing else qualifies.
  int Leader(int exclude) const;
  // The paper's rule: Leader(exclude), except that in window mode with the
  // bound on, dense (when measured and not excluded) keeps its place unless
  // the leader's T_c beats it by kLeaveDenseMargin.
  int Best(int exclude) const;
  // The raw throughput candidate `i` must reach to have a chance: (1 -
  // kBoundMargin) x the best other T_c, and (1 + kLeaveDenseMargin) x
  // dense's where the dense margin applies. 0 while nothing is measured.
  double Bar(int i) const;
  // Window mode, about to settle away from dense: when the leader's T_c is
  // within 1 / (1 - kBoundMargin) of dense's (it could be noise, or a mean
  // from another stretch of training), both are measured afresh, one after
  // the other, before the rule is applied (confirming_). True when queued.
  bool MaybeConfirm();
  void AfterSurvey();
  // Window mode: queues one failed candidate for a new trial (see above).
  void MaybeRetry();
  void UpdateGain(int i, double gain);
  // Window mode: ends the trial of `i` when the throughput bound rules it
  // out (see the header comment).
  void MaybeBound(int i);
  // A lower bound on the traffic candidate `i` causes, as a fraction of
  // dense's: 1 / cf (times P / 2 where payloads are allgathered), 0 where
  // unknown (PowerSGD).
  double MinBytesFraction(int i) const;
  // An upper bound on candidate i's raw throughput: measured, or (before its
  // trial) dense's divided by MinBytesFraction (max() when unknown).
  double Ceiling(int i) const;
  // Window mode: true (and `i` marked bounded) when Ceiling(i) is under the
  // bound, so its trial is skipped (see the header comment).
  bool SkipByCeiling(int i);
  Decision Send(int i) const;
  // The decision that sends candidate `send` (statistics, window, streak).
  Decision Finish(int send);

  std::vector<Choice> candidates_;  // [0] is dense.
  const PortfolioOptions options_;
  int64_t trial_ = 2;
  int64_t retry_every_ = 1;  // Decisions between re-trials (window mode).

  int64_t decisions_ = 0;  // Decide() calls so far.
  int64_t observed_ = 0;   // Observe() calls so far.
  int current_ = 0;        // Candidate sent when not in a trial.
  std::vector<double> gains_;
  std::vector<bool> has_gain_;
  std::vector<bool> bounded_;  // Trial cut short by the throughput bound.
  std::vector<RunningMean> tc_;
  std::vector<RunningMean> bytes_;  // Bytes sent per step, by candidate.
  std::deque<int> queue_;           // Candidates waiting for their trial.
  int trying_ = -1;                 // Candidate in a trial (-1: none).
  int64_t trial_left_ = 0;
  int last_sent_ = 0;               // Candidate of the last observed step.
  bool pick_after_trials_ = false;  // Re-pick current_ at the next decision.
  int64_t warmup_ = 1;     // Window-gain warm-up after a switch (steps).
  int last_decided_ = 0;   // Candidate of the last decision.
  int pending_send_ = -1;  // Sent next, after a flushing dense step.
  // A lossy trial that ended and whose window gain has not arrived yet (-1:
  // none), and the steps it was extended by. Not checkpointed: after a
  // restore the next trial starts without waiting.
  int awaiting_ = -1;
  int64_t awaited_ = 0;
  // Dense (and a lossless choice) are being measured again (MaybeRetry):
  // longer trials. Not checkpointed: after a restore they run kDenseTrial /
  // kLosslessTrial steps.
  bool remeasuring_ = false;
  // The side-by-side measure before leaving dense is under way or done
  // (MaybeConfirm); cleared by the pick that follows it. Not checkpointed:
  // after a restore the confirm may run once more.
  bool confirming_ = false;
  int64_t streak_ = 0;  // Decisions in a row sending it, minus one.
  std::string last_reason_ = "start: dense until the first survey";
  bool window_mode_ = false;
};

}  // namespace gravac
}  // namespace terse

#endif  // TERSE_GRAVAC_PORTFOLIO_POLICY_H_
