// The device scenarios (device_scenarios.h) on MPI ranks, each rank with
// its own simulated device moved by the sim backend over MPI: run under
// mpirun (engine:engine_device_mpi_np2_test).
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "collectives/registry.h"
#include "collectives/sim_communicator.h"
#include "common/status.h"
#include "device/sim_runtime.h"
#include "engine/device_scenarios.h"
#include "gtest/gtest.h"

namespace terse {
namespace testing {
namespace {

struct Devices {
  Devices() { runtimes.Register(&sim).IgnoreError(); }
  // The engine's streams run each piece of work 2 ms late.
  SimRuntime sim{SimOptions{std::chrono::milliseconds(2), 16}};
  DeviceRuntimes runtimes;
};

Devices& TheDevices() {
  static Devices* devices = new Devices();
  return *devices;
}

absl::Status RunOnMpi(const Scenario& scenario) {
  const Config config = ScenarioConfig(scenario);
  BackendTable table = BuiltinBackends();
  TERSE_RETURN_IF_ERROR(RegisterSimBackend(&table, &TheDevices().sim));
  TERSE_ASSIGN_OR_RETURN(
      std::unique_ptr<CommunicatorRegistry> registry,
      CommunicatorRegistry::Create(config, std::move(table)));
  TERSE_ASSIGN_OR_RETURN(
      std::unique_ptr<Engine> engine,
      Engine::Create(config, registry.get(), scenario.options));
  const int rank = engine->rank();
  return FinishScenario(scenario, rank, std::move(engine));
}

class EngineDeviceMpiTest : public ::testing::TestWithParam<Scenario> {};

TEST_P(EngineDeviceMpiTest, Runs) {
  absl::Status status = RunOnMpi(GetParam());
  EXPECT_TRUE(status.ok()) << status;
}

INSTANTIATE_TEST_SUITE_P(
    Sim, EngineDeviceMpiTest,
    ::testing::ValuesIn(DeviceScenarios(&TheDevices().sim,
                                        &TheDevices().runtimes)),
    [](const ::testing::TestParamInfo<Scenario>& info) {
      return info.param.name;
    });

}  // namespace
}  // namespace testing
}  // namespace terse
