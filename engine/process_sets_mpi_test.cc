// The process-set scenarios (engine_testing.h, ProcessSetScenarios) on 4 MPI
// ranks: run under mpirun (engine:process_sets_mpi_np4_test); each rank
// runs the same cases in the same order, each with a fresh registry and
// engine.
#include <memory>
#include <string>

#include "collectives/registry.h"
#include "common/status.h"
#include "engine/engine_testing.h"
#include "gtest/gtest.h"

namespace terse {
namespace testing {
namespace {

absl::Status RunOnMpi(const Scenario& scenario) {
  const Config config = ScenarioConfig(scenario);
  TERSE_ASSIGN_OR_RETURN(std::unique_ptr<CommunicatorRegistry> registry,
                         CommunicatorRegistry::Create(config));
  TERSE_ASSIGN_OR_RETURN(
      std::unique_ptr<Engine> engine,
      Engine::Create(config, registry.get(), scenario.options));
  const int rank = engine->rank();
  return FinishScenario(scenario, rank, std::move(engine));
}

class ProcessSetsMpiTest : public ::testing::TestWithParam<Scenario> {};

TEST_P(ProcessSetsMpiTest, Runs) {
  absl::Status status = RunOnMpi(GetParam());
  EXPECT_TRUE(status.ok()) << status;
}

INSTANTIATE_TEST_SUITE_P(Scenarios, ProcessSetsMpiTest,
                         ::testing::ValuesIn(ProcessSetScenarios()),
                         [](const ::testing::TestParamInfo<Scenario>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace testing
}  // namespace terse
