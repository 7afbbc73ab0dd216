#include "engine/autotune.h"

#include <limits>
#include <memory>
#include <vector>

#include "collectives/loopback/loopback.h"
#include "engine/autotune_testing.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

AutotuneOptions Grid(int warmup, int samples) {
  AutotuneOptions o;
  o.thresholds_bytes = {0, kMiB, 4 * kMiB, 16 * kMiB, 64 * kMiB, 128 * kMiB};
  o.cycle_times_ms = {0.5, 1, 2.5, 5};
  o.warmup_samples = warmup;
  o.samples = samples;
  return o;
}

// The oracle: the best setting of the whole grid, by brute force.
AutotuneSetting BruteForce(const AutotuneOptions& o,
                           double (*score)(const AutotuneSetting&)) {
  AutotuneSetting best;
  double top = -std::numeric_limits<double>::infinity();
  for (int64_t t : o.thresholds_bytes) {
    for (double c : o.cycle_times_ms) {
      const AutotuneSetting s{t, c};
      if (score(s) > top) top = score(s), best = s;
    }
  }
  return best;
}

double Separable(const AutotuneSetting& s) {
  const double mib = s.fusion_threshold_bytes / double(kMiB);
  const double x = mib > 0 ? std::log2(mib) : -4;
  return 1e9 - 1e7 * (x - 4) * (x - 4) - 1e6 * (s.cycle_time_ms - 2.5) *
                                             (s.cycle_time_ms - 2.5);
}

TEST(AutotunerTest, ConvergesToTheGridArgmaxAndDropsWarmup) {
  const AutotuneOptions grid = Grid(/*warmup=*/2, /*samples=*/3);
  Autotuner tuner(AutotuneSetting{64 * kMiB, 1}, grid);
  int fed = 0;
  while (!tuner.done() && fed < 1000) {
    // Warm-up samples are absurd: were they scored, 0 bytes would win.
    const bool warm = tuner.warmup_left() > 0;
    const double x = warm && tuner.current().fusion_threshold_bytes == 0
                         ? 1e30
                         : Separable(tuner.current());
    tuner.Observe(x);
    ++fed;
  }
  ASSERT_TRUE(tuner.done());
  EXPECT_EQ(tuner.current(), BruteForce(grid, Separable));
  EXPECT_EQ(tuner.current(), (AutotuneSetting{16 * kMiB, 2.5}));
  // 6 thresholds, then the 3 cycle times not measured yet, then the best
  // two again; 5 samples each.
  EXPECT_EQ(tuner.trials().size(), 9u);
  EXPECT_EQ(fed, (9 + 2) * 5);
  // The configured setting is measured first.
  EXPECT_EQ(tuner.trials().front().setting, (AutotuneSetting{64 * kMiB, 1}));
  EXPECT_FALSE(tuner.Observe(0));  // Done: ignored.
  EXPECT_EQ(tuner.current(), (AutotuneSetting{16 * kMiB, 2.5}));
}

TEST(AutotunerTest, AStartOffTheGridIsMeasuredAndCanWin) {
  const AutotuneOptions grid = Grid(0, 1);
  Autotuner tuner(AutotuneSetting{3 * kMiB, 0.75}, grid);
  while (!tuner.done()) {
    const AutotuneSetting s = tuner.current();
    tuner.Observe(s.fusion_threshold_bytes == 3 * kMiB && s.cycle_time_ms == 0.75
                      ? 2.0
                      : 1.0);
  }
  EXPECT_EQ(tuner.current(), (AutotuneSetting{3 * kMiB, 0.75}));
  EXPECT_EQ(tuner.trials().size(), 7u + 4u);
}

// A setting that won its first measurement by luck loses the confirmation.
TEST(AutotunerTest, ConfirmationOverrulesOneLuckySample) {
  Autotuner tuner(AutotuneSetting{64 * kMiB, 1}, Grid(0, 1));
  int seen_16 = 0;
  while (!tuner.done()) {
    const AutotuneSetting s = tuner.current();
    double x = 1.0;
    if (s == AutotuneSetting{16 * kMiB, 1}) x = ++seen_16 == 1 ? 9.0 : 0.5;
    if (s == AutotuneSetting{4 * kMiB, 1}) x = 2.0;
    tuner.Observe(x);
  }
  EXPECT_EQ(seen_16, 2);
  EXPECT_EQ(tuner.current(), (AutotuneSetting{4 * kMiB, 1}));
}

