// DeviceExecutor: the engine's path for tensors on a device (CUDA, or the
// simulated device CI runs it on): allreduce buckets, broadcasts and
// allgathers, ordered by device events instead of host waits.
//
// Per device kind this rank uses, one context: the kind's DeviceRuntime
// (device/runtime.h), the rank's ordinal (pinned by the first tensor of that
// kind: one device per kind per rank, as in Horovod; a rank that has seen
// none, e.g. a joined one, uses its local rank), and the engine's stream on
// that device, on which all of the engine's device work runs in order.
//
// Ordering (per op): the enqueuing side passes an event recorded on its
// producer stream (TensorEntry::ready, null: the data is ready now); the
// engine stream waits for it (Stream::WaitEvent, never the host). The fuse
// copy (with prescale) into the bucket's persistent fusion buffer on the
// device, the collective, and the unfuse copy (with postscale / average)
// follow on the engine stream, and a completion event is recorded after
// them: `done`, which the consumer's stream waits on. Before a collective
// the background thread waits for the engine stream (host backends and the
// simulated communicator read memory synchronously; NCCL runs on its own
// stream and is synchronised after): that blocks the engine's thread, never
// a framework thread.
//
// Moving the bytes (Config::gpu_operations):
//   nccl  the device's communicator from the registry (ForDevice: NCCL for
//         CUDA, the sim backend for the simulated device); built lazily,
//         collectively, at the first device collective of the kind.
//   mpi   staged through host memory from the runtime (pinned for CUDA)
//         over the control communicator: device -> host copy, host
//         collective, host -> device copy.
// Allgather results are host memory (AllgatherResult), so an allgather is
// always staged through the host.
//
// Compression of device buckets: static fp16, bf16, topk, dgc, powersgd,
// randomk, efsignsgd and qsgd (and redsync, threshold), gravac with one
// topk, dgc, redsync or randomk family, gravac's portfolio (dense, fp16,
// bf16, powersgd, topk, dgc, redsync, randomk and qsgd candidates) and
// accordion, and TERSE_MOMENTUM_CORRECTION run on the device, in stream
// order, with their residuals and velocities in device memory
// (DeviceCompression, engine/device_compression.h), on CUDA and on the
// simulated device. The rest (a policy DeviceCompression::HandlesPolicy
// refuses: none that Config accepts at present) would run
// through the engine's CompressedReducer (its CPU kernels, residuals and
// velocities, payloads over the control communicator; a warning names the
// bucket on its first step) after the engine stream is synchronised: on
// the fusion buffer itself where the runtime's memory is host-addressable
// (the simulated device), through the pinned staging buffer on CUDA (a
// copy each way per step); fuse and unfuse stay on the stream.
//
// Not thread-safe except CheckView and CheckEntry (any thread). Every rank
// runs the same device collectives in the same order (the negotiated one).
#ifndef TERSE_ENGINE_DEVICE_EXECUTOR_H_
#define TERSE_ENGINE_DEVICE_EXECUTOR_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "collectives/registry.h"
#include "common/config.h"
#include "device/runtime.h"
#include "engine/bucket_assigner.h"
#include "engine/bucket_reducer.h"
#include "engine/compressed_reducer.h"
#include "engine/device_compression.h"
#include "engine/tensor_entry.h"
#include "engine/timeline.h"

namespace terse {

class DeviceExecutor {
 public:
  // Whether a bucket goes through the reducer (compression or momentum).
  using NeedsReducer = std::function<bool(const Bucket&)>;
  // None owned; all must outlive the executor.
  DeviceExecutor(const Config& config, CommunicatorRegistry* registry,
                 const DeviceRuntimes* runtimes, CompressedReducer* reducer,
                 NeedsReducer needs_reducer);
  ~DeviceExecutor();
  DeviceExecutor(const DeviceExecutor&) = delete;
  DeviceExecutor& operator=(const DeviceExecutor&) = delete;

  // Enqueue time: `view` (of tensor `name`, the op's `what`) is memory of a
  // device kind with a registered runtime, on this rank's device of that
  // kind (the first device tensor pins it). Unimplemented for a kind without
  // a runtime; InvalidArgument otherwise, naming the tensor.
  absl::Status CheckView(const std::string& name, const TensorView& view,
                         const char* what);
  // Enqueue time (any thread): the device rules of an op: CheckView of its
  // views, output on the input's device, a ready event only for device
  // tensors.
  absl::Status CheckEntry(const TensorEntry& e);

