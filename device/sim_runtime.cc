#include "device/sim_runtime.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <new>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"

namespace terse {
namespace {

constexpr std::align_val_t kAlignment{64};

// An event's state, shared with the stream work that completes or waits on
// it, so that the Event object may be destroyed first.
class SimEventState {
 public:
  // Record(): the sequence number the recording stream will complete.
  int64_t NextRecord() {
    absl::MutexLock lock(&mu_);
    return ++recorded_;
  }
  int64_t recorded() const {
    absl::MutexLock lock(&mu_);
    return recorded_;
  }
  bool Reached(int64_t target) const {
    absl::MutexLock lock(&mu_);
    return completed_ >= target;
  }
  void Complete(int64_t seq) {
    absl::MutexLock lock(&mu_);
    completed_ = std::max(completed_, seq);
    done_.SignalAll();
  }
  void WaitFor(int64_t target) const {
    absl::MutexLock lock(&mu_);
    while (completed_ < target) done_.Wait(&mu_);
  }

 private:
  mutable absl::Mutex mu_;
  mutable absl::CondVar done_;
  int64_t recorded_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t completed_ ABSL_GUARDED_BY(mu_) = 0;
};

class SimEvent : public Event {
 public:
  explicit SimEvent(int ordinal)
      : ordinal_(ordinal), state_(std::make_shared<SimEventState>()) {}

  absl::StatusOr<bool> Query() override {
    return state_->Reached(state_->recorded());
  }
  absl::Status HostWait() override {
    state_->WaitFor(state_->recorded());
    return absl::OkStatus();
  }

  int ordinal() const { return ordinal_; }
  const std::shared_ptr<SimEventState>& state() const { return state_; }

 private:
  const int ordinal_;
  const std::shared_ptr<SimEventState> state_;
};

absl::StatusOr<SimEvent*> AsSimEvent(Event* event) {
  SimEvent* sim = dynamic_cast<SimEvent*>(event);
  if (sim == nullptr) {
    return absl::InvalidArgumentError(
        "the event is not a simulated-device event (null or from another "
        "runtime)");
  }
  return sim;
}

}  // namespace

// The stream's worker thread and its queue.
class SimStream::Worker {
 public:
  explicit Worker(std::chrono::microseconds delay) : delay_(delay) {
    thread_ = std::thread([this] { Run(); });
  }
  ~Worker() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
      held_ = false;  // Drain what is queued.
      wake_.SignalAll();
    }
    thread_.join();
  }

  void Push(std::function<void()> fn) {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(fn));
    ++pending_;
    wake_.SignalAll();
  }
  void SetHeld(bool held) {
    absl::MutexLock lock(&mu_);
    held_ = held;
    wake_.SignalAll();
  }
  int64_t pending() const {
    absl::MutexLock lock(&mu_);
    return pending_;
  }

 private:
  void Run() {
    while (true) {
      std::function<void()> fn;
      {
        absl::MutexLock lock(&mu_);
        while (!(stop_ && queue_.empty()) && (queue_.empty() || held_)) {
          wake_.Wait(&mu_);
        }
        if (queue_.empty()) return;  // Stopped and drained.
        fn = std::move(queue_.front());
        queue_.pop_front();
      }
      // The deliberate lateness (see the header).
      if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
      fn();
      absl::MutexLock lock(&mu_);
      --pending_;
    }
  }

  const std::chrono::microseconds delay_;
  mutable absl::Mutex mu_;
  absl::CondVar wake_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  int64_t pending_ ABSL_GUARDED_BY(mu_) = 0;
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

SimStream::SimStream(int ordinal, std::chrono::microseconds delay)
    : ordinal_(ordinal), worker_(std::make_unique<Worker>(delay)) {}

SimStream::~SimStream() = default;

absl::Status SimStream::Record(Event* event) {
  absl::StatusOr<SimEvent*> sim = AsSimEvent(event);
  if (!sim.ok()) return sim.status();
  std::shared_ptr<SimEventState> state = (*sim)->state();
  const int64_t seq = state->NextRecord();
  worker_->Push([state, seq] { state->Complete(seq); });
  return absl::OkStatus();
}

absl::Status SimStream::WaitEvent(Event* event) {
  absl::StatusOr<SimEvent*> sim = AsSimEvent(event);
  if (!sim.ok()) return sim.status();
  std::shared_ptr<SimEventState> state = (*sim)->state();
  const int64_t target = state->recorded();
  if (target == 0) return absl::OkStatus();  // Never recorded: done.
  worker_->Push([state, target] { state->WaitFor(target); });
  return absl::OkStatus();
}

