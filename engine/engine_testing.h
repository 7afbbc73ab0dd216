// Test helpers: engine scenarios that run unchanged on loopback ranks
// (threads of one test process) and on MPI ranks (under mpirun).
//
// A scenario is the body every rank runs against its own engine; it must be
// correct for any number of ranks >= 2 and returns a non-OK status (naming
// the rank and what differed) when an expectation fails.
#ifndef TERSE_ENGINE_ENGINE_TESTING_H_
#define TERSE_ENGINE_ENGINE_TESTING_H_

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/config.h"
#include "engine/engine.h"

namespace terse {
namespace testing {

struct Scenario {
  std::string name;
  // Adjusts the test configuration (may be null).
  std::function<void(Config*)> configure;
  std::function<absl::Status(int rank, Engine& engine)> body;
  // The body leaves the engine stopped (shutdown or fatal error): no final
  // barrier.
  bool stops_engine = false;
  EngineOptions options;
};

// gtest prints a parameter by its name.
inline void PrintTo(const Scenario& scenario, std::ostream* os) {
  *os << scenario.name;
}

// Sums, orders, fusion, dtypes, sizes, broadcast, allgather, cache.
std::vector<Scenario> CorrectnessScenarios();
// Mismatches, bad arguments, stalls, shutdown, join, bucket split.
std::vector<Scenario> ErrorScenarios();
// The compressing reducer through the engine: conservation, identical sums.
std::vector<Scenario> CompressionScenarios();
// Alltoall and reducescatter against an oracle: uneven and empty splits,
// every reduce op, mismatches, bad arguments, a process set (any size >= 2).
std::vector<Scenario> ExchangeScenarios();
// Grouped ops (GroupStart/GroupEnd): results, one cycle per group, no
// fusion across the group's edge, a mismatch or refusal failing the whole
// group on every rank, misuse (any size >= 2).
std::vector<Scenario> GroupScenarios();
// Process sets on exactly 4 ranks (overlapping static and dynamic sets
// against a dense reference; per-set compression reports and checkpoints).
std::vector<Scenario> ProcessSetScenarios();

// Defaults with a 1 ms cycle and no timeline, then scenario.configure.
Config ScenarioConfig(const Scenario& scenario);

// Runs the scenario's body on `engine`, then (unless it stops the engine) a
// barrier so no rank shuts the others down early, then Shutdown. Returns
// the first error.
absl::Status FinishScenario(const Scenario& scenario, int rank,
                            std::unique_ptr<Engine> engine);

// Runs the scenario on `size` loopback ranks.
absl::Status RunOnLoopback(int size, const Scenario& scenario);

// Shared expectations.
absl::Status Expect(bool condition, const std::string& what);
absl::Status ExpectContains(const absl::Status& status,
                            const std::string& text);
// "rank 1" / "ranks 0,2,3".
std::string RanksPhrase(const std::vector<int>& ranks);
// Every rank of [0, size) except `excluded`.
std::vector<int> AllBut(int size, int excluded);
// Polls `done` every 5 ms for up to 30 s.
bool Eventually(const std::function<bool()>& done);

}  // namespace testing
}  // namespace terse

#endif  // TERSE_ENGINE_ENGINE_TESTING_H_
