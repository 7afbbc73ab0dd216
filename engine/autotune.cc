#include "engine/autotune.h"

#include <algorithm>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/status.h"

namespace terse {
namespace {

// The start's value first (the configured setting is measured first), then
// the rest of the grid in increasing order, without duplicates.
template <typename T>
std::vector<T> Ordered(std::vector<T> grid, T start) {
  grid.erase(std::remove(grid.begin(), grid.end(), start), grid.end());
  std::sort(grid.begin(), grid.end());
  grid.erase(std::unique(grid.begin(), grid.end()), grid.end());
  grid.insert(grid.begin(), start);
  return grid;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string Show(const AutotuneSetting& s) {
  return absl::StrFormat("fusion threshold %d bytes, cycle time %g ms",
                         s.fusion_threshold_bytes, s.cycle_time_ms);
}

}  // namespace

AutotuneOptions DefaultAutotuneOptions(const Config& config) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  AutotuneOptions o;
  o.thresholds_bytes = {0, 1 * kMiB, 4 * kMiB, 16 * kMiB, 64 * kMiB,
                        128 * kMiB};
  o.cycle_times_ms = {0.5, 1, 2.5, 5};
  o.warmup_samples = static_cast<int>(config.autotune_warmup_samples);
  o.samples = static_cast<int>(config.autotune_samples);
  return o;
}

Autotuner::Autotuner(const AutotuneSetting& start, AutotuneOptions options)
    : options_(std::move(options)), start_(start) {
  options_.thresholds_bytes =
      Ordered(options_.thresholds_bytes, start.fusion_threshold_bytes);
  options_.cycle_times_ms =
      Ordered(options_.cycle_times_ms, start.cycle_time_ms);
  options_.warmup_samples = std::max(options_.warmup_samples, 0);
  options_.samples = std::max(options_.samples, 1);
  next_ = 1;  // The start is grid entry 0 of both phases.
  Start(start);
}

void Autotuner::Start(const AutotuneSetting& setting) {
  current_ = setting;
  warmup_left_ = options_.warmup_samples;
  samples_.clear();
}

const AutotuneTrial* Autotuner::Find(const AutotuneSetting& setting) const {
  for (const AutotuneTrial& t : trials_) {
    if (t.setting == setting) return &t;
  }
  return nullptr;
}

bool Autotuner::Observe(double throughput) {
  if (done_) return false;
  if (warmup_left_ > 0) {
    --warmup_left_;
    return false;
  }
  samples_.push_back(throughput);
  if (static_cast<int>(samples_.size()) < options_.samples) return false;
  if (phase_ == 2) {
    // A finalist's second measurement decides.
    AutotuneTrial& t = trials_[confirm_[next_ - 1]];
    t.samples.insert(t.samples.end(), samples_.begin(), samples_.end());
    t.score = Median(samples_);
  } else {
    trials_.push_back(AutotuneTrial{current_, Median(samples_), samples_});
  }
  const AutotuneSetting before = current_;
  if (!Advance()) {
    // The better confirmed pair; the earliest tried wins a tie.
    const AutotuneTrial* best = &trials_[confirm_.front()];
    for (size_t i : confirm_) {
      if (trials_[i].score > best->score ||
          (trials_[i].score == best->score && &trials_[i] < best)) {
        best = &trials_[i];
      }
    }
    current_ = best->setting;
    warmup_left_ = 0;
    done_ = true;
  }
  return !(current_ == before);
}

bool Autotuner::Advance() {
  if (phase_ == 0) {
    while (next_ < options_.thresholds_bytes.size()) {
      const AutotuneSetting c{options_.thresholds_bytes[next_++],
                              start_.cycle_time_ms};
      if (Find(c) == nullptr) {
        Start(c);
        return true;
      }
    }
    phase_ = 1;
    next_ = 0;
  }
  // The best threshold of the first phase (all at the start's cycle time).
  const AutotuneTrial* best = &trials_.front();
  for (const AutotuneTrial& t : trials_) {
    if (t.setting.cycle_time_ms == start_.cycle_time_ms &&
        t.score > best->score) {
      best = &t;
    }
  }
  const int64_t threshold = best->setting.fusion_threshold_bytes;
  if (phase_ == 1) {
    while (next_ < options_.cycle_times_ms.size()) {
      const AutotuneSetting c{threshold, options_.cycle_times_ms[next_++]};
      if (Find(c) == nullptr) {
        Start(c);
        return true;
      }
    }
    // Confirmation: the two best so far (earliest first among equals), in
    // the order they were tried.
    std::vector<size_t> order(trials_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return trials_[a].score > trials_[b].score;
    });
    order.resize(std::min<size_t>(order.size(), 2));
    std::sort(order.begin(), order.end());
    confirm_ = order;
    phase_ = 2;
    next_ = 0;
  }
  if (next_ < confirm_.size()) {
    Start(trials_[confirm_[next_++]].setting);
    return true;
  }
  return false;
}

