// Test helpers for TERSE_AUTOTUNE: synthetic throughputs, and an engine
// scenario that runs on loopback ranks (autotune_test) and under mpirun
// (autotune_mpi_test).
#ifndef TERSE_ENGINE_AUTOTUNE_TESTING_H_
#define TERSE_ENGINE_AUTOTUNE_TESTING_H_

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/config.h"
#include "common/status.h"
#include "engine/autotune.h"
#include "engine/engine.h"
#include "engine/engine_testing.h"

namespace terse {
namespace testing {

// A step time (seconds) of setting `s` as seen by `rank`: rank r alone
// would prefer a fusion threshold of 2^r MiB, so ranks that decided on their
// own measurements would disagree; all prefer a 2.5 ms cycle.
inline double SyntheticStepSeconds(const AutotuneSetting& s, int rank) {
  const double mib = s.fusion_threshold_bytes / double(1 << 20);
  const double x = mib > 0 ? std::log2(mib) : -4.0;
  const double cycle = s.cycle_time_ms - 2.5;
  return 0.1 + 0.01 * (x - rank) * (x - rank) + 0.002 * cycle * cycle;
}

// One step: allreduce (Sum) of one float tensor per entry of `sizes`,
// every sum checked against the closed form.
inline absl::Status AutotuneStep(int rank, Engine& engine,
                                 const std::vector<int64_t>& sizes) {
  std::vector<std::vector<float>> t(sizes.size());
  std::vector<Handle> h(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    t[i].resize(sizes[i]);
    for (int64_t j = 0; j < sizes[i]; ++j) t[i][j] = float(rank + 1 + j % 7);
    TensorView v(t[i].data(), sizes[i], DataType::kFloat32);
    TERSE_ASSIGN_OR_RETURN(h[i], engine.AllreduceAsync(absl::StrCat("at", i),
                                                       v, v, {sizes[i]},
                                                       ReduceOp::kSum));
  }
  const int n = engine.size();
  for (size_t i = 0; i < sizes.size(); ++i) {
    TERSE_RETURN_IF_ERROR(engine.Wait(h[i]));
    for (int64_t j = 0; j < sizes[i]; ++j) {
      const float want = float(n * (n + 1) / 2 + n * (j % 7));
      if (t[i][j] != want) {
        return absl::InternalError(absl::StrCat("rank ", rank, ": tensor ", i,
                                                "[", j, "] = ", t[i][j],
                                                ", want ", want));
      }
    }
  }
  return absl::OkStatus();
}

// The engine with TERSE_AUTOTUNE on: a fixed number of steps of 48 small
// tensors (sums checked), after which every rank's search is over and all
// chose the same setting (compared through the engine: Min and Max).
inline Scenario AutotuneScenario() {
  Scenario s;
  s.name = "Autotune";
  s.configure = [](Config* c) {
    c->autotune = true;
    c->autotune_steps_per_sample = 1;
    c->autotune_warmup_samples = 0;
    c->autotune_samples = 1;
  };
  s.body = [](int rank, Engine& engine) -> absl::Status {
    std::vector<int64_t> sizes(48);
    for (int t = 0; t < 48; ++t) sizes[t] = 1 + (t * 53) % 700;
    // 6 thresholds, 3 more cycle times and 2 confirmations, one sample
    // each; a change waits for the next step boundary, so about 2 steps per
    // setting. The threshold-0 trial (every tensor alone, 48 buckets)
    // shows the regroup took effect.
    int64_t most_buckets = 0;
    for (int step = 0; step < 40; ++step) {
      TERSE_RETURN_IF_ERROR(AutotuneStep(rank, engine, sizes));
      most_buckets = std::max(most_buckets, engine.stats().buckets);
    }
    TERSE_RETURN_IF_ERROR(Expect(
        most_buckets >= 48, absl::StrCat("rank ", rank, ": at most ",
                                         most_buckets, " buckets: no regroup "
                                         "to threshold 0")));
    const EngineStats stats = engine.stats();
    TERSE_RETURN_IF_ERROR(Expect(
        stats.autotune_done, absl::StrCat("rank ", rank, ": autotune not done "
                                          "after 40 steps")));
    double lo[2] = {double(stats.autotune_threshold_bytes),
                    stats.autotune_cycle_time_ms};
    double hi[2] = {lo[0], lo[1]};
    TensorView vlo(lo, 2, DataType::kFloat64), vhi(hi, 2, DataType::kFloat64);
    TERSE_ASSIGN_OR_RETURN(
        Handle a, engine.AllreduceAsync("choice.min", vlo, vlo, {2},
                                        ReduceOp::kMin));
    TERSE_ASSIGN_OR_RETURN(
        Handle b, engine.AllreduceAsync("choice.max", vhi, vhi, {2},
                                        ReduceOp::kMax));
    TERSE_RETURN_IF_ERROR(engine.Wait(a));
    TERSE_RETURN_IF_ERROR(engine.Wait(b));
    return Expect(lo[0] == hi[0] && lo[1] == hi[1],
                  absl::StrCat("rank ", rank, ": ranks chose different "
                               "settings: threshold ", lo[0], "..", hi[0],
                               ", cycle ", lo[1], "..", hi[1], " ms"));
  };
  return s;
}

}  // namespace testing
}  // namespace terse

#endif  // TERSE_ENGINE_AUTOTUNE_TESTING_H_
