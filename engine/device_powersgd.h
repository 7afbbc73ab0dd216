// DevicePowerSgd: PowerSGD (compressors/powersgd_compressor.h) on a device
// bucket, for DeviceCompression. The same plan (matrices of whole tensors
// of 2+ dimensions worth compressing, near-square views of unknown shapes,
// everything else uncompressed), the same start and warm Q's, and the same
// rounds, all on the device: P = M Q, the P's and the uncompressed values
// summed over ranks by the device collective, the summed P's orthonormalised
// (DeviceOps::OrthonormalizeColumns, Gram-Schmidt in double as the CPU
// compressor), Q = M^T P^, the Q's summed, and the reconstructions P^ Q^T
// added. Once its buffers exist a step never waits for the stream:
// nothing comes back to the host (the collective may stage), and only the
// start Q of a tensor not seen before (or restored from a checkpoint) goes
// up. On the simulated device the results equal the CPU compressor's bit
// for bit.
//
// State: the warm-start Q's per tensor (the summed Q's of its last step,
// rank x cols floats), in device memory, one allocation per warm key;
// DeviceCompression downloads them into checkpoints as the CPU path writes
// its own (WarmState entries of the bucket), so they load on either device
// kind, and restored ones go up with the next step.
//
// One instance per bucket, on one runtime and device (the first step's);
// used by the engine's background thread only, or by a thread that holds
// the engine's lock between its steps (ExportWarm).
#ifndef TERSE_ENGINE_DEVICE_POWERSGD_H_
#define TERSE_ENGINE_DEVICE_POWERSGD_H_

#include <functional>
#include <map>
#include <memory>
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

  // The warm-start Q's by key (checkpoints): those on the device,
  // downloaded on `copy` (a stream of the steps' runtime and device that
  // the calling thread may use; unused, and may be null, when no step has
  // run), and those imported and not yet used. Waits for the steps enqueued
  // so far and for its copies; not concurrent with Step.
  absl::StatusOr<std::map<std::string, std::vector<float>>> ExportWarm(
      Stream* copy);
  // Restores warm-start Q's (a checkpoint's), replacing those of the same
  // keys; each goes up with the next step that compresses its tensor. An
  // entry whose size does not fit its tensor is ignored then (the seeded
  // start Q is used), and kept for export until that step.
  void ImportWarm(std::map<std::string, std::vector<float>> warm);

  // One step: `local` (device, count floats) receives this rank's own
  // reconstruction of `a` (device, count floats: g + residual), then
  // `with_local` runs (to enqueue the residual a - local), then `a` is
  // replaced by the sum over ranks of every rank's reconstruction. Work
  // is enqueued on `stream` of `runtime`'s `ordinal` (the first step's:
  // FailedPrecondition for another); the call does not wait for the
  // stream, except where a buffer grows or start Q's go up while earlier
  // ones still are (first steps, restores). Returns the bytes this rank
  // sent.
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
  // A warm key's Q on the device; `valid` once a step has enqueued its
  // summed Q there (before that the buffer holds, or is about to hold, an
  // uploaded start Q only).
  struct Warm {
    DeviceBuffer q;
    bool valid = false;
  };

  // The CPU compressor's plan for this step (compress: past the start step).
  absl::Status Plan(bool compress);
  absl::Status Grow(DeviceRuntime* runtime, int ordinal, Stream* stream,
                    int64_t floats, DeviceBuffer* buffer);
  // Enqueues the upload of the start Q of each matrix whose key holds no
  // summed Q on the device (an imported one that fits, else the seeded
  // one), allocating its device Q where needed.
  absl::Status UploadStarts(DeviceRuntime* runtime, int ordinal,
                            Stream* stream);

  const CompressorOptions options_;
  const uint64_t seed_;
  const std::string state_key_;
  const std::vector<Segment> segments_;
  const int64_t count_;

  std::vector<Matrix> matrices_;
  std::vector<PowerSgdRange> dense_;
  int64_t p_floats_ = 0, q_floats_ = 0, dense_floats_ = 0, padded_floats_ = 0;

  DeviceRuntime* runtime_ = nullptr;  // The first step's, with its ordinal.
  int ordinal_ = -1;
  std::map<std::string, Warm> warm_;                    // By warm key.
  std::map<std::string, std::vector<float>> imported_;  // Not yet used.
  // The start Q's being uploaded (host), reused once `uploaded_` is done;
  // `stepped_` marks the end of the last step's work (ExportWarm waits).
  std::vector<float> staged_;
  std::unique_ptr<Event> uploaded_, stepped_;

  DeviceBuffer round0_, round1_, q_local_, padded_, product_;
};

}  // namespace terse

#endif  // TERSE_ENGINE_DEVICE_POWERSGD_H_
