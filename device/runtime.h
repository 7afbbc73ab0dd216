// The device runtime abstraction: memory, streams and events of one device
// kind, so that the engine's device path is written once for CUDA and for
// the simulated device CI runs it on (sim_runtime.h).
//
// The model is CUDA's:
// - A Stream runs the work enqueued on it asynchronously, in enqueue order.
//   Enqueuing returns at once; the work happens later.
// - An Event marks a point in a stream: Stream::Record(e) captures all work
//   enqueued on that stream so far. Event::Query() says whether the most
//   recent recorded point is done, Event::HostWait() blocks the calling
//   thread until it is, Stream::WaitEvent(e) makes later work on another
//   stream wait for it without blocking any host thread. An event never
//   recorded counts as done.
// - Device memory comes from DeviceRuntime::Allocate and is only touched
//   through streams; CheckDeviceMemory says whether a span is this kind's
//   device memory (CUDA: cudaPointerGetAttributes).
//
// Ownership: the caller owns what Create*/Allocate* return and frees memory
// with the matching Free*. An event or stream may be destroyed while work
// referring to it is pending (the implementations keep what that work
// needs alive); device memory must outlive the work that uses it.
//
// Thread-safety: a DeviceRuntime may be used from any thread. One Stream is
// used by one enqueuing thread at a time; Event::Query/HostWait may be
// called from any thread. Errors are absl::Status values, never exceptions
// or crashes: without a CUDA device the CUDA runtime's calls fail with
// FailedPrecondition naming the driver's answer.
#ifndef TERSE_DEVICE_RUNTIME_H_
#define TERSE_DEVICE_RUNTIME_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/data_type.h"
#include "common/tensor_view.h"

namespace terse {

class Event {
 public:
  virtual ~Event() = default;
  // True when the work captured by the most recent Record() is done (or the
  // event was never recorded).
  virtual absl::StatusOr<bool> Query() = 0;
  // Blocks the calling thread until Query() would say true.
  virtual absl::Status HostWait() = 0;
};

class Stream {
 public:
  virtual ~Stream() = default;
  virtual Device device() const = 0;

  // Captures the work enqueued so far in `event` (of the same runtime).
  virtual absl::Status Record(Event* event) = 0;
  // Later work on this stream starts after the work `event` captured at the
  // time of this call. Never blocks the host.
  virtual absl::Status WaitEvent(Event* event) = 0;
  // Copies `bytes` between any two of this runtime's device memory and host
  // memory, in stream order. The spans must not overlap.
  virtual absl::Status Memcpy(void* dst, const void* src, int64_t bytes) = 0;
  // dst[0, bytes) = byte `value`, in stream order (device memory).
  virtual absl::Status Memset(void* dst, int value, int64_t bytes) = 0;
  // Runs `fn` on a host thread in stream order (after the work enqueued
  // before, before the work enqueued after). `fn` may touch device memory
  // only where the runtime's memory is host-addressable (the simulated
  // device: this is how its "kernels", the CPU ones, run); on CUDA it may
  // touch host memory only (cudaLaunchHostFunc) and must not call CUDA.
  virtual absl::Status LaunchHost(std::function<void()> fn) = 0;
  // Blocks the calling thread until all work enqueued so far is done.
  virtual absl::Status Synchronize() = 0;
  // The native handle (cudaStream_t for CUDA), or null.
  virtual void* native_handle() = 0;
};

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;
  virtual Device::Kind kind() const = 0;
  // Whether host code may read and write this kind's device memory (inside
  // Stream::LaunchHost work): true for the simulated device only.
  virtual bool host_addressable() const = 0;

  // Device memory on `ordinal`; bytes == 0 gives a valid unique pointer.
  virtual absl::StatusOr<void*> Allocate(int ordinal, int64_t bytes) = 0;
  // InvalidArgument when `ptr` did not come from Allocate (null is OK).
  virtual absl::Status Free(void* ptr) = 0;
  // Host memory fit for staging device data (CUDA: pinned).
  virtual absl::StatusOr<void*> AllocateHost(int64_t bytes) = 0;
  virtual absl::Status FreeHost(void* ptr) = 0;

  // OK when [ptr, ptr + bytes) is device memory of this kind on device
  // `ordinal`; otherwise InvalidArgument naming `what`, the device and what
  // the pointer is instead. A null ptr is OK only with bytes == 0.
  virtual absl::Status CheckDeviceMemory(const void* ptr, int64_t bytes,
                                         int ordinal,
                                         absl::string_view what) = 0;

  virtual absl::StatusOr<std::unique_ptr<Stream>> CreateStream(
      int ordinal) = 0;
  virtual absl::StatusOr<std::unique_ptr<Event>> CreateEvent(int ordinal) = 0;
};

// DeviceRuntimes: the runtime for each device kind, chosen by Device::Kind.
// Does not own the runtimes (they must outlive it and every user of it).
// Filled before use, then read-only: Get is thread-safe, Register is not.
class DeviceRuntimes {
 public:
  // AlreadyExists when a runtime for its kind is registered; InvalidArgument
  // for null or a CPU runtime.
  absl::Status Register(DeviceRuntime* runtime);
  // Unimplemented naming the kind when none is registered.
  absl::StatusOr<DeviceRuntime*> Get(Device::Kind kind) const;

 private:
  std::map<Device::Kind, DeviceRuntime*> runtimes_;
};

// Device memory from a runtime, freed on destruction (the engine's
// persistent fusion buffers, tests). Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // bytes of device memory on `device` (host staging memory when `host`).
  static absl::StatusOr<DeviceBuffer> Allocate(DeviceRuntime* runtime,
                                               int ordinal, int64_t bytes,
                                               bool host = false);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  int64_t bytes() const { return bytes_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void Reset();

  DeviceRuntime* runtime_ = nullptr;
  void* data_ = nullptr;
  int64_t bytes_ = 0;
  bool host_ = false;
};

}  // namespace terse

#endif  // TERSE_DEVICE_RUNTIME_H_
