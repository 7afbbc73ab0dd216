// Internals shared by the device scenarios' .cc files (device_scenarios.cc:
// the dense paths and the scenario list; device_compression_scenarios.cc:
// compression and checkpoints on device buckets; device_set_scenarios.cc:
// process sets). Testing only; include
// only there.
#ifndef TERSE_ENGINE_DEVICE_SCENARIOS_INTERNAL_H_
#define TERSE_ENGINE_DEVICE_SCENARIOS_INTERNAL_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/tensor_view.h"
#include "device/runtime.h"
#include "device/sim_runtime.h"
#include "engine/engine.h"

namespace terse {
namespace testing {
namespace device_scenarios_internal {

// A rank's simulated device and the framework's streams on it: the
// producer writes inputs late (a deliberate delay per piece of work), the
// consumer reads results.
struct RankDevice {
  SimRuntime* sim = nullptr;
  int ordinal = 0;
  std::unique_ptr<SimStream> producer;
  std::unique_ptr<SimStream> consumer;
};

absl::StatusOr<RankDevice> MakeDevice(SimRuntime* sim, const Engine& engine);

// A device tensor written by the producer stream: `host` is copied to
// device memory late; `ready` covers the copy. `host` stays alive here
// until the copy ran.
struct Uploaded {
  std::vector<uint8_t> host;
  DeviceBuffer buffer;
  std::shared_ptr<Event> ready;
  TensorView view;
};

// `v` in `dtype` on the rank's device, written by its producer stream.
absl::StatusOr<std::unique_ptr<Uploaded>> Upload(RankDevice& d, DataType dtype,
                                                 const std::vector<double>& v);

// The consumer's view of `u` after the op's completion event: the consumer
// stream waits on `done` (device side) and copies the result out.
absl::StatusOr<std::vector<double>> Download(RankDevice& d, Event* done,
                                             const Uploaded& u);

// The compression scenarios (device_compression_scenarios.cc); see there.
absl::Status CompressedEqualsCpu(SimRuntime* sim, int rank, Engine& engine);
absl::Status CheckpointAcrossDeviceKinds(SimRuntime* sim, int rank,
                                         Engine& engine);
absl::Status MomentumAcrossDeviceKinds(SimRuntime* sim, int rank,
                                       Engine& engine);
absl::Status PortfolioProbesAcrossDeviceKinds(SimRuntime* sim, int rank,
                                              Engine& engine);
absl::Status QsgdPortfolioOnDevice(SimRuntime* sim, int rank, Engine& engine);

// Device tensors on process sets (device_set_scenarios.cc); see there.
absl::Status DeviceTensorsOnProcessSets(SimRuntime* sim, int rank,
                                        Engine& engine);

}  // namespace device_scenarios_internal
}  // namespace testing
}  // namespace terse

#endif  // TERSE_ENGINE_DEVICE_SCENARIOS_INTERNAL_H_
