// EventPool: reusable native event handles (cudaEvent_t for CudaRuntime),
// a free list per device ordinal. Creating and destroying a CUDA event per
// operation costs driver calls on the framework's thread; Horovod keeps a
// pool for the same reason. The pool is independent of CUDA (the handle
// functions are injected), so its logic is tested without a device.
//
// A handle taken by Acquire belongs to the caller until Release gives it
// back; Release never destroys it (the free list grows to the peak number
// of handles out at once), the destructor destroys those on the free lists.
// Reuse is safe for events that the caller records right away: a CUDA wait
// enqueued earlier uses the record it saw, not a later one.
//
// Thread-safe. The handle functions run without the pool's lock held.
#ifndef TERSE_DEVICE_EVENT_POOL_H_
#define TERSE_DEVICE_EVENT_POOL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace terse {

class EventPool {
 public:
  using Handle = void*;
  // Makes a new handle on device `ordinal`; its error is Acquire's.
  using CreateFn = std::function<absl::StatusOr<Handle>(int ordinal)>;
  using DestroyFn = std::function<void(Handle)>;

  struct Stats {
    int64_t created = 0;  // Handles made by CreateFn.
    int64_t reused = 0;   // Acquires served from a free list.
  };

  EventPool(CreateFn create, DestroyFn destroy);
  ~EventPool();

  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;

  // A free handle of `ordinal`'s list, or a new one from CreateFn.
  absl::StatusOr<Handle> Acquire(int ordinal);
  // Puts `handle`, taken by Acquire(ordinal), on `ordinal`'s free list.
  void Release(int ordinal, Handle handle);

  Stats stats() const;
  int64_t free_count(int ordinal) const;

 private:
  const CreateFn create_;
  const DestroyFn destroy_;
  mutable absl::Mutex mu_;
  std::map<int, std::vector<Handle>> free_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace terse

#endif  // TERSE_DEVICE_EVENT_POOL_H_
