// Engine scenarios on the simulated device (device/sim_runtime.h): every
// rank moves simulated-device tensors produced and consumed on its own
// delayed streams, so that a missing stream wait or a wrong event makes a
// result wrong. They run on loopback ranks (engine_device_test) and under
// mpirun (engine_device_mpi_np2_test), like engine_testing.h's scenarios.
#ifndef TERSE_ENGINE_DEVICE_SCENARIOS_H_
#define TERSE_ENGINE_DEVICE_SCENARIOS_H_

#include <vector>

#include "device/runtime.h"
#include "device/sim_runtime.h"
#include "engine/engine_testing.h"

namespace terse {
namespace testing {

// Rank r uses sim:local_rank. `sim` and `runtimes` (which holds `sim`) must
// outlive the scenarios' runs. Each scenario runs with
// TERSE_GPU_OPERATIONS=nccl (the sim communicator) and, as "<name>Staged",
// with mpi (host staging).
std::vector<Scenario> DeviceScenarios(SimRuntime* sim,
                                      const DeviceRuntimes* runtimes);

}  // namespace testing
}  // namespace terse

#endif  // TERSE_ENGINE_DEVICE_SCENARIOS_H_
