#include "engine/handle_table.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace terse {
namespace {

absl::Status UnknownHandle(Handle handle) {
  return absl::NotFoundError(
      absl::StrCat("unknown handle ", handle,
                   " (never issued, or already released by wait)"));
}

}  // namespace

Handle HandleTable::Allocate(bool is_allgather) {
  absl::MutexLock lock(&mu_);
  const Handle handle = next_++;
  auto state = std::make_shared<State>();
  state->is_allgather = is_allgather;
  states_.emplace(handle, std::move(state));
  return handle;
}

void HandleTable::Discard(Handle handle) {
  absl::MutexLock lock(&mu_);
  states_.erase(handle);
}

void HandleTable::Complete(Handle handle, absl::Status status,
                           AllgatherResult result) {
  absl::MutexLock lock(&mu_);
  auto it = states_.find(handle);
  if (it == states_.end() || it->second->done) return;
  State& state = *it->second;
  state.done = true;
  state.status = Detached(status);
  state.result = std::move(result);
}

void HandleTable::CompleteAll(const std::vector<Handle>& handles,
                              const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  for (Handle handle : handles) {
    auto it = states_.find(handle);
    if (it == states_.end() || it->second->done) continue;
    it->second->done = true;
    it->second->status = Detached(status);
  }
}

absl::StatusOr<bool> HandleTable::Poll(Handle handle) const {
  absl::MutexLock lock(&mu_);
  auto it = states_.find(handle);
  if (it == states_.end()) return UnknownHandle(handle);
  return it->second->done;
}

absl::Status HandleTable::Wait(Handle handle) {
  absl::MutexLock lock(&mu_);
  auto it = states_.find(handle);
  if (it == states_.end()) return UnknownHandle(handle);
  // Shared ownership: a second waiter may release the handle meanwhile.
  std::shared_ptr<State> state = it->second;
  mu_.Await(absl::Condition(&state->done));
  absl::Status status = Detached(state->status);
  it = states_.find(handle);
  if (it != states_.end() && !(state->is_allgather && status.ok())) {
    states_.erase(it);
  }
  return status;
}

absl::StatusOr<AllgatherResult> HandleTable::TakeAllgatherResult(
    Handle handle) {
  absl::MutexLock lock(&mu_);
  auto it = states_.find(handle);
  if (it == states_.end()) return UnknownHandle(handle);
  State& state = *it->second;
  if (!state.is_allgather) {
    return absl::FailedPreconditionError(
        absl::StrCat("handle ", handle, " is not an allgather"));
  }
  if (!state.done) {
    return absl::FailedPreconditionError(
        absl::StrCat("allgather handle ", handle, " has not completed"));
  }
  if (!state.status.ok()) {
    absl::Status status = Detached(state.status);
    states_.erase(it);
    return status;
  }
  AllgatherResult result = std::move(state.result);
  states_.erase(it);
  return result;
}

int64_t HandleTable::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(states_.size());
}

}  // namespace terse
