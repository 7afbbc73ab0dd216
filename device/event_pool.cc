#include "device/event_pool.h"

#include <utility>

namespace terse {

EventPool::EventPool(CreateFn create, DestroyFn destroy)
    : create_(std::move(create)), destroy_(std::move(destroy)) {}

EventPool::~EventPool() {
  // No Acquire or Release can run now; the lock only satisfies the
  // annotations.
  std::map<int, std::vector<Handle>> free;
  {
    absl::MutexLock lock(&mu_);
    free.swap(free_);
  }
  for (auto& [ordinal, handles] : free) {
    for (Handle handle : handles) destroy_(handle);
  }
}

absl::StatusOr<EventPool::Handle> EventPool::Acquire(int ordinal) {
  {
    absl::MutexLock lock(&mu_);
    auto it = free_.find(ordinal);
    if (it != free_.end() && !it->second.empty()) {
      Handle handle = it->second.back();
      it->second.pop_back();
      ++stats_.reused;
      return handle;
    }
  }
  // Outside the lock: creating a CUDA event is a driver call.
  absl::StatusOr<Handle> created = create_(ordinal);
  if (created.ok()) {
    absl::MutexLock lock(&mu_);
    ++stats_.created;
  }
  return created;
}

void EventPool::Release(int ordinal, Handle handle) {
  absl::MutexLock lock(&mu_);
  free_[ordinal].push_back(handle);
}

EventPool::Stats EventPool::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

int64_t EventPool::free_count(int ordinal) const {
  absl::MutexLock lock(&mu_);
  auto it = free_.find(ordinal);
  return it == free_.end() ? 0 : static_cast<int64_t>(it->second.size());
}

}  // namespace terse