absl::Status SimStream::Memcpy(void* dst, const void* src, int64_t bytes) {
  if (bytes < 0 || ((dst == nullptr || src == nullptr) && bytes > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Memcpy: null buffer or negative size (", bytes, ")"));
  }
  if (bytes == 0) return absl::OkStatus();
  worker_->Push([dst, src, bytes] {
    std::memcpy(dst, src, static_cast<size_t>(bytes));
  });
  return absl::OkStatus();
}

absl::Status SimStream::Memset(void* dst, int value, int64_t bytes) {
  if (bytes < 0 || (dst == nullptr && bytes > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Memset: null buffer or negative size (", bytes, ")"));
  }
  if (bytes == 0) return absl::OkStatus();
  worker_->Push([dst, value, bytes] {
    std::memset(dst, value, static_cast<size_t>(bytes));
  });
  return absl::OkStatus();
}

absl::Status SimStream::LaunchHost(std::function<void()> fn) {
  if (!fn) return absl::InvalidArgumentError("LaunchHost: empty function");
  worker_->Push(std::move(fn));
  return absl::OkStatus();
}

absl::Status SimStream::Synchronize() {
  SimEvent done(ordinal_);
  absl::Status recorded = Record(&done);
  if (!recorded.ok()) return recorded;
  return done.HostWait();
}

void SimStream::Hold() { worker_->SetHeld(true); }
void SimStream::Release() { worker_->SetHeld(false); }
int64_t SimStream::pending() const { return worker_->pending(); }

SimRuntime::SimRuntime(SimOptions options) : options_(options) {}

SimRuntime::~SimRuntime() {
  absl::MutexLock lock(&mu_);
  for (const auto& [start, allocation] : device_) {
    ::operator delete(reinterpret_cast<void*>(start), kAlignment);
  }
  device_.clear();
}

absl::Status SimRuntime::CheckOrdinal(int ordinal,
                                      absl::string_view what) const {
  if (ordinal < 0 || ordinal >= options_.devices) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": simulated device ordinal ", ordinal,
                     " outside [0, ", options_.devices, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<void*> SimRuntime::Allocate(int ordinal, int64_t bytes) {
  absl::Status valid = CheckOrdinal(ordinal, "Allocate");
  if (!valid.ok()) return valid;
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Allocate: negative size ", bytes));
  }
  void* ptr = ::operator new(static_cast<size_t>(std::max<int64_t>(bytes, 1)),
                             kAlignment, std::nothrow);
  if (ptr == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "simulated device ", ordinal, ": out of memory for ", bytes, " bytes"));
  }
  absl::MutexLock lock(&mu_);
  device_[reinterpret_cast<uintptr_t>(ptr)] = Allocation{bytes, ordinal};
  return ptr;
}

absl::Status SimRuntime::Free(void* ptr) {
  if (ptr == nullptr) return absl::OkStatus();
  {
    absl::MutexLock lock(&mu_);
    auto it = device_.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == device_.end()) {
      return absl::InvalidArgumentError(
          "Free: the pointer is not a simulated-device allocation");
    }
    device_.erase(it);
  }
  ::operator delete(ptr, kAlignment);
  return absl::OkStatus();
}

absl::StatusOr<void*> SimRuntime::AllocateHost(int64_t bytes) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("AllocateHost: negative size ", bytes));
  }
  void* ptr = ::operator new(static_cast<size_t>(std::max<int64_t>(bytes, 1)),
                             kAlignment, std::nothrow);
  if (ptr == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("AllocateHost: out of memory for ", bytes, " bytes"));
  }
  return ptr;
}

absl::Status SimRuntime::FreeHost(void* ptr) {
  if (ptr != nullptr) ::operator delete(ptr, kAlignment);
  return absl::OkStatus();
}

absl::Status SimRuntime::CheckDeviceMemory(const void* ptr, int64_t bytes,
                                           int ordinal,
                                           absl::string_view what) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": negative size ", bytes));
  }
  if (ptr == nullptr) {
    if (bytes == 0) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": null pointer with ", bytes, " bytes"));
  }
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  absl::MutexLock lock(&mu_);
  auto it = device_.upper_bound(p);
  if (it != device_.begin()) {
    --it;
    const uintptr_t end = it->first + static_cast<uintptr_t>(it->second.bytes);
    if (p >= it->first && (p < end || (bytes == 0 && p == end)) &&
        p + static_cast<uintptr_t>(bytes) <= end) {
      if (it->second.ordinal != ordinal) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, " is memory of sim:", it->second.ordinal, ", not sim:",
            ordinal));
      }
      return absl::OkStatus();
    }
    if (p >= it->first && p < end) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": ", bytes, " bytes run past the end of its "
                       "simulated-device allocation (", it->second.bytes,
                       " bytes)"));
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      what, " is not simulated-device memory (a host pointer or memory of "
            "another device)"));
}

absl::StatusOr<std::unique_ptr<Stream>> SimRuntime::CreateStream(int ordinal) {
  absl::StatusOr<std::unique_ptr<SimStream>> stream =
      CreateSimStream(ordinal, options_.delay);
  if (!stream.ok()) return stream.status();
  return std::unique_ptr<Stream>(std::move(*stream));
}

absl::StatusOr<std::unique_ptr<SimStream>> SimRuntime::CreateSimStream(
    int ordinal, std::chrono::microseconds delay) {
  absl::Status valid = CheckOrdinal(ordinal, "CreateStream");
  if (!valid.ok()) return valid;
  return std::unique_ptr<SimStream>(new SimStream(ordinal, delay));
}

absl::StatusOr<std::unique_ptr<Event>> SimRuntime::CreateEvent(int ordinal) {
  absl::Status valid = CheckOrdinal(ordinal, "CreateEvent");
  if (!valid.ok()) return valid;
  return std::unique_ptr<Event>(new SimEvent(ordinal));
}

int64_t SimRuntime::live_allocations() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(device_.size());
}

}  // namespace terse
