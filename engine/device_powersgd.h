// DevicePowerSgd: PowerSGD (compressors/powersgd_compressor.h) on a device
// bucket, for DeviceCompression. The same plan (matrices of whole tensors
// of 2+ dimensions worth compressing, near-square views of unknown shapes,
// everything else uncompressed), the same start and warm Q's, and the same
// rounds: P = M Q on the device, the P's and the uncompressed values summed
// over ranks by the device collective, the summed P's orthonormalised on
// the host (Gram-Schmidt in double, as the CPU compressor; rows x rank
// floats each, the compressed size), Q = M^T P^ on the device, the Q's
// summed, and the reconstructions P^ Q^T added on the device. Only the
// P's and Q's (and the uncompressed values' sums come back through the
// collective) cross to the host. On the simulated device the results equal
// the CPU compressor's bit for bit.
//
// State: the warm-start Q's per tensor, in host memory (they are rank x
// cols floats); DeviceCompression writes them into checkpoints as the CPU
// path does (WarmState entries of the bucket), so they load on either
// device kind.
//
// One instance per bucket; used by the engine's background thread only.
#ifndef TERSE_ENGINE_DEVICE_POWERSGD_H_
#define TERSE_ENGINE_DEVICE_POWERSGD_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compressors/compressor.h"
#include "compressors/device/device_ops.h"
#include "compressors/options.h"
#include "compressors/powersgd_plan.h"
#include "device/runtime.h"

namespace terse {

class DevicePowerSgd {
 public:
  // Sums `count` floats of device memory over ranks, in stream order.
  using Allreduce = std::function<absl::Status(float* data, int64_t count)>;

  // `state_key`: the CPU path's StateKey ("bucket:" + the members' names),
  // which the warm keys extend. `segments`: the bucket's tensors.
  DevicePowerSgd(const CompressorOptions& options, uint64_t seed,
                 std::string state_key, std::vector<Segment> segments,
                 int64_t count);

  // One step: `local` (device, count floats) receives this rank's own
  // reconstruction of `a` (device, count floats: g + residual), then
  // `with_local` runs (to enqueue the residual a - local), then `a` is
  // replaced by the sum over ranks of every rank's reconstruction. Work
  // runs on `stream` of `runtime`'s `ordinal`; the call blocks for the host
  // parts. Returns the bytes this rank sent.
  // The warm-start Q's by key (checkpoints), and restoring them: an entry
  // whose size does not fit its tensor is ignored when used.
  const std::map<std::string, std::vector<float>>& warm() const {
    return warm_;
  }
  void ImportWarm(std::map<std::string, std::vector<float>> warm) {
    for (auto& [key, q] : warm) warm_[key] = std::move(q);
  }

  absl::StatusOr<int64_t> Step(DeviceOps* ops, DeviceRuntime* runtime,
                               int ordinal, Stream* stream, float* a,
                               float* local, int64_t step,
                               const Allreduce& allreduce,
                               const std::function<absl::Status()>& with_local);

 private:
  struct Matrix {
    std::string name, warm_key;
    int64_t offset = 0, count = 0, rows = 0, cols = 0, rank = 0;
    int64_t p_offset = 0, q_offset = 0;
    int64_t m_offset = -1;  // In padded_ (a near-square view), else -1.
  };
  // The CPU compressor's plan for this step (compress: past the start step).
  absl::Status Plan(bool compress);
  absl::Status Grow(DeviceRuntime* runtime, int ordinal, Stream* stream,
                    int64_t floats, DeviceBuffer* buffer);

  const CompressorOptions options_;
  const uint64_t seed_;
  const std::string state_key_;
  const std::vector<Segment> segments_;
  const int64_t count_;

  std::vector<Matrix> matrices_;
  std::vector<PowerSgdRange> dense_;
  int64_t p_floats_ = 0, q_floats_ = 0, dense_floats_ = 0, padded_floats_ = 0;
  std::map<std::string, std::vector<float>> warm_;  // warm key -> Q_sum.

  DeviceBuffer round0_, round1_, q_local_, q_start_, padded_, product_;
  std::vector<float> host_p_, host_q_;
};

}  // namespace terse

#endif  // TERSE_ENGINE_DEVICE_POWERSGD_H_
