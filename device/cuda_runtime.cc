#include "device/cuda_runtime.h"

#include <cuda_runtime_api.h>

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
  CudaEvent(int ordinal, cudaEvent_t event)
      : ordinal_(ordinal), event_(event) {}
  ~CudaEvent() override { cudaEventDestroy(event_); }

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
};

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

absl::StatusOr<std::unique_ptr<Event>> CudaRuntime::CreateEvent(int ordinal) {
  absl::Status set = CudaError(cudaSetDevice(ordinal),
                               absl::StrCat("cudaSetDevice(", ordinal, ")"));
  if (!set.ok()) return set;
  cudaEvent_t event = nullptr;
  absl::Status created =
      CudaError(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                "cudaEventCreateWithFlags");
  if (!created.ok()) return created;
  return std::unique_ptr<Event>(new CudaEvent(ordinal, event));
}

absl::StatusOr<std::unique_ptr<Event>> CudaRuntime::RecordOnStream(
    int ordinal, void* stream) {
  // Called on a framework's thread: leave its current device as it was
  // (CreateEvent sets `ordinal`'s).
  int previous = -1;
  const bool known = cudaGetDevice(&previous) == cudaSuccess;
  absl::StatusOr<std::unique_ptr<Event>> event = CreateEvent(ordinal);
  if (event.ok()) {
    CudaEvent* cuda = static_cast<CudaEvent*>(event->get());
    absl::Status recorded = CudaError(
        cudaEventRecord(cuda->event(), static_cast<cudaStream_t>(stream)),
        absl::StrCat("cudaEventRecord on the producer stream ",
                     absl::Hex(reinterpret_cast<uintptr_t>(stream)),
                     " of device ", ordinal));
    if (!recorded.ok()) event = recorded;
  }
  if (known && previous != ordinal) cudaSetDevice(previous);
  return event;
}

}  // namespace terse
