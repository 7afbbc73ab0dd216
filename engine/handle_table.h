// HandleTable: the completion state of every operation an engine accepted.
//
// Thread-safe. The background thread completes handles; any thread may poll
// or wait. A handle is released (forgotten) by Wait(), except a successful
// allgather's, which TakeAllgatherResult() releases with its result.
#ifndef TERSE_ENGINE_HANDLE_TABLE_H_
#define TERSE_ENGINE_HANDLE_TABLE_H_

#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/types.h"

namespace terse {

class HandleTable {
 public:
  HandleTable() = default;
  HandleTable(const HandleTable&) = delete;
  HandleTable& operator=(const HandleTable&) = delete;

  // A new pending handle.
  Handle Allocate(bool is_allgather);
  // Forgets a handle that was never handed out (enqueue failed).
  void Discard(Handle handle);

  // Marks `handle` complete with `status` (and, for a successful allgather,
  // its result) and wakes its waiters. Completing twice keeps the first.
  void Complete(Handle handle, absl::Status status,
                AllgatherResult result = {});

  // Complete() for several handles under one lock (one wake-up of waiters).
  void CompleteAll(const std::vector<Handle>& handles,
                   const absl::Status& status);

  // True once complete. NotFound for an unknown or released handle.
  absl::StatusOr<bool> Poll(Handle handle) const;
  // Blocks until complete; returns the op's status; releases the handle
  // unless it is a successful allgather. NotFound for an unknown handle.
  absl::Status Wait(Handle handle);
  // A completed, successful allgather's result; releases the handle.
  // FailedPrecondition if it has not completed or is not an allgather.
  absl::StatusOr<AllgatherResult> TakeAllgatherResult(Handle handle);

  // Number of handles not yet released (for tests).
  int64_t size() const;

 private:
  struct State {
    bool done = false;
    bool is_allgather = false;
    absl::Status status;
    AllgatherResult result;
  };

  mutable absl::Mutex mu_;
  Handle next_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<Handle, std::shared_ptr<State>> states_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace terse

#endif  // TERSE_ENGINE_HANDLE_TABLE_H_