absl::StatusOr<std::unique_ptr<AutotuneSession>> AutotuneSession::Create(
    const Config& config, Communicator* comm) {
  auto session = std::make_unique<AutotuneSession>(
      config, DefaultAutotuneOptions(config), comm);
  if (!config.autotune_log.empty() && comm->rank() == 0) {
    session->log_ = std::make_unique<std::ofstream>(config.autotune_log);
    if (!*session->log_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "TERSE_AUTOTUNE_LOG='", config.autotune_log,
          "': cannot open the file for writing"));
    }
    *session->log_ << "sample,fusion_threshold_bytes,cycle_time_ms,warmup,"
                      "steps,bytes,seconds,throughput_bytes_per_s\n";
    session->log_->flush();
  }
  return session;
}

AutotuneSession::AutotuneSession(const Config& config, AutotuneOptions options,
                                 Communicator* comm)
    : steps_per_sample_(
          static_cast<int>(std::max<int64_t>(config.autotune_steps_per_sample,
                                             1))),
      comm_(comm),
      tuner_(AutotuneSetting{config.fusion_threshold_bytes,
                             config.cycle_time_ms},
             std::move(options)),
      applied_threshold_(config.fusion_threshold_bytes) {}

void AutotuneSession::Log(const std::string& line) {
  if (comm_->rank() != 0) return;
  TERSE_LOG(Info) << "autotune: " << line;
}

absl::Status AutotuneSession::AfterCycle(int64_t steps, int64_t bytes,
                                         Clock::time_point now,
                                         const Regroup& regroup) {
  switch (state_) {
    case State::kDone:
      return absl::OkStatus();
    case State::kApplying: {
      const int64_t want = tuner_.current().fusion_threshold_bytes;
      if (!regroup(want)) return absl::OkStatus();
      applied_threshold_ = want;
      state_ = tuner_.done() ? State::kDone : State::kArming;
      mark_steps_ = steps;
      return absl::OkStatus();
    }
    case State::kArming:
      if (mark_steps_ < 0) mark_steps_ = steps;
      if (steps > mark_steps_) {
        state_ = State::kMeasuring;
        start_time_ = now;
        start_steps_ = steps;
        start_bytes_ = bytes;
      }
      return absl::OkStatus();
    case State::kMeasuring:
      break;
  }
  if (steps - start_steps_ < steps_per_sample_) return absl::OkStatus();
  // The end of a sample, in the same cycle on every rank.
  double seconds = SecondsBetween(start_time_, now);
  TERSE_RETURN_IF_ERROR(comm_->Allreduce(&seconds, 1, DataType::kFloat64,
                                         ReduceOp::kSum));
  seconds /= comm_->size();
  const int64_t moved = bytes - start_bytes_;
  const double throughput = moved / std::max(seconds, 1e-9);
  const AutotuneSetting measured = tuner_.current();
  const bool warmup = tuner_.warmup_left() > 0;
  ++sample_;
  Log(absl::StrFormat("sample %d: %s%s: %d steps, %d bytes in %.6f s "
                      "(rank average), %.4g bytes/s",
                      sample_, Show(measured), warmup ? " (warm-up)" : "",
                      steps - start_steps_, moved, seconds, throughput));
  if (log_ != nullptr) {
    *log_ << absl::StrFormat("%d,%d,%g,%d,%d,%d,%.9f,%.6g\n", sample_,
                             measured.fusion_threshold_bytes,
                             measured.cycle_time_ms, warmup ? 1 : 0,
                             steps - start_steps_, moved, seconds, throughput);
    log_->flush();
  }
  tuner_.Observe(throughput);
  if (tuner_.done()) {
    const AutotuneSetting& best = tuner_.current();
    Log(absl::StrCat("chose ", Show(best), " after ", sample_, " samples"));
    if (log_ != nullptr) {
      *log_ << absl::StrFormat("final,%d,%g,,,,,\n",
                               best.fusion_threshold_bytes, best.cycle_time_ms);
      log_->flush();
    }
  }
  const bool regroup_needed =
      tuner_.current().fusion_threshold_bytes != applied_threshold_;
  if (regroup_needed) {
    state_ = State::kApplying;
    return AfterCycle(steps, bytes, now, regroup);  // Try at once.
  }
  if (tuner_.done()) {
    state_ = State::kDone;
    return absl::OkStatus();
  }
  // The same threshold: the next sample starts at this step boundary (a new
  // cycle time takes effect from the next cycle).
  start_time_ = now;
  start_steps_ = steps;
  start_bytes_ = bytes;
  return absl::OkStatus();
}

}  // namespace terse