TEST(AutotunerTest, TiesGoToTheEarliestTried) {
  Autotuner tuner(AutotuneSetting{64 * kMiB, 1}, Grid(0, 1));
  while (!tuner.done()) tuner.Observe(5.0);
  EXPECT_EQ(tuner.current(), (AutotuneSetting{64 * kMiB, 1}));
}

// Four loopback ranks, each with a different synthetic clock: every rank
// ends with the setting that is best for the ranks' average step time, not
// the one its own times favour, and after the same samples.
TEST(AutotuneSessionTest, RanksAgreeOnTheRankAveragedBest) {
  constexpr int kSize = 4;
  Config config = Config::Defaults();
  config.autotune = true;
  config.autotune_steps_per_sample = 3;
  config.autotune_warmup_samples = 1;
  config.autotune_samples = 2;
  const AutotuneOptions grid = DefaultAutotuneOptions(config);
  std::vector<AutotuneSetting> chosen(kSize);
  std::vector<size_t> trials(kSize);
  std::vector<int> refusals(kSize, 0);
  absl::Status status = RunLoopbackRanks(kSize, [&](int rank,
                                                    Communicator* comm) {
    AutotuneSession session(config, grid, comm);
    int64_t steps = 0, bytes = 0, threshold = config.fusion_threshold_bytes;
    Clock::time_point now{};
    bool refused = false;
    for (int cycle = 0; cycle < 2000 && !session.tuner().done(); ++cycle) {
      // One step per cycle, 1 MB each, at this rank's synthetic speed
      // under the applied threshold and the session's cycle time.
      now += std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(testing::SyntheticStepSeconds(
              AutotuneSetting{threshold, session.cycle_time_ms()}, rank)));
      ++steps;
      bytes += 1000000;
      TERSE_RETURN_IF_ERROR(session.AfterCycle(
          steps, bytes, now, [&](int64_t t) {
            // Refuse the first regroup once (a bucket still partly ready):
            // the same on every rank, as negotiated state is.
            if (!refused) {
              refused = true;
              ++refusals[rank];
              return false;
            }
            threshold = t;
            return true;
          }));
    }
    chosen[rank] = session.tuner().current();
    trials[rank] = session.tuner().trials().size();
    return session.tuner().done() && threshold == chosen[rank].fusion_threshold_bytes
               ? absl::OkStatus()
               : absl::InternalError("not done, or threshold not applied");
  });
  ASSERT_TRUE(status.ok()) << status;
  // The oracle: the grid's best setting for the mean step time.
  auto mean_speed = [](const AutotuneSetting& s) {
    double sum = 0;
    for (int r = 0; r < kSize; ++r) sum += testing::SyntheticStepSeconds(s, r);
    return kSize / sum;
  };
  AutotuneSetting best;
  double top = 0;
  for (int64_t t : grid.thresholds_bytes) {
    for (double c : grid.cycle_times_ms) {
      if (mean_speed({t, c}) > top) top = mean_speed({t, c}), best = {t, c};
    }
  }
  EXPECT_EQ(best, (AutotuneSetting{4 * kMiB, 2.5}));
  for (int r = 0; r < kSize; ++r) {
    EXPECT_EQ(chosen[r], best) << "rank " << r;
    EXPECT_EQ(trials[r], trials[0]) << "rank " << r;
    EXPECT_EQ(refusals[r], 1) << "rank " << r;
  }
}

TEST(AutotuneSessionTest, AnUnwritableLogIsAnErrorNamingTheVariable) {
  Config config = Config::Defaults();
  config.autotune = true;
  config.autotune_log = "/nonexistent-dir/tune.csv";
  absl::Status status = RunLoopbackRanks(1, [&](int, Communicator* comm) {
    return AutotuneSession::Create(config, comm).status();
  });
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("TERSE_AUTOTUNE_LOG='/nonexistent-dir"),
            std::string::npos)
      << status;
}

TEST(AutotuneEngineTest, FourLoopbackRanksConvergeAlikeWithCorrectSums) {
  absl::Status status = testing::RunOnLoopback(4, testing::AutotuneScenario());
  EXPECT_TRUE(status.ok()) << status;
}

}  // namespace
}  // namespace terse
