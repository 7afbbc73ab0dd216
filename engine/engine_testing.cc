#include "engine/engine_testing.h"

#include <chrono>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/loopback/loopback.h"
#include "common/status.h"

namespace terse {
namespace testing {

Config ScenarioConfig(const Scenario& scenario) {
  Config config = Config::Defaults();
  config.cycle_time_ms = 1;
  config.timeline_path = "";
  if (scenario.configure) scenario.configure(&config);
  return config;
}

absl::Status FinishScenario(const Scenario& scenario, int rank,
                            std::unique_ptr<Engine> engine) {
  absl::Status status = scenario.body(rank, *engine);
  if (status.ok() && !scenario.stops_engine) status = engine->Barrier();
  absl::Status shutdown = engine->Shutdown();
  if (scenario.stops_engine) shutdown = absl::OkStatus();
  if (!status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat("rank ", rank, ": ", status.message()));
  }
  return shutdown;
}

absl::Status RunOnLoopback(int size, const Scenario& scenario) {
  const Config config = ScenarioConfig(scenario);
  return RunLoopbackRanks(size, [&](int rank, Communicator* comm) {
    TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                           Engine::Create(config, comm, scenario.options));
    return FinishScenario(scenario, rank, std::move(engine));
  });
}

absl::Status Expect(bool condition, const std::string& what) {
  return condition ? absl::OkStatus() : absl::InternalError(what);
}

absl::Status ExpectContains(const absl::Status& status,
                            const std::string& text) {
  return Expect(
      absl::StrContains(status.message(), text),
      absl::StrCat("status '", status.ToString(), "' lacks '", text, "'"));
}

std::string RanksPhrase(const std::vector<int>& ranks) {
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ",
                      absl::StrJoin(ranks, ","));
}

std::vector<int> AllBut(int size, int excluded) {
  std::vector<int> ranks;
  for (int r = 0; r < size; ++r) {
    if (r != excluded) ranks.push_back(r);
  }
  return ranks;
}

bool Eventually(const std::function<bool()>& done) {
  for (int i = 0; i < 6000; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

}  // namespace testing
}  // namespace terse
