// Engine: the process-set half (engine.h): resolving an op's set at
// enqueue, adding and removing sets (a global barrier carries the change,
// so every rank applies it at the same point of the same cycle), and
// serving the non-global sets each cycle.
#include "engine/engine.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status.h"

namespace terse {
namespace {

constexpr char kSetChangePrefix[] = "__terse.process_set.change.";
constexpr int64_t kAdd = 0;
constexpr int64_t kRemove = 1;

std::string Ranks(const std::vector<int>& ranks) {
  return absl::StrCat("[", absl::StrJoin(ranks, ","), "]");
}

}  // namespace

absl::StatusOr<int> Engine::ResolveProcessSet(TensorEntry& entry) const {
  if (entry.process_set == 0) return size_;
  std::vector<int> ranks;
  {
    absl::MutexLock lock(&mu_);
    auto it = set_ranks_.find(entry.process_set);
    if (it == set_ranks_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", entry.name, "': process set ",
                       entry.process_set, " is not registered (add it with ",
                       "add_process_set or init(process_sets=...))"));
    }
    ranks = it->second;
  }
  auto mine = std::find(ranks.begin(), ranks.end(), rank_);
  if (mine == ranks.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", entry.name, "': this rank (", rank_,
        ") is not in process set ", entry.process_set, " (ranks ",
        Ranks(ranks), "); only its members may enqueue on it"));
  }
  if (entry.op == proto::BROADCAST) {
    auto root = std::find(ranks.begin(), ranks.end(), entry.root_rank);
    if (root == ranks.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", entry.name, "': root rank ", entry.root_rank,
          " is not in process set ", entry.process_set, " (ranks ",
          Ranks(ranks), ")"));
    }
    entry.root_rank = static_cast<int>(root - ranks.begin());
  }
  return static_cast<int>(ranks.size());
}

absl::StatusOr<int32_t> Engine::AddProcessSet(const std::vector<int>& ranks) {
  absl::Status valid = CheckSubgroupRanks(ranks, size_);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("add process set ", Ranks(ranks), ": ", valid.message()));
  }
  std::vector<int64_t> change = {kAdd};
  change.insert(change.end(), ranks.begin(), ranks.end());
  return ChangeProcessSets(std::move(change));
}

absl::Status Engine::RemoveProcessSet(int32_t id) {
  if (id == 0) {
    return absl::InvalidArgumentError(
        "the global process set (0) cannot be removed");
  }
  return ChangeProcessSets({kRemove, id}).status();
}

absl::StatusOr<int32_t> Engine::ChangeProcessSets(std::vector<int64_t> change) {
  TensorEntry e;
  {
    absl::MutexLock lock(&mu_);
    e.name = absl::StrCat(kSetChangePrefix, set_change_seq_++);
  }
  e.op = proto::BARRIER;
  e.shape = std::move(change);
  const std::string name = e.name;
  TERSE_ASSIGN_OR_RETURN(Handle handle, Enqueue(std::move(e)));
  TERSE_RETURN_IF_ERROR(Wait(handle));
  absl::MutexLock lock(&mu_);
  auto node = set_changes_.extract(name);
  if (node.empty()) {
    return absl::InternalError(
        absl::StrCat("process set change '", name, "' has no outcome"));
  }
  return std::move(node.mapped());
}

absl::StatusOr<std::vector<int>> Engine::ProcessSetRanks(int32_t id) const {
  absl::MutexLock lock(&mu_);
  auto it = set_ranks_.find(id);
  if (it == set_ranks_.end()) {
    return absl::NotFoundError(
        absl::StrCat("process set ", id, " is not registered"));
  }
  return it->second;
}

std::vector<int32_t> Engine::ProcessSetIds() const {
  absl::MutexLock lock(&mu_);
  std::vector<int32_t> ids;
  for (const auto& [id, ranks] : set_ranks_) ids.push_back(id);
  return ids;
}

absl::StatusOr<int32_t> Engine::ReserveSet(const std::vector<int>& ranks) {
  absl::MutexLock lock(&mu_);
  for (const auto& [id, existing] : set_ranks_) {
    if (existing == ranks) {
      return absl::AlreadyExistsError(absl::StrCat(
          "process set ", id, " already holds ranks ", Ranks(ranks)));
    }
  }
  const int32_t id = next_set_id_++;
  set_ranks_[id] = ranks;
  return id;
}

