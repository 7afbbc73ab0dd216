#include "engine/engine_testing.h"

#include "collectives/loopback/loopback.h"
#include "common/status.h"

namespace terse {
namespace testing {

Config TestConfig() {
  Config config = Config::Defaults();
  config.cycle_time_ms = 1;
  config.timeline_path = "";
  return config;
}

absl::Status RunEngines(
    int size, const Config& config,
    const std::function<absl::Status(int rank, Engine& engine)>& body) {
  return RunLoopbackRanks(size, [&](int rank, Communicator* comm) {
    TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                           Engine::Create(config, comm));
    absl::Status status = body(rank, *engine);
    if (status.ok()) status = engine->Barrier();
    absl::Status shutdown = engine->Shutdown();
    return status.ok() ? shutdown : status;
  });
}

}  // namespace testing
}  // namespace terse
