#include "device/cuda_runtime.h"

#include <cuda_runtime_api.h>

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "device/cuda_pointer.h"

namespace terse {
namespace {

// FailedPrecondition when no device answers (no driver, no GPU), Internal
// for other failures; clears the runtime's last error.
absl::Status CudaError(cudaError_t err, absl::string_view what) {
  if (err == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();
  const std::string message = absl::StrCat(what, ": ", cudaGetErrorName(err),
                                           ": ", cudaGetErrorString(err));
  switch (err) {
    case cudaErrorInsufficientDriver:
    case cudaErrorNoDevice:
    case cudaErrorInvalidDevice:
    case cudaErrorInitializationError:
      return absl::FailedPreconditionError(message);
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    case cudaErrorInvalidValue:
      return absl::InvalidArgumentError(message);
    default:
      return absl::InternalError(message);
  }
}

class CudaEvent : public Event {
 public:
  // With a `pool`, the event goes back to it instead of being destroyed.
  CudaEvent(int ordinal, cudaEvent_t event,
            std::shared_ptr<EventPool> pool = nullptr)
      : ordinal_(ordinal), event_(event), pool_(std::move(pool)) {}
  ~CudaEvent() override {
    if (pool_ != nullptr) {
      pool_->Release(ordinal_, event_);
    } else {
      cudaEventDestroy(event_);
    }
  }

  absl::StatusOr<bool> Query() override {
    const cudaError_t err = cudaEventQuery(event_);
    if (err == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    if (err != cudaSuccess) return CudaError(err, "cudaEventQuery");
    return true;
  }
  absl::Status HostWait() override {
    return CudaError(cudaEventSynchronize(event_), "cudaEventSynchronize");
  }

  int ordinal() const { return ordinal_; }
  cudaEvent_t event() const { return event_; }

 private:
  const int ordinal_;
  const cudaEvent_t event_;
  const std::shared_ptr<EventPool> pool_;
};

// A new event of device `ordinal` (timing disabled), for CreateEvent and the
// pool. Sets the calling thread's current device.
absl::StatusOr<cudaEvent_t> NewEvent(int ordinal) {
  absl::Status set = CudaError(cudaSetDevice(ordinal),
                               absl::StrCat("cudaSetDevice(", ordinal, ")"));
  if (!set.ok()) return set;
  cudaEvent_t event = nullptr;
  absl::Status created =
      CudaError(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                "cudaEventCreateWithFlags");
  if (!created.ok()) return created;
  return event;
}

absl::StatusOr<CudaEvent*> AsCudaEvent(Event* event) {
  CudaEvent* cuda = dynamic_cast<CudaEvent*>(event);
  if (cuda == nullptr) {
    return absl::InvalidArgumentError(
        "the event is not a CUDA event (null or from another runtime)");
  }
  return cuda;
}

class CudaStream : public Stream {
 public:
  CudaStream(int ordinal, cudaStream_t stream)
      : ordinal_(ordinal), stream_(stream) {}
  ~CudaStream() override {
    // Work still enqueued completes first (CUDA keeps the stream's resources
    // until then).
    cudaSetDevice(ordinal_);
    cudaStreamDestroy(stream_);
  }

  Device device() const override { return Device::Cuda(ordinal_); }

  // Every call works on the stream's device, whichever thread makes it.
  absl::Status MakeCurrent() const {
    return CudaError(cudaSetDevice(ordinal_), "cudaSetDevice");
  }

  absl::Status Record(Event* event) override {
    if (absl::Status current = MakeCurrent(); !current.ok()) return current;
    absl::StatusOr<CudaEvent*> e = AsCudaEvent(event);
    if (!e.ok()) return e.status();
    return CudaError(cudaEventRecord((*e)->event(), stream_),
                     "cudaEventRecord");
  }
  absl::Status WaitEvent(Event* event) override {
    if (absl::Status current = MakeCurrent(); !current.ok()) return current;
    absl::StatusOr<CudaEvent*> e = AsCudaEvent(event);
    if (!e.ok()) return e.status();
    return CudaError(cudaStreamWaitEvent(stream_, (*e)->event(), 0),
                     "cudaStreamWaitEvent");
  }
  absl::Status Memcpy(void* dst, const void* src, int64_t bytes) override {
    if (absl::Status current = MakeCurrent(); !current.ok()) return current;
    if (bytes < 0 || ((dst == nullptr || src == nullptr) && bytes > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("Memcpy: null buffer or negative size (", bytes, ")"));
    }
    if (bytes == 0) return absl::OkStatus();
    return CudaError(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes),
                                     cudaMemcpyDefault, stream_),
                     "cudaMemcpyAsync");
  }
  absl::Status Memset(void* dst, int value, int64_t bytes) override {
    if (absl::Status current = MakeCurrent(); !current.ok()) return current;
    if (bytes < 0 || (dst == nullptr && bytes > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("Memset: null buffer or negative size (", bytes, ")"));
    }
    if (bytes == 0) return absl::OkStatus();
    return CudaError(
        cudaMemsetAsync(dst, value, static_cast<size_t>(bytes), stream_),
        "cudaMemsetAsync");
  }
  absl::Status LaunchHost(std::function<void()> fn) override {
    if (absl::Status current = MakeCurrent(); !current.ok()) return current;
    if (!fn) return absl::InvalidArgumentError("LaunchHost: empty function");
    auto* heap = new std::function<void()>(std::move(fn));
    const cudaError_t err = cudaLaunchHostFunc(
        stream_,
        [](void* arg) {
          auto* f = static_cast<std::function<void()>*>(arg);
          (*f)();
          delete f;
        },
        heap);
    if (err != cudaSuccess) delete heap;
    return CudaError(err, "cudaLaunchHostFunc");
  }
  absl::Status Synchronize() override {
    if (absl::Status current = MakeCurrent(); !current.ok()) return current;
    return CudaError(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  void* native_handle() override { return stream_; }

 private:
  const int ordinal_;
  const cudaStream_t stream_;
};

}  // namespace

CudaRuntime::CudaRuntime()
    : producer_events_(std::make_shared<EventPool>(
          [](int ordinal) -> absl::StatusOr<EventPool::Handle> {
            absl::StatusOr<cudaEvent_t> event = NewEvent(ordinal);
            if (!event.ok()) return event.status();
            return static_cast<EventPool::Handle>(*event);
          },
          [](EventPool::Handle event) {
            cudaEventDestroy(static_cast<cudaEvent_t>(event));
          })) {}

absl::StatusOr<void*> CudaRuntime::Allocate(int ordinal, int64_t bytes) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Allocate: negative size ", bytes));
  }
  absl::Status set = CudaError(cudaSetDevice(ordinal),
                               absl::StrCat("cudaSetDevice(", ordinal, ")"));
  if (!set.ok()) return set;
  void* ptr = nullptr;
  absl::Status allocated =
      CudaError(cudaMalloc(&ptr, static_cast<size_t>(bytes > 0 ? bytes : 1)),
                absl::StrCat("cudaMalloc(", bytes, ") on cuda:", ordinal));
  if (!allocated.ok()) return allocated;
  return ptr;
}

absl::Status CudaRuntime::Free(void* ptr) {
  if (ptr == nullptr) return absl::OkStatus();
  return CudaError(cudaFree(ptr), "cudaFree");
}

absl::StatusOr<void*> CudaRuntime::AllocateHost(int64_t bytes) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("AllocateHost: negative size ", bytes));
  }
  void* ptr = nullptr;
  absl::Status allocated = CudaError(
      cudaMallocHost(&ptr, static_cast<size_t>(bytes > 0 ? bytes : 1)),
      absl::StrCat("cudaMallocHost(", bytes, ")"));
  if (!allocated.ok()) return allocated;
  return ptr;
}

