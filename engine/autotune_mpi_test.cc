// TERSE_AUTOTUNE through the engine on MPI ranks (run under mpirun:
// engine:autotune_mpi_np2_test / _np4_test): after a fixed number of steps
// every rank's search is over, the ranks chose the same setting, and every
// sum on the way was right. Also the session's agreement over MPI: ranks
// with different clocks end with the rank-averaged best.
#include <memory>
#include <vector>

#include "collectives/registry.h"
#include "common/status.h"
#include "engine/autotune.h"
#include "engine/autotune_testing.h"
#include "gtest/gtest.h"

namespace terse {
namespace testing {
namespace {

TEST(AutotuneMpiTest, EngineRanksConvergeAlike) {
  const Scenario scenario = AutotuneScenario();
  const Config config = ScenarioConfig(scenario);
  absl::StatusOr<std::unique_ptr<CommunicatorRegistry>> registry =
      CommunicatorRegistry::Create(config);
  ASSERT_TRUE(registry.ok()) << registry.status();
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create(config, registry->get(), scenario.options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const int rank = (*engine)->rank();
  absl::Status status = FinishScenario(scenario, rank, *std::move(engine));
  EXPECT_TRUE(status.ok()) << status;
}

TEST(AutotuneMpiTest, SessionsAgreeOnTheRankAveragedBest) {
  Config config = Config::Defaults();
  config.autotune = true;
  config.autotune_steps_per_sample = 2;
  config.autotune_warmup_samples = 0;
  config.autotune_samples = 1;
  absl::StatusOr<std::unique_ptr<CommunicatorRegistry>> registry =
      CommunicatorRegistry::Create(config);
  ASSERT_TRUE(registry.ok()) << registry.status();
  Communicator* comm = (*registry)->control();
  const AutotuneOptions grid = DefaultAutotuneOptions(config);
  AutotuneSession session(config, grid, comm);
  int64_t steps = 0, threshold = config.fusion_threshold_bytes;
  Clock::time_point now{};
  for (int cycle = 0; cycle < 500 && !session.tuner().done(); ++cycle) {
    now += std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(SyntheticStepSeconds(
            AutotuneSetting{threshold, session.cycle_time_ms()},
            comm->rank())));
    ++steps;
    ASSERT_TRUE(session
                    .AfterCycle(steps, steps * 1000, now,
                                [&](int64_t t) {
                                  threshold = t;
                                  return true;
                                })
                    .ok());
  }
  ASSERT_TRUE(session.tuner().done());
  // The oracle: the grid's best for the mean over ranks of the step time.
  AutotuneSetting best;
  double least = 1e300;
  for (int64_t t : grid.thresholds_bytes) {
    for (double c : grid.cycle_times_ms) {
      double sum = 0;
      for (int r = 0; r < comm->size(); ++r) {
        sum += SyntheticStepSeconds({t, c}, r);
      }
      if (sum < least) least = sum, best = {t, c};
    }
  }
  EXPECT_EQ(session.tuner().current(), best);
  EXPECT_EQ(threshold, best.fusion_threshold_bytes);
}

}  // namespace
}  // namespace testing
}  // namespace terse
