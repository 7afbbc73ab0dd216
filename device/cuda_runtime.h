// CudaRuntime: the DeviceRuntime over the CUDA runtime API (Device::Kind::
// kCuda). Compiled and linked in every build; without a device or driver
// every call returns FailedPrecondition with the runtime's reason.
//
// Memory: cudaMalloc on the ordinal's device; AllocateHost is pinned
// (cudaMallocHost) so that the engine's host staging (TERSE_GPU_OPERATIONS=
// mpi) copies asynchronously. CheckDeviceMemory is cudaPointerGetAttributes
// (device/cuda_pointer.h). Streams are non-blocking CUDA streams; events
// have timing disabled. LaunchHost is cudaLaunchHostFunc (host memory only).
//
// Thread-safety: as DeviceRuntime (runtime.h); every call sets its device
// first (cudaSetDevice), so threads may mix ordinals.
//
// RecordOnStream's events come from a pool (device/event_pool.h) and go
// back to it when the Event is destroyed, so a caller that records one per
// operation (the C API's producer-stream wait) creates none in steady state.
// The pool outlives the runtime while such events are alive.
#ifndef TERSE_DEVICE_CUDA_RUNTIME_H_
#define TERSE_DEVICE_CUDA_RUNTIME_H_

#include <memory>

#include "device/event_pool.h"
#include "device/runtime.h"

namespace terse {

class CudaRuntime : public DeviceRuntime {
 public:
  CudaRuntime();

  Device::Kind kind() const override { return Device::Kind::kCuda; }
  bool host_addressable() const override { return false; }

  absl::StatusOr<void*> Allocate(int ordinal, int64_t bytes) override;
  absl::Status Free(void* ptr) override;
  absl::StatusOr<void*> AllocateHost(int64_t bytes) override;
  absl::Status FreeHost(void* ptr) override;
  absl::Status CheckDeviceMemory(const void* ptr, int64_t bytes, int ordinal,
                                 absl::string_view what) override;
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream(int ordinal) override;
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent(int ordinal) override;

  // An event recorded now on `stream`, a cudaStream_t this runtime did not
  // create (a framework's producer stream; null: the legacy default
  // stream) of device `ordinal`: a Stream of this runtime that waits on it
  // (Stream::WaitEvent) runs after the work enqueued there so far. Never
  // blocks the host, and leaves the calling thread's current device as it
  // found it (a framework's thread calls this). Errors as CreateEvent, and
  // cudaEventRecord's (a stream of another device is InvalidArgument from
  // CUDA).
  // The event comes from the pool (a new one only when none of `ordinal`'s
  // is free).
  absl::StatusOr<std::unique_ptr<Event>> RecordOnStream(int ordinal,
                                                        void* stream);

  // RecordOnStream's pool: events created, and records served by reuse.
  EventPool::Stats producer_event_stats() const;

 private:
  // Shared with each pooled event, which gives its handle back on
  // destruction even after this runtime is gone.
  std::shared_ptr<EventPool> producer_events_;
};

}  // namespace terse

#endif  // TERSE_DEVICE_CUDA_RUNTIME_H_
