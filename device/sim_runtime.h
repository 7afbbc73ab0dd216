// SimRuntime: the simulated device (Device::Kind::kSim), a DeviceRuntime
// that runs without a GPU so that CI exercises every line of the engine's
// device path: its own allocations, asynchronous streams and events.
//
// Memory: Allocate hands out host memory that this runtime owns and tracks
// (per ordinal), so CheckDeviceMemory can tell a simulated-device span from
// any other pointer ("not simulated-device memory"), as cudaPointerGetAttributes
// does for CUDA. The memory is host-addressable (host_addressable()), which
// is how its kernels run: Stream::LaunchHost work is the CPU kernel.
//
// Streams: each stream is a worker thread that runs its queue in order.
// Before each piece of work it sleeps `delay` ON PURPOSE, so work is late
// compared to the enqueuing thread: code that reads a result without
// waiting for the event or stream that covers it sees stale data and its
// test fails. Hold()/Release() stop and restart a stream's worker, for tests
// that must not depend on timing at all (work enqueued on a held stream
// cannot have run until Release()).
//
// Events: Record captures the stream's position; WaitEvent enqueues a wait
// that blocks the stream's worker (never the enqueuing thread) until the
// event's captured work has run; HostWait blocks the caller.
//
// Destruction: a stream drains its queue (running the remaining work) and
// joins its worker; a stream waiting on an event that is never going to
// complete (its stream held) blocks its destructor. Memory still allocated
// when the runtime is destroyed is freed then (a leak is reported by
// live_allocations() before). Thread-safe.
#ifndef TERSE_DEVICE_SIM_RUNTIME_H_
#define TERSE_DEVICE_SIM_RUNTIME_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "device/runtime.h"

namespace terse {

struct SimOptions {
  // The deliberate lateness of each piece of stream work.
  std::chrono::microseconds delay{500};
  // Valid ordinals are [0, devices).
  int devices = 16;
};

class SimStream;

class SimRuntime : public DeviceRuntime {
 public:
  explicit SimRuntime(SimOptions options = SimOptions());
  ~SimRuntime() override;
  SimRuntime(const SimRuntime&) = delete;
  SimRuntime& operator=(const SimRuntime&) = delete;

  Device::Kind kind() const override { return Device::Kind::kSim; }
  bool host_addressable() const override { return true; }

  absl::StatusOr<void*> Allocate(int ordinal, int64_t bytes) override;
  absl::Status Free(void* ptr) override;
  absl::StatusOr<void*> AllocateHost(int64_t bytes) override;
  absl::Status FreeHost(void* ptr) override;
  absl::Status CheckDeviceMemory(const void* ptr, int64_t bytes, int ordinal,
                                 absl::string_view what) override;
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream(int ordinal) override;
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent(int ordinal) override;

  // A stream with its own deliberate delay (tests).
  absl::StatusOr<std::unique_ptr<SimStream>> CreateSimStream(
      int ordinal, std::chrono::microseconds delay);

  // Device allocations not yet freed.
  int64_t live_allocations() const;

 private:
  struct Allocation {
    int64_t bytes;
    int ordinal;
  };
  absl::Status CheckOrdinal(int ordinal, absl::string_view what) const;

  const SimOptions options_;
  mutable absl::Mutex mu_;
  // Device allocations by start address.
  std::map<uintptr_t, Allocation> device_ ABSL_GUARDED_BY(mu_);
};

// A simulated stream (see the file comment); Hold/Release are extras for
// tests.
class SimStream : public Stream {
 public:
  ~SimStream() override;
  Device device() const override { return Device::Sim(ordinal_); }
  absl::Status Record(Event* event) override;
  absl::Status WaitEvent(Event* event) override;
  absl::Status Memcpy(void* dst, const void* src, int64_t bytes) override;
  absl::Status Memset(void* dst, int value, int64_t bytes) override;
  absl::Status LaunchHost(std::function<void()> fn) override;
  absl::Status Synchronize() override;
  void* native_handle() override { return nullptr; }

  // While held, the worker starts no new work.
  void Hold();
  void Release();
  // Work enqueued and not yet finished.
  int64_t pending() const;

 private:
  friend class SimRuntime;
  class Worker;
  SimStream(int ordinal, std::chrono::microseconds delay);

  const int ordinal_;
  std::unique_ptr<Worker> worker_;
};

}  // namespace terse

#endif  // TERSE_DEVICE_SIM_RUNTIME_H_