  // Runs device bucket `bucket` (entries as in BucketExecutor::Run: null for
  // a member this rank has no op for; it contributes zeros). On OK, `done`
  // is recorded after the members' outputs are written. An error is fatal.
  // While `timeline` (may be null) is written, the bucket's track gets
  // NEGOTIATE and QUEUE (host times, from the entries' enqueue times and
  // `ready_at`) and FUSE (the waits for the producers and the copies in),
  // COMMUNICATE (the collective, with compression when the bucket has
  // some) and UNFUSE, timed by host functions enqueued on the engine
  // stream between the phases (Stream::LaunchHost): when the device reached
  // each point, at the cost of one host call per phase on the stream.
  absl::Status RunBucket(const Bucket& bucket,
                         const std::vector<const TensorEntry*>& entries,
                         Clock::time_point ready_at, Timeline* timeline,
                         std::shared_ptr<Event>* done);
  // `bytes` of the root's buffer into every rank's; `entry` may be null
  // (no local op: a scratch buffer takes part).
  absl::Status RunBroadcast(Device::Kind kind, const TensorEntry* entry,
                            int64_t bytes, int root,
                            std::shared_ptr<Event>* done);
  // Rank i's recv_bytes[i] bytes into host memory `recv`, rank-major;
  // `entry` may be null (no local op: zeros of this rank's size).
  absl::Status RunAllgather(Device::Kind kind, const TensorEntry* entry,
                            const std::vector<int64_t>& recv_bytes, void* recv);

  // The bucket was dropped or changed: release its fusion buffer (after the
  // engine stream's pending work, which may use it).
  void Forget(int bucket_id);

  // A process set's executor (its registry over the set's communicator)
  // moves the tensors of the device that `global`'s CheckView pinned (the
  // engine checks every op with the global set's executor), or `global`'s
  // local rank's device when none was pinned: one device per kind and rank
  // across sets. `global` (not owned) must outlive this executor. Before
  // the first Run*.
  void FollowOrdinalsOf(const DeviceExecutor* global) { pins_ = global; }

 private:
  struct Context {
    DeviceRuntime* runtime = nullptr;
    int ordinal = 0;
    std::unique_ptr<Stream> stream;
    DeviceBuffer staging;  // Host; grown as needed (gpu_operations=mpi).
    DeviceBuffer scratch;  // Device; ops without a local buffer.
  };

  absl::StatusOr<Context*> ContextFor(Device::Kind kind);
  // This rank's ordinal of `kind`: pinned by CheckView, else local_rank_.
  int OrdinalFor(Device::Kind kind) const;
  // `bytes` of host staging memory (or scratch device memory) in `ctx`.
  absl::StatusOr<void*> Staging(Context* ctx, int64_t bytes);
  absl::StatusOr<void*> Scratch(Context* ctx, int64_t bytes);
  // dst = src * factor on the engine stream.
  absl::Status ScaledCopy(Context* ctx, void* dst, const void* src,
                          int64_t count, DataType dtype, double factor);
  // Runs `op` on `data` (`bytes` of device memory of `ctx`) after the
  // engine stream's work, through the device communicator or host staging
  // (see the file comment); later work on the stream sees the result.
  absl::Status Collective(
      Context* ctx, void* data, int64_t bytes,
      const std::function<absl::Status(Communicator*, void*)>& op);
  absl::Status RecordDone(Context* ctx, std::shared_ptr<Event>* done);

  const Config config_;
  const bool staged_;  // gpu_operations == "mpi".
  BucketReducer* const reducer_;
  const NeedsReducer needs_reducer_;
  CommunicatorRegistry* const registry_;
  const DeviceRuntimes* const runtimes_;
  const int local_rank_;
  const DeviceExecutor* pins_ = this;  // Whose ordinals this one follows.

  mutable absl::Mutex mu_;
  // This rank's ordinal per device kind (pinned by CheckView).
  std::map<Device::Kind, int> ordinals_ ABSL_GUARDED_BY(mu_);

  // Background thread only.
  std::map<Device::Kind, std::unique_ptr<Context>> contexts_;
  struct Fusion {
    Device::Kind kind;
    DeviceBuffer buffer;
    int64_t runs = 0;
  };
  absl::flat_hash_map<int, Fusion> fusion_;  // By bucket id.
  // Declared last: destroyed first, after the destructor synchronised the
  // streams its work ran on.
  DeviceCompression compression_;
};

}  // namespace terse

#endif  // TERSE_ENGINE_DEVICE_EXECUTOR_H_
