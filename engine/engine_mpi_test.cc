// Every engine scenario (engine_testing.h) on MPI ranks: run under mpirun
// (engine:engine_mpi_np2_test / _np4_test); each rank runs the same gtest
// cases in the same order, each case with a fresh registry and engine.
#include <memory>
#include <string>
#include <vector>

#include "collectives/registry.h"
#include "common/status.h"
#include "engine/engine_testing.h"
#include "gtest/gtest.h"

namespace terse {
namespace testing {
namespace {

std::vector<Scenario> All() {
  std::vector<Scenario> all = CorrectnessScenarios();
  for (Scenario& s : ErrorScenarios()) all.push_back(std::move(s));
  for (Scenario& s : GroupScenarios()) all.push_back(std::move(s));
  for (Scenario& s : CompressionScenarios()) all.push_back(std::move(s));
  for (Scenario& s : ExchangeScenarios()) all.push_back(std::move(s));
  return all;
}

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

class EngineMpiTest : public ::testing::TestWithParam<Scenario> {};

TEST_P(EngineMpiTest, Runs) {
  absl::Status status = RunOnMpi(GetParam());
  EXPECT_TRUE(status.ok()) << status;
}

INSTANTIATE_TEST_SUITE_P(Scenarios, EngineMpiTest, ::testing::ValuesIn(All()),
                         [](const ::testing::TestParamInfo<Scenario>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace testing
}  // namespace terse
