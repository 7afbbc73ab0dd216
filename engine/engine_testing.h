// Test helpers: several engines as loopback ranks (threads) in one process.
#ifndef TERSE_ENGINE_ENGINE_TESTING_H_
#define TERSE_ENGINE_ENGINE_TESTING_H_

#include <functional>

#include "absl/status/status.h"
#include "common/config.h"
#include "engine/engine.h"

namespace terse {
namespace testing {

// A configuration for tests: defaults with a short cycle and no timeline.
Config TestConfig();

// Runs body(rank, engine) on `size` loopback ranks, each with its own engine
// created from `config`. After a body returns OK its rank waits at a barrier
// (so no engine shuts the others down early) and shuts its engine down.
// Returns the first error of a body, of the barrier or of Shutdown.
absl::Status RunEngines(
    int size, const Config& config,
    const std::function<absl::Status(int rank, Engine& engine)>& body);

}  // namespace testing
}  // namespace terse

#endif  // TERSE_ENGINE_ENGINE_TESTING_H_