absl::Status CudaRuntime::FreeHost(void* ptr) {
  if (ptr == nullptr) return absl::OkStatus();
  return CudaError(cudaFreeHost(ptr), "cudaFreeHost");
}

absl::Status CudaRuntime::CheckDeviceMemory(const void* ptr, int64_t bytes,
                                            int ordinal,
                                            absl::string_view what) {
  return CheckCudaDeviceSpan(ptr, bytes, ordinal, what);
}

absl::StatusOr<std::unique_ptr<Stream>> CudaRuntime::CreateStream(int ordinal) {
  absl::Status set = CudaError(cudaSetDevice(ordinal),
                               absl::StrCat("cudaSetDevice(", ordinal, ")"));
  if (!set.ok()) return set;
  cudaStream_t stream = nullptr;
  absl::Status created =
      CudaError(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                "cudaStreamCreateWithFlags");
  if (!created.ok()) return created;
  return std::unique_ptr<Stream>(new CudaStream(ordinal, stream));
}

// Not pooled: a new event must Query true until recorded (runtime.h), and a
// reused one may still carry a record that has not completed.
absl::StatusOr<std::unique_ptr<Event>> CudaRuntime::CreateEvent(int ordinal) {
  absl::StatusOr<cudaEvent_t> event = NewEvent(ordinal);
  if (!event.ok()) return event.status();
  return std::unique_ptr<Event>(new CudaEvent(ordinal, *event));
}

absl::StatusOr<std::unique_ptr<Event>> CudaRuntime::RecordOnStream(
    int ordinal, void* stream) {
  // Called on a framework's thread: leave its current device as it was
  // (CreateEvent sets `ordinal`'s).
  int previous = -1;
  const bool known = cudaGetDevice(&previous) == cudaSuccess;
  absl::StatusOr<std::unique_ptr<Event>> event;
  // A pooled event is of `ordinal`, but the record needs it current too.
  absl::Status set = CudaError(cudaSetDevice(ordinal),
                               absl::StrCat("cudaSetDevice(", ordinal, ")"));
  absl::StatusOr<EventPool::Handle> handle =
      set.ok() ? producer_events_->Acquire(ordinal)
               : absl::StatusOr<EventPool::Handle>(set);
  if (!handle.ok()) {
    event = handle.status();
  } else {
    // From here the Event owns the handle: an error gives it back.
    auto cuda = std::make_unique<CudaEvent>(
        ordinal, static_cast<cudaEvent_t>(*handle), producer_events_);
    absl::Status recorded = CudaError(
        cudaEventRecord(cuda->event(), static_cast<cudaStream_t>(stream)),
        absl::StrCat("cudaEventRecord on the producer stream ",
                     absl::Hex(reinterpret_cast<uintptr_t>(stream)),
                     " of device ", ordinal));
    if (recorded.ok()) {
      event = std::unique_ptr<Event>(std::move(cuda));
    } else {
      event = recorded;
    }
  }
  if (known && previous != ordinal) cudaSetDevice(previous);
  return event;
}

EventPool::Stats CudaRuntime::producer_event_stats() const {
  return producer_events_->stats();
}

}  // namespace terse
