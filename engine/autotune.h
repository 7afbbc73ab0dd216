// Autotune (TERSE_AUTOTUNE, Horovod's HOROVOD_AUTOTUNE): the engine tunes
// its fusion threshold and cycle time online, from the throughput it
// measures (bytes reduced per second over windows of training steps).
//
// Two parts:
//
// Autotuner, the search (no clock, no communication): coordinate descent over
// a grid. First every fusion threshold of the grid at the configured cycle
// time, then every cycle time of the grid at the best threshold so far (the
// pair measured in the first phase is not measured again); then the two
// best pairs so far are measured once more, one after the other, and the
// better of them in this second measurement is the result (the two
// finalists are compared under the same conditions, and one lucky
// measurement on a noisy machine does not decide alone). Each candidate's score is the median of
// its samples after its warm-up samples are dropped (the first steps after
// a change pay for new buckets and buffers). The search is a pure function of the
// samples fed to it, so ranks fed the same samples make the same choices.
//
// AutotuneSession, the measurement: called by the engine's background
// thread after every cycle of the global process set. A sample is
// `steps_per_sample` training steps from one step boundary to another,
// steps counted as Horovod counts them (a step ends when a tensor is
// reduced a second time; BucketExecutor::steps_run: every rank runs the
// same buckets in the same order, so every rank sees a step end in the same
// cycle); its bytes are those of the allreduce buckets run in it (the same
// on every rank). At the
// end of a sample every rank contributes its elapsed time to one allreduce
// (Sum, float64) on the control communicator, so all ranks score the
// rank-averaged throughput, feed the same number to their Autotuner and
// agree on every choice without a message of their own. A new fusion
// threshold takes effect through `regroup` (the buckets are formed afresh;
// it refuses while a bucket holds ready members, and is asked again after
// the next cycle; this too is decided by negotiated state, identically on
// every rank); the sample after a change starts at the next step boundary.
//
// Every finished sample and the final choice are logged at info level on
// rank 0 and, with TERSE_AUTOTUNE_LOG, written by rank 0 to that file as
// CSV rows.
//
// A workload whose tensor names never repeat (every op under a fresh name)
// has no steps and is never tuned: it keeps the configured setting.
//
// Only the global process set is tuned; other sets keep the configured
// threshold. Regrouping drops per-bucket state as any change of a bucket's
// members does (compressed buckets lose their error-feedback residual then).
//
// Not thread-safe: the engine's background thread only.
#ifndef TERSE_ENGINE_AUTOTUNE_H_
#define TERSE_ENGINE_AUTOTUNE_H_

#include <cstdint>
#include <functional>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "collectives/communicator.h"
#include "common/config.h"
#include "engine/types.h"

namespace terse {

struct AutotuneSetting {
  int64_t fusion_threshold_bytes = 0;
  double cycle_time_ms = 0;
  bool operator==(const AutotuneSetting& o) const {
    return fusion_threshold_bytes == o.fusion_threshold_bytes &&
           cycle_time_ms == o.cycle_time_ms;
  }
};

struct AutotuneOptions {
  // The grids (any order; duplicates are dropped, the start's values added).
  std::vector<int64_t> thresholds_bytes;
  std::vector<double> cycle_times_ms;
  int warmup_samples = 1;  // Dropped after every change, >= 0.
  int samples = 2;         // Scored per candidate, >= 1.
};

// The grids TERSE_AUTOTUNE searches: 1, 4, 16, 64 and 128 MiB and 0 (every
// tensor alone); cycle times 0.5, 1, 2.5 and 5 ms.
AutotuneOptions DefaultAutotuneOptions(const Config& config);

struct AutotuneTrial {
  AutotuneSetting setting;
  // Median throughput of its samples, bytes/s (of its second measurement
  // for a finalist, see above).
  double score = 0;
  std::vector<double> samples;  // All, in order.
};

class Autotuner {
 public:
  Autotuner(const AutotuneSetting& start, AutotuneOptions options);

  // The setting to run now (the best one once done()).
  const AutotuneSetting& current() const { return current_; }
  bool done() const { return done_; }
  // Candidates scored so far, in the order they were first tried.
  const std::vector<AutotuneTrial>& trials() const { return trials_; }
  // Warm-up samples still to drop for current() (0 when measuring).
  int warmup_left() const { return warmup_left_; }

  // One sample of current(), bytes per second. Returns true when current()
  // changed (the next candidate, or the final choice). Ignored once done().
  bool Observe(double throughput);

 private:
  void Start(const AutotuneSetting& setting);
  // The next candidate not measured yet, or false at the end of the search.
  bool Advance();
  const AutotuneTrial* Find(const AutotuneSetting& setting) const;

  AutotuneOptions options_;
  AutotuneSetting start_;
  AutotuneSetting current_;
  int phase_ = 0;       // 0: thresholds, 1: cycle times, 2: confirmation.
  size_t next_ = 0;     // Next grid index of the phase.
  int warmup_left_ = 0;
  std::vector<double> samples_;
  std::vector<AutotuneTrial> trials_;
  std::vector<size_t> confirm_;  // Phase 2: indices into trials_.
  bool done_ = false;
};

class AutotuneSession {
 public:
  // Applies a fusion threshold to the global set's buckets; false while it
  // cannot yet (a bucket holds ready members).
  using Regroup = std::function<bool(int64_t threshold_bytes)>;

  // `comm`: the control communicator (not owned), used from the engine's
  // background thread. The search starts at the configured threshold and
  // cycle time. An unwritable TERSE_AUTOTUNE_LOG is an error of Create.
  static absl::StatusOr<std::unique_ptr<AutotuneSession>> Create(
      const Config& config, Communicator* comm);
  AutotuneSession(const Config& config, AutotuneOptions options,
                  Communicator* comm);

  // After a cycle of the global set: `steps` (BucketExecutor::steps_run()) and
  // `bytes` (allreduce bytes run so far) are the same on every rank at this
  // cycle. Collective at the end of a sample (every rank reaches it in the
  // same cycle). An error is the communicator's.
  absl::Status AfterCycle(int64_t steps, int64_t bytes, Clock::time_point now,
                          const Regroup& regroup);

  // The cycle time to run with now.
  double cycle_time_ms() const { return tuner_.current().cycle_time_ms; }
  const Autotuner& tuner() const { return tuner_; }

 private:
  enum class State { kApplying, kArming, kMeasuring, kDone };
  void Log(const std::string& line);

  const int steps_per_sample_;
  Communicator* const comm_;
  Autotuner tuner_;
  std::unique_ptr<std::ofstream> log_;
  State state_ = State::kArming;
  int64_t applied_threshold_;
  int64_t mark_steps_ = -1;  // kArming: the step to leave.
  int64_t start_steps_ = 0;
  int64_t start_bytes_ = 0;
  Clock::time_point start_time_;
  int64_t sample_ = 0;
};

}  // namespace terse

#endif  // TERSE_ENGINE_AUTOTUNE_H_
