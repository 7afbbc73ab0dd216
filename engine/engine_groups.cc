// Engine's grouped ops (engine.h, GroupStart/GroupEnd): ops a thread
// enqueues inside a group are held here and queued together at GroupEnd,
// tagged with the group's name and size; the coordinator
// (engine/coordinator.h) then answers them together.
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"

namespace terse {

absl::Status Engine::GroupStart(const std::string& name) {
  if (name.empty()) {
    return absl::InvalidArgumentError("a group needs a non-empty name");
  }
  absl::MutexLock lock(&groups_mu_);
  auto [it, inserted] =
      open_groups_.try_emplace(std::this_thread::get_id(), OpenGroup{name, {}});
  if (!inserted) {
    return absl::FailedPreconditionError(
        absl::StrCat("group '", name, "': this thread has group '",
                     it->second.name, "' open (end it first)"));
  }
  num_open_groups_.fetch_add(1, std::memory_order_release);
  return absl::OkStatus();
}

absl::StatusOr<bool> Engine::HoldInGroup(TensorEntry& entry) {
  absl::MutexLock lock(&groups_mu_);
  auto it = open_groups_.find(std::this_thread::get_id());
  if (it == open_groups_.end()) return false;
  OpenGroup& group = it->second;
  if (entry.op == proto::JOIN || entry.op == proto::BARRIER) {
    return absl::InvalidArgumentError(absl::StrCat(
        "group '", group.name, "': join and barrier cannot be grouped"));
  }
  if (!group.entries.empty() &&
      group.entries[0].process_set != entry.process_set) {
    return absl::InvalidArgumentError(absl::StrCat(
        "group '", group.name, "': '", entry.name, "' is on process set ",
        entry.process_set, ", the group's ops on process set ",
        group.entries[0].process_set));
  }
  group.entries.push_back(std::move(entry));
  return true;
}

absl::Status Engine::GroupEnd() {
  OpenGroup group;
  {
    absl::MutexLock lock(&groups_mu_);
    auto it = open_groups_.find(std::this_thread::get_id());
    if (it == open_groups_.end()) {
      return absl::FailedPreconditionError(
          "GroupEnd: this thread has no group open");
    }
    group = std::move(it->second);
    open_groups_.erase(it);
    num_open_groups_.fetch_sub(1, std::memory_order_release);
  }
  const int32_t size = static_cast<int32_t>(group.entries.size());
  for (TensorEntry& entry : group.entries) {
    entry.group = group.name;
    entry.group_size = size;
  }
  absl::Status pushed = queue_.PushAll(group.entries);
  if (pushed.ok()) return absl::OkStatus();
  // Nothing was queued: every op of the group fails here, at once (a group
  // with a member missing would wait for it on every rank).
  const absl::Status failed(
      pushed.code(),
      absl::StrCat("group '", group.name, "': ", pushed.message()));
  std::vector<Handle> handles;
  for (TensorEntry& entry : group.entries) {
    if (entry.callback) entry.callback(failed);
    handles.push_back(entry.handle);
  }
  handles_.CompleteAll(handles, failed);
  return failed;
}

}  // namespace terse
