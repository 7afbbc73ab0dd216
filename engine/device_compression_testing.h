// Shared by device_compression_test (the simulated device) and
// device_compression_cuda_gpu_test (CUDA): DeviceCompression and the
// CompressedReducer (the CPU path) run the same gradients on loopback ranks
// (threads), step by step, with the device collective staged through the
// host. Testing only.
#ifndef TERSE_ENGINE_DEVICE_COMPRESSION_TESTING_H_
#define TERSE_ENGINE_DEVICE_COMPRESSION_TESTING_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/config.h"
#include "device/runtime.h"
#include "engine/bucket_assigner.h"
#include "engine/compressed_reducer.h"

namespace terse {
namespace testing {

// TERSE_COMPRESSION=`compression`, TERSE_CF=`cf`, no minimum bucket size,
// and the settings in `extra`.
absl::StatusOr<Config> DeviceCompressionConfig(
    const std::string& compression, const std::string& cf,
    const std::map<std::string, std::string>& extra = {});
// Two tensors, 70001 floats (enough for DGC to sample): a 200 x 200
// matrix and one of unknown shape (PowerSGD views it near-square, padded).
Bucket DeviceCompressionBucket();
// Rank `rank`'s gradient at `step` (deterministic).
std::vector<float> DeviceCompressionGradient(int rank, int step, int64_t n);

struct Outcome {
  // [step][rank]: the device path's and the CPU path's reduced bucket.
  std::vector<std::vector<std::vector<float>>> device, cpu;
  // [rank]: the device path's residuals after the last step, by tensor.
  std::vector<std::map<std::string, std::vector<float>>> residuals;
  // [rank]: the last reports of the device and the CPU reducer.
  std::vector<BucketReport> device_report, cpu_report;
  // [rank]: the device reducer's own store for the first tensor (zeros:
  // the residuals live on the device).
  std::vector<std::vector<float>> store_residual;
  // [step][rank]: each path's report after the step, as
  // "<policy> sent <compressor> cf <cf> bytes <bytes>" (the decisions).
  std::vector<std::vector<std::string>> device_steps, cpu_steps;
  // [step][rank]: each path's pending statistics after the step (the
  // norms the policy observes one step later, averaged over ranks: the gain
  // probes' among them, which a decision may not show), read from a
  // checkpoint of its reducer; empty unless RunDeviceAndCpu recorded them.
  std::vector<std::vector<std::vector<double>>> device_pending, cpu_pending;
  // [step][rank]: the bytes the device path sent in the step through the
  // control (host) communicator and through the device allgatherv.
  std::vector<std::vector<int64_t>> control_bytes, device_bytes;
};

// `size` loopback ranks, rank r on `runtime`'s device ordinal_of(r), run
// `steps` steps of both paths under DeviceCompressionConfig(compression, cf).
// `extra`: more settings (DeviceCompressionConfig). `device_gather`
// (simulated device only): the gathered messages (sparse, efsignsgd) go
// over a SimDeviceCommunicator (DeviceCompression's device allgatherv),
// else through the host. The device path's control communicator counts
// what it sends (Outcome::control_bytes). `corrupt` (when set) runs on the
// gathered device messages of every rank before they are read (fault
// injection).
// `bucket` (when set) replaces DeviceCompressionBucket() (the same sizes).
// `record_pending`: the policy's pending statistics of every step too
// (Outcome::device_pending, cpu_pending; a checkpoint of both reducers a
// step).
using CorruptGathered = std::function<void(
    int rank, void* gathered, const std::vector<int64_t>& recv_bytes)>;
absl::Status RunDeviceAndCpu(
    int size, const std::string& compression, const std::string& cf, int steps,
    Outcome* run, DeviceRuntime* runtime,
    const std::function<int(int)>& ordinal_of,
    const std::map<std::string, std::string>& extra = {},
    bool device_gather = false, const CorruptGathered& corrupt = {},
    const Bucket* bucket = nullptr, bool record_pending = false);

// OK when every step's results are bitwise equal and the reports agree
// (every step's, when recorded), and so do the pending statistics (when
// recorded).
absl::Status ExpectBitwiseEqual(const Outcome& run, const std::string& what);
// OK when every step's results agree within `tolerance` times the step's
// largest CPU magnitude (float products summed in another order: PowerSGD
// on CUDA) and the reports name the same compressor.
absl::Status ExpectClose(const Outcome& run, const std::string& what,
                         double tolerance);

// Error feedback loses nothing: OK when, over the run's steps, what the
// ranks sent (the reduced buckets) plus what stays in their residuals (a
// tensor without one counts as zero) equals the sum of every rank's
// DeviceCompressionGradient, within 1e-5 of the magnitudes involved (an
// fp64 oracle). `size` ranks, the default bucket.
absl::Status CheckConservation(const Outcome& run, int size);

}  // namespace testing
}  // namespace terse

#endif  // TERSE_ENGINE_DEVICE_COMPRESSION_TESTING_H_