absl::Status Engine::BuildSet(int32_t id, const std::vector<int>& ranks) {
  // Collective over every rank, members or not.
  absl::StatusOr<std::unique_ptr<Communicator>> sub =
      comm_->CreateSubgroup(ranks);
  if (!sub.ok()) {
    return absl::Status(sub.status().code(),
                        absl::StrCat("process set ", id, " ", Ranks(ranks),
                                     ": ", sub.status().message()));
  }
  if (*sub != nullptr) {
    Communicator* raw = sub->get();
    auto runner = std::make_unique<ProcessSetRunner>(
        id, ranks, raw, *std::move(sub), &context_,
        static_cast<ProcessSetHost*>(this));
    // Device tensors of the set: its own executor, whose device
    // communicators (built at the set's first device op, collectively over
    // its members) span the set, on the devices the global executor pinned.
    absl::StatusOr<std::unique_ptr<CommunicatorRegistry>> registry =
        registry_->ForSubgroup(raw);
    if (!registry.ok()) return registry.status();
    auto device = std::make_unique<DeviceExecutor>(
        config_, registry->get(), runtimes_, &runner->reducer(),
        DeviceNeedsReducer(config_));
    device->FollowOrdinalsOf(&device_);
    runner->own_device(*std::move(registry), std::move(device));
    RegisterSetReducer(*runner);
    sets_[id] = std::move(runner);
  }
  return absl::OkStatus();
}

void Engine::CreateStaticSets() {
  // Reserved (ids 1, 2, ...) by the constructor.
  for (size_t i = 0; i < static_sets_.size(); ++i) {
    NoteLocalError(BuildSet(static_cast<int32_t>(i + 1), static_sets_[i]));
  }
}

void Engine::ProcessSetChange(const proto::Response& response) {
  const std::string& name = response.names(0);
  std::vector<int64_t> change(response.shape().begin(),
                              response.shape().end());
  absl::StatusOr<int32_t> outcome;
  if (!absl::StartsWith(name, kSetChangePrefix) || change.empty()) {
    outcome = absl::InvalidArgumentError(
        absl::StrCat("malformed process set change '", name, "'"));
  } else if (change[0] == kAdd) {
    std::vector<int> ranks(change.begin() + 1, change.end());
    absl::Status valid = CheckSubgroupRanks(ranks, size_);
    outcome = valid.ok() ? ReserveSet(ranks) : absl::StatusOr<int32_t>(valid);
    if (outcome.ok()) {
      absl::Status built = BuildSet(*outcome, ranks);
      if (!built.ok()) {
        NoteLocalError(built);  // A failed collective: fatal.
        outcome = built;
      }
    }
  } else if (change[0] == kRemove && change.size() == 2) {
    const int32_t id = static_cast<int32_t>(change[1]);
    bool known = false;
    {
      absl::MutexLock lock(&mu_);
      known = id != 0 && set_ranks_.erase(id) > 0;
      barrier_seq_.erase(id);
    }
    if (!known) {
      outcome = absl::NotFoundError(
          absl::StrCat("process set ", id, " is not registered"));
    } else {
      auto it = sets_.find(id);
      if (it != sets_.end()) {
        it->second->FailAll(absl::AbortedError(
            absl::StrCat("process set ", id, " was removed")));
        UnregisterSetReducers({id});
        sets_.erase(it);
      }
      outcome = id;
    }
  } else {
    outcome = absl::InvalidArgumentError(
        absl::StrCat("malformed process set change '", name, "'"));
  }
  // Read by the thread waiting in ChangeProcessSets: detached (types.h).
  if (!outcome.ok()) outcome = Detached(outcome.status());
  absl::MutexLock lock(&mu_);
  set_changes_.insert_or_assign(name, std::move(outcome));
}

void Engine::AwaitBucketMembers() {
  std::vector<std::pair<int32_t, std::string>> names;
  global_->AwaitedNames(&names);
  for (const auto& [id, runner] : sets_) runner->AwaitedNames(&names);
  queue_.Await(std::move(names));
}

void Engine::CycleSets() {
  for (auto& [id, runner] : sets_) {
    CycleOutcome outcome;
    absl::Status negotiated = runner->Cycle(false, absl::OkStatus(), &outcome);
    NoteLocalError(runner->TakeLocalError());
    if (!negotiated.ok()) {
      // This set cannot negotiate any more; the global set carries the error
      // to every rank next cycle.
      NoteLocalError(absl::Status(
          negotiated.code(), absl::StrCat("process set ", id, ": ",
                                          negotiated.message())));
      return;
    }
    if (!outcome.stall_warning.empty()) {
      TERSE_LOG(Warning) << outcome.stall_warning;
      absl::MutexLock lock(&mu_);
      stall_warning_ = outcome.stall_warning;
    }
    if (!outcome.error.ok()) NoteLocalError(outcome.error);
  }
}

}  // namespace terse
