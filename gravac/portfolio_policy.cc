#include "gravac/portfolio_policy.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/logging.h"

namespace terse {
namespace gravac {
namespace {

bool IsSparsifier(absl::string_view family) {
  return family == "topk" || family == "dgc" || family == "redsync" ||
         family == "randomk";
}

// GraVAC's CF ladder: cf_min * s for s = 1, 2, 4, 16, 256, ... (exponential)
// or 1, 2, 4, 8, ... (geometric), capped at cf_max (gravac_policy.h).
std::vector<double> Ladder(double cf_min, double cf_max, bool exponential) {
  std::vector<double> out;
  double s = 1;
  while (true) {
    const double cf = std::min(cf_max, cf_min * s);
    if (out.empty() || cf > out.back()) out.push_back(cf);
    if (cf >= cf_max) break;
    s = exponential ? std::max(2.0, s * s) : 2 * s;
  }
  return out;
}

}  // namespace

std::string ChoiceName(const Choice& c) {
  if (c.compressor == "none" || c.compressor == "fp16" ||
      c.compressor == "bf16") {
    return c.compressor;
  }
  if (c.compressor == "powersgd") return absl::StrCat("powersgd:", c.level);
  if (c.compressor == "qsgd") {
    return absl::StrCat("qsgd:", static_cast<int>(std::lround(32 / c.cf)));
  }
  return absl::StrCat(c.compressor, ":", c.cf);
}

absl::StatusOr<std::vector<Choice>> ExpandCandidates(
    const std::vector<std::string>& entries, double cf_min, double cf_max,
    bool exponential) {
  std::vector<Choice> out;
  auto add = [&out](Choice c) {
    if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  };
  for (const std::string& entry : entries) {
    std::pair<std::string, std::string> fl =
        absl::StrSplit(entry, absl::MaxSplits(':', 1));
    const std::string& family = fl.first;
    const bool has_level = entry.find(':') != std::string::npos;
    const absl::Status bad = absl::InvalidArgumentError(
        absl::StrCat("TERSE_GRAVAC_CANDIDATES: bad entry '", entry, "'"));
    Choice c;
    c.compressor = family;
    if (family == "none") {
      c.cf = 1;
    } else if (family == "fp16" || family == "bf16") {
      c.cf = 2;
    } else if (family == "powersgd") {
      if (!has_level || !absl::SimpleAtoi(fl.second, &c.level) || c.level < 1) {
        return bad;
      }
      c.cf = 1;
    } else if (family == "qsgd") {
      int bits = 0;
      if (!has_level || !absl::SimpleAtoi(fl.second, &bits) || bits < 2 ||
          bits > 16) {
        return bad;
      }
      c.cf = 32.0 / bits;
    } else if (IsSparsifier(family)) {
      if (has_level) {
        if (!absl::SimpleAtod(fl.second, &c.cf) || !(c.cf > 1)) return bad;
      } else {
        for (double cf : Ladder(cf_min, cf_max, exponential)) {
          if (cf <= 1) continue;
          add(Choice{family, cf, 0});
        }
        continue;
      }
    } else {
      return bad;
    }
    add(c);
  }
  return out;
}

bool IsSingleFamily(const std::vector<std::string>& entries,
                    std::string* family) {
  if (entries.size() == 1 && entries[0] == "paper") return true;
  std::string found;
  for (const std::string& e : entries) {
    if (e == "none") continue;
    if (!IsSparsifier(e) || !found.empty()) return false;  // Level or 2nd.
    found = e;
  }
  if (found.empty()) return false;
  *family = found;
  return true;
}

PortfolioPolicy::PortfolioPolicy(const PortfolioOptions& options)
    : options_(options) {
  candidates_.push_back(Choice{});  // Dense first, always.
  for (const Choice& c : options.candidates) {
    if (c.compressor == "none") continue;
    if (std::find(candidates_.begin(), candidates_.end(), c) ==
        candidates_.end()) {
      candidates_.push_back(c);
    }
  }
  const int64_t k = static_cast<int64_t>(candidates_.size());
  window_mode_ = options_.gain_window > 0;
  warmup_ = std::max<int64_t>(1, options_.gain_window / 5);
  trial_ = std::max<int64_t>(window_mode_ ? warmup_ + options_.gain_window : 3,
                             options_.window / (2 * k));
  retry_every_ = std::max<int64_t>(options_.window, 4 * trial_);
  if (window_mode_) {
    // Every candidate is tried once: its window gain needs it sent. Dense
    // first (after the run's first step, see Decide): its throughput is
    // what compression must beat and what bounds the others' (Ceiling).
    // Then by falling ceiling, fewest bytes first (list order among
    // equals), so that a candidate that cannot beat one measured before it
    // is skipped without being sent.
    std::vector<int> order;
    for (int i = 1; i < k; ++i) order.push_back(i);
    std::stable_sort(order.begin(), order.end(), [this](int a, int b) {
      return MinBytesFraction(a) < MinBytesFraction(b);
    });
    queue_.push_back(0);
    for (int i : order) queue_.push_back(i);
    last_reason_ = "start: dense, then one trial of each candidate";
  }
  gains_.assign(k, 1.0);
  has_gain_.assign(k, false);
  bounded_.assign(k, false);
  has_gain_[0] = true;  // Dense sends everything.
  tc_.assign(k, RunningMean{});
  bytes_.assign(k, RunningMean{});
}

int64_t PortfolioPolicy::TrialLength(int i) const {
  if (!window_mode_) return trial_;
  if (remeasuring_) return kRemeasureTrial;
  if (i == 0) return kDenseTrial;
  return Lossless(i) ? kLosslessTrial : trial_;
}

bool PortfolioPolicy::Lossless(int i) const {
  const std::string& c = candidates_[i].compressor;
  return c == "none" || c == "fp16" || c == "bf16";
}

int PortfolioPolicy::IndexOf(const Choice& c) const {
  if (c.compressor == "none") return 0;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    if (candidates_[i] == c) return static_cast<int>(i);
  }
  return -1;
}

double PortfolioPolicy::MinBytesFraction(int i) const {
  const Choice& c = candidates_[i];
  if (c.compressor == "none") return 1;
  // PowerSGD's bytes depend on the layers' shapes: no bound.
  if (c.compressor == "powersgd") return 0;
  // fp16/bf16 (cf 2), qsgd (32 / bits) and the sparsifiers (n / cf values,
  // plus their indices) put at least 1 / cf of dense's bytes in a payload.
  const double payload = c.cf > 1 ? 1 / c.cf : 1;
  // What cannot be summed on the way (top-k style sparsifiers, QSGD) is
  // allgathered: every rank receives the other P - 1 payloads, where a
  // bandwidth-optimal allreduce of dense (ring, Rabenseifner: what MPI and
  // NCCL run for large buffers) moves 2 (P - 1) / P of a buffer per rank;
  // per payload byte that is P / 2 times the traffic. random-k shares its
  // indices and is allreduced.
  const bool gathered = c.compressor == "topk" || c.compressor == "dgc" ||
                        c.compressor == "redsync" || c.compressor == "qsgd";
  return gathered ? payload * std::max(1.0, options_.world_size / 2.0)
                  : payload;
}

double PortfolioPolicy::Ceiling(int i) const {
  if (tc_[i].count > 0) return tc_[i].mean();
  const double f = MinBytesFraction(i);
  if (tc_[0].count == 0 || f <= 0) return std::numeric_limits<double>::max();
  return tc_[0].mean() / f;
}

bool PortfolioPolicy::Eligible(int i) const {
  return i == 0 || (has_gain_[i] && gains_[i] >= options_.epsilon);
}

int PortfolioPolicy::Leader(int exclude) const {
  std::vector<int> order;
  for (int i = 0; i < static_cast<int>(candidates_.size()); ++i) {
    if (i != exclude && Eligible(i) && tc_[i].count > 0) order.push_back(i);
  }
  if (order.empty()) return 0;
  std::stable_sort(order.begin(), order.end(),
                   [this](int a, int b) { return Tc(a) > Tc(b); });
  if (order.size() >= 2) {
    const double best = Tc(order[0]), second = Tc(order[1]);
    // omega saturation: a tie goes to the lower CF (more bytes sent), as
    // the paper settles; the higher gain while bytes are unknown.
    if (best > 0 && (best - second) / best <= options_.omega) {
      const RunningMean& a = bytes_[order[0]];
      const RunningMean& b = bytes_[order[1]];
      const bool known = a.count > 0 && b.count > 0;
      if (known ? b.mean() > a.mean() : gains_[order[1]] > gains_[order[0]]) {
        return order[1];
      }
    }
  }
  return order[0];
}

int PortfolioPolicy::Best(int exclude) const {
  const int leader = Leader(exclude);
  if (leader == 0 || exclude == 0 || !window_mode_ ||
      !options_.throughput_bound || tc_[0].count == 0) {
    return leader;
  }
  return Tc(leader) < (1 + kLeaveDenseMargin) * Tc(0) ? 0 : leader;
}

double PortfolioPolicy::Bar(int i) const {
  const int best = Best(i);
  double bar = tc_[best].count > 0 ? (1 - kBoundMargin) * Tc(best) : 0;
  if (i != 0 && tc_[0].count > 0) {
    bar = std::max(bar, (1 + kLeaveDenseMargin) * Tc(0));
  }
  return bar;
}

bool PortfolioPolicy::MaybeConfirm() {
  if (!window_mode_ || !options_.throughput_bound || confirming_ ||
      current_ != 0 || tc_[0].count == 0) {
    return false;
  }
  const int leader = Leader(-1);
  if (leader == 0) return false;
  // A lossless rival is always confirmed: it can beat dense by its width
  // ratio at most (2x), so a lead over 1.25x is as likely a stale dense
  // measure (one step, early in the run) as a real one.
  const bool lossless = Lossless(leader);
  if (!lossless && Tc(leader) * (1 - kBoundMargin) >= Tc(0)) return false;
  last_reason_ = absl::StrCat(
      "confirming: ", ChoiceName(candidates_[leader]), "'s T_c ",
      absl::SixDigits(Tc(leader)),
      lossless ? " (lossless) against" : " is within ",
      lossless ? "" : absl::StrCat(1 / (1 - kBoundMargin), "x of"), " dense's ",
      absl::SixDigits(Tc(0)), ", measuring both afresh; ");
  tc_[0] = RunningMean{};
  tc_[leader] = RunningMean{};
  queue_.push_back(0);
  queue_.push_back(leader);
  remeasuring_ = true;
  confirming_ = true;
  pick_after_trials_ = false;
  return true;
}

Decision PortfolioPolicy::Send(int i) const {
  const Choice& c = candidates_[i];
  Decision d;
  d.compressor = c.compressor;
  d.send_cf = c.compressor == "none" ? 1 : c.cf;
  d.level = c.level;
  d.clear_residual = c.compressor == "none";
  return d;
}

Decision PortfolioPolicy::Decide() {
  if (pending_send_ >= 0) {
    const int send = pending_send_;
    pending_send_ = -1;
    return Finish(send);
  }
  if (window_mode_ && decisions_ > 0 && decisions_ % retry_every_ == 0 &&
      !exploring()) {
    MaybeRetry();
  }
  if (pick_after_trials_ && trial_left_ == 0 && queue_.empty()) {
    MaybeConfirm();
  }
  int send = -1;
  if (trial_left_ == 0 && !queue_.empty() && awaiting_ >= 0 &&
      awaited_ < kGainLag) {
    // The lossy trial just ended and its gain is on the way (one step of
    // lag): one more step of it, so that the next trial can be skipped by
    // its ceiling against the candidate just measured.
    ++awaited_;
    send = awaiting_;
  } else if (trial_left_ == 0 && !queue_.empty() &&
             !(window_mode_ && decisions_ == 0)) {  // Dense's T_c first.
    awaiting_ = -1;
    trying_ = queue_.front();
    queue_.pop_front();
    trial_left_ = TrialLength(trying_);
    while (trying_ > 0 && SkipByCeiling(trying_)) {
      trying_ = -1;
      trial_left_ = 0;
      if (queue_.empty()) {
        pick_after_trials_ = true;
        break;
      }
      trying_ = queue_.front();
      queue_.pop_front();
      trial_left_ = TrialLength(trying_);
    }
  }
  if (window_mode_ && decisions_ == 0 && queue_.size() > 1) {
    // The run's first step pays for starting up (MPI connects, buffers are
    // allocated) and is not counted; it sends the candidate with the fewest
    // bytes, first in the trial order, not dense: on a slow link a dense
    // step is the most expensive step there is.
    send = queue_[1];
    last_reason_ = "start: the first step, then dense, then one trial of each";
  } else if (send >= 0) {
    // Set above: the last trial's candidate, while its gain is awaited.
  } else if (trial_left_ > 0) {
    send = trying_;
    if (--trial_left_ == 0) {
      if (window_mode_ && !Lossless(trying_)) {
        awaiting_ = trying_;
        awaited_ = 0;
      }
      if (queue_.empty()) {
        trying_ = -1;
        pick_after_trials_ = true;
        remeasuring_ = false;
      }
    }
  } else {
    if (pick_after_trials_ || !Eligible(current_)) {
      const int before = current_;
      current_ = Best(-1);
      if (!pick_after_trials_ && current_ != before) {
        last_reason_ =
            absl::StrCat(ChoiceName(candidates_[before]), " lost its gain: ");
      } else {
        last_reason_.clear();
      }
      absl::StrAppend(&last_reason_,
                      "best T_c among gains >= ", options_.epsilon);
      if (current_ == 0 && Leader(-1) != 0) {
        absl::StrAppend(&last_reason_, ", dense unless beaten by ",
                        kLeaveDenseMargin);
      }
      pick_after_trials_ = false;
      confirming_ = false;
    }
    send = current_;
  }
  if (window_mode_ && send != last_decided_ && !Lossless(send) &&
      !Lossless(last_decided_)) {
    // Lossy to lossy: one dense step first sends the predecessor's backlog
    // (nothing is lost), so the newcomer's window measures its own.
    pending_send_ = send;
    send = 0;
  }
  return Finish(send);
}

Decision PortfolioPolicy::Finish(int send) {
  Decision d = Send(send);
  const bool survey = !window_mode_ && decisions_ % options_.window == 0;
  if (survey) {
    for (size_t i = 1; i < candidates_.size(); ++i) {
      if (static_cast<int>(i) != send) d.gain_probes.push_back(candidates_[i]);
    }
  }
  // Settled (dense, or in window mode the chosen lossy candidate): one
  // throughput sample per window; in window mode the engine exchanges the
  // statistics of every step that closes a gain window regardless.
  const bool settled =
      send == 0 || (window_mode_ && send == current_ && pending_send_ < 0);
  const bool quiet = settled && !survey && !exploring() &&
                     decisions_ % options_.window != options_.window / 2;
  d.wants_stats = !quiet;
  streak_ = send == last_decided_ ? streak_ + 1 : 0;
  last_decided_ = send;
  if (window_mode_ && !Lossless(send)) {
    // Lossless sends need no window (their gain is their step gain), so the
    // engine keeps no sums for them. After a switch the engine's first window
    // is a warm-up of warmup_ steps (it restarts when it holds
    // window_gain_steps), so the first sample's e_0 is this candidate's own
    // backlog, not its predecessor's.
    d.window_gain_steps = streak_ <= warmup_ ? warmup_ : options_.gain_window;
    // Settled with a gain well clear of epsilon: one window in
    // kGainEvery is measured (the engine keeps no sums in between).
    const int64_t w =
        (streak_ - warmup_) / std::max<int64_t>(1, options_.gain_window);
    if (settled && !exploring() && streak_ > warmup_ && w % kGainEvery != 0 &&
        has_gain_[send] && gains_[send] >= options_.epsilon + kGainSlack) {
      d.window_gain_steps = 0;
    }
  }
  ++decisions_;
  return d;
}

void PortfolioPolicy::UpdateGain(int i, double gain) {
  if (i <= 0 || !std::isfinite(gain)) return;
  gain = std::min(1.0, std::max(0.0, gain));
  if (!has_gain_[i]) {
    gains_[i] = gain;
    has_gain_[i] = true;
  } else {
    gains_[i] = options_.ewma * gain + (1 - options_.ewma) * gains_[i];
  }
}

void PortfolioPolicy::Observe(const Decision& taken, const StepStats& stats) {
  ++observed_;
  const int i = IndexOf(Choice{taken.compressor,
                               taken.compressor == "none" ? 1 : taken.send_cf,
                               taken.level});
  if (window_mode_) {
    // A complete window of the candidate sent: one gain sample.
    if (i >= 0 && Lossless(i) && stats.norm2_ef > 0) {
      UpdateGain(i, stats.norm2_sent / stats.norm2_ef);
    } else if (i > 0 && stats.window_grad_norm2 > 0 &&
               stats.window_steps >= options_.gain_window) {
      // Only full windows are samples: the warm-up window after a switch
      // (shorter, see Decide) never is.
      UpdateGain(i, 1 - stats.window_dev_norm2 / stats.window_grad_norm2);
      if (i == awaiting_) awaiting_ = -1;
      // A fresh gain (the last trial's arrives one step after it ended):
      // choose again by the rule.
      if (!exploring()) pick_after_trials_ = true;
    }
  } else if (stats.norm2_ef > 0) {
    if (i > 0) UpdateGain(i, stats.norm2_sent / stats.norm2_ef);
    for (size_t k = 0;
         k < taken.gain_probes.size() && k < stats.probe_norm2.size(); ++k) {
      UpdateGain(IndexOf(taken.gain_probes[k]),
                 stats.probe_norm2[k] / stats.norm2_ef);
    }
  }
  if (i >= 0 && stats.bytes_sent > 0) {
    bytes_[i].sum += stats.bytes_sent;
    ++bytes_[i].count;
  }
  if (i >= 0 && stats.seconds > 0) {
    // The step that switched to a candidate pays for the switch (a new
    // compressor, a cold PowerSGD start): not counted.
    // In window mode the run's first step is not counted either: it pays
    // for starting up.
    // Dense has no state to start: its switch steps (a trial's first, a
    // flush) count.
    if ((i == last_sent_ || (window_mode_ && i == 0)) &&
        !(window_mode_ && observed_ == 1)) {
      tc_[i].sum += stats.samples / stats.seconds;
      ++tc_[i].count;
    }
  }
  if (i >= 0) last_sent_ = i;
  if (window_mode_ && i > 0) MaybeBound(i);
  if (!taken.gain_probes.empty() && stats.norm2_ef > 0) AfterSurvey();
}

bool PortfolioPolicy::SkipByCeiling(int i) {
  if (!window_mode_ || !options_.throughput_bound || tc_[i].count > 0) {
    return false;
  }
  const double ceiling = Ceiling(i);
  const double bar = Bar(i);
  if (ceiling >= bar) return false;
  bounded_[i] = true;
  has_gain_[i] = false;
  last_reason_ = absl::StrCat(
      ChoiceName(candidates_[i]), " skipped: its throughput is at most ",
      absl::SixDigits(ceiling), " (dense's / ", MinBytesFraction(i),
      " of its bytes) < ", absl::SixDigits(bar), ", what it must reach; ");
  return true;
}

void PortfolioPolicy::MaybeBound(int i) {
  if (!options_.throughput_bound || i != trying_ || Lossless(i) ||
      tc_[i].count < kBoundSteps) {
    return;
  }
  if (trial_left_ == 0) return;  // Its last step is decided already.
  const double bar = Bar(i);
  if (tc_[i].mean() >= bar) return;
  bounded_[i] = true;
  has_gain_[i] = false;
  trial_left_ = 0;
  if (queue_.empty()) {
    trying_ = -1;
    pick_after_trials_ = true;
  }
  last_reason_ =
      absl::StrCat(ChoiceName(candidates_[i]), " bounded out: throughput ",
                   absl::SixDigits(tc_[i].mean()), " < ", absl::SixDigits(bar),
                   ", what it must reach; ");
}

void PortfolioPolicy::MaybeRetry() {
  // Dense's throughput was measured once, at the start (a cold, noisy
  // measure), and it bounds every other candidate's: where dense could still
  // win (within the margin of the choice's T_c) it is measured afresh, the
  // portfolio's counterpart of GraVAC's plain-dense guard. On a slow link,
  // where dense is far behind, it is never re-sent.
  // A lossless choice (fp16, bf16) is measured afresh right after it: both
  // means then come from the same stretch of training, not a cold trial
  // against a warm one (on loopback, 4 ranks on 2 cores: fp16 steps took
  // 1.4x dense's while their means, taken at different times, were equal).
  if (current_ != 0 && tc_[0].count > 0 &&
      tc_[0].mean() >= (1 - kBoundMargin) * Tc(current_)) {
    tc_[0] = RunningMean{};
    queue_.push_back(0);
    if (Lossless(current_)) {
      tc_[current_] = RunningMean{};
      queue_.push_back(current_);
    }
    remeasuring_ = true;
    last_reason_ = absl::StrCat("measuring dense again beside ",
                                ChoiceName(candidates_[current_]));
    return;
  }
  // Gains change as training goes on: the failed candidate that would pay
  // most if it passed now (higher T_c than the choice), closest to epsilon.
  // What a candidate must beat to replace the choice: its T_c, and dense's
  // by the margin while dense is the choice.
  const double need =
      std::max(Tc(current_), current_ == 0 && options_.throughput_bound
                                 ? (1 + kLeaveDenseMargin) * Tc(0)
                                 : 0.0);
  int retry = -1;
  for (int i = 1; i < static_cast<int>(candidates_.size()); ++i) {
    if (bounded_[i]) {
      // Its raw throughput (measured, or the ceiling dense's sets) bounds
      // its T_c: worth a trial once it beats what the choice has.
      if (Ceiling(i) <= need) continue;
      if (retry < 0) retry = i;
      continue;
    }
    if (Eligible(i) || !has_gain_[i] || tc_[i].count == 0) continue;
    if (Tc(i) <= need) continue;
    if (retry < 0 || gains_[i] > gains_[retry]) retry = i;
  }
  if (retry < 0) return;
  queue_.push_back(retry);
  has_gain_[retry] = false;  // Its trial's window sets it afresh.
  bounded_[retry] = false;
  last_reason_ = absl::StrCat("retrying ", ChoiceName(candidates_[retry]));
}

void PortfolioPolicy::AfterSurvey() {
  for (int i = 1; i < static_cast<int>(candidates_.size()); ++i) {
    const bool waiting = i == trying_ || std::find(queue_.begin(), queue_.end(),
                                                   i) != queue_.end();
    if (Eligible(i) && tc_[i].count == 0 && !waiting) queue_.push_back(i);
  }
  // The window's re-pick: stale choices give way to better measured ones.
  if (!exploring()) pick_after_trials_ = true;
  TERSE_LOG(Debug) << "portfolio: survey at decision " << decisions_ << ": "
                   << Describe();
}

std::string PortfolioPolicy::Describe() const {
  std::string out = absl::StrCat("portfolio ", ChoiceName(choice()));
  if (trying_ >= 0) {
    absl::StrAppend(&out, " trying ", ChoiceName(candidates_[trying_]));
  }
  absl::StrAppend(&out, " (", last_reason_, ") ",
                  window_mode_ ? "window" : "step", " gains [");
  for (size_t i = 0; i < candidates_.size(); ++i) {
    absl::StrAppend(&out, i ? " " : "", ChoiceName(candidates_[i]), " gain=");
    if (has_gain_[i]) {
      absl::StrAppend(&out, absl::SixDigits(gains_[i]));
    } else if (bounded_[i]) {
      absl::StrAppend(&out, "? bounded T<=", absl::SixDigits(Ceiling(i)));
    } else {
      absl::StrAppend(&out, "?");
    }
    absl::StrAppend(&out, " T_c=");
    if (tc_[i].count > 0) {
      absl::StrAppend(&out, absl::SixDigits(Tc(i)));
    } else {
      absl::StrAppend(&out, "?");
    }
  }
  absl::StrAppend(&out, "]");
  return out;
}

void PortfolioPolicy::SaveState(proto::PolicyState* state) const {
  state->Clear();
  state->set_kind("portfolio");
  state->set_step(observed_);
  state->set_decisions(decisions_);
  proto::PortfolioState* p = state->mutable_portfolio();
  for (size_t i = 0; i < candidates_.size(); ++i) {
    proto::PortfolioCandidate* c = p->add_candidates();
    c->set_name(ChoiceName(candidates_[i]));
    c->set_gain(gains_[i]);
    c->set_has_gain(has_gain_[i]);
    c->set_throughput_sum(tc_[i].sum);
    c->set_throughput_count(tc_[i].count);
    c->set_bytes_sum(bytes_[i].sum);
    c->set_bytes_count(bytes_[i].count);
    c->set_bounded(bounded_[i]);
  }
  p->set_current(current_);
  for (int q : queue_) p->add_queue(q);
  p->set_trying(trying_);
  p->set_trial_left(trial_left_);
  p->set_last_sent(last_sent_);
  p->set_pick_after_trials(pick_after_trials_);
  p->set_last_decided(last_decided_);
  p->set_pending_send(pending_send_);
  p->set_streak(streak_);
  p->set_reason(last_reason_);
}

absl::Status PortfolioPolicy::RestoreState(const proto::PolicyState& state) {
  if (state.kind() != "portfolio") {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot restore a '", state.kind(), "' policy state into portfolio"));
  }
  const proto::PortfolioState& p = state.portfolio();
  const int k = static_cast<int>(candidates_.size());
  if (p.candidates_size() != k) {
    return absl::InvalidArgumentError(
        absl::StrCat("portfolio state has ", p.candidates_size(),
                     " candidates, ", "TERSE_GRAVAC_CANDIDATES gives ", k));
  }
  for (int i = 0; i < k; ++i) {
    if (p.candidates(i).name() != ChoiceName(candidates_[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "portfolio state's candidate ", i, " is '", p.candidates(i).name(),
          "', TERSE_GRAVAC_CANDIDATES gives '", ChoiceName(candidates_[i]),
          "'"));
    }
  }
  auto in_range = [k](int64_t x) { return x >= -1 && x < k; };
  if (p.current() < 0 || p.current() >= k || !in_range(p.trying()) ||
      !in_range(p.last_sent()) || !in_range(p.last_decided()) ||
      !in_range(p.pending_send()) || p.trial_left() < 0 || p.streak() < 0 ||
      state.decisions() < 0 || state.step() < 0) {
    return absl::InvalidArgumentError("portfolio policy state is inconsistent");
  }
  for (int q : p.queue()) {
    if (q < 0 || q >= k) {
      return absl::InvalidArgumentError(
          "portfolio policy state is inconsistent (queue)");
    }
  }
  for (int i = 0; i < k; ++i) {
    gains_[i] = p.candidates(i).gain();
    has_gain_[i] = i == 0 || p.candidates(i).has_gain();
    tc_[i] = RunningMean{p.candidates(i).throughput_sum(),
                         p.candidates(i).throughput_count()};
    bytes_[i] =
        RunningMean{p.candidates(i).bytes_sum(), p.candidates(i).bytes_count()};
    bounded_[i] = i > 0 && p.candidates(i).bounded();
  }
  observed_ = state.step();
  decisions_ = state.decisions();
  current_ = p.current();
  queue_.assign(p.queue().begin(), p.queue().end());
  trying_ = p.trying();
  trial_left_ = p.trial_left();
  last_sent_ = p.last_sent();
  pick_after_trials_ = p.pick_after_trials();
  last_decided_ = p.last_decided();
  pending_send_ = p.pending_send();
  streak_ = p.streak();
  last_reason_ = p.reason();
  return absl::OkStatus();
}

}  // namespace gravac
}  // namespace terse
