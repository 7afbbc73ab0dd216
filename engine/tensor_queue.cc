#include "engine/tensor_queue.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace terse {

absl::Status TensorQueue::Push(TensorEntry& entry) {
  absl::MutexLock lock(&mu_);
  if (!closed_.ok()) return Detached(closed_);
  if (!in_flight_.insert({entry.process_set, entry.name}).second) {
    return InFlightError(entry);
  }
  Enqueued(entry);
  if (ShouldWake()) wake_.Signal();
  return absl::OkStatus();
}

absl::Status TensorQueue::PushAll(std::vector<TensorEntry>& entries) {
  absl::MutexLock lock(&mu_);
  if (!closed_.ok()) return Detached(closed_);
  absl::flat_hash_set<std::pair<int32_t, std::string>> names;
  for (const TensorEntry& e : entries) {
    std::pair<int32_t, std::string> key(e.process_set, e.name);
    if (in_flight_.contains(key) || !names.insert(std::move(key)).second) {
      return InFlightError(e);
    }
  }
  for (TensorEntry& e : entries) {
    in_flight_.insert({e.process_set, e.name});
    Enqueued(e);
  }
  if (ShouldWake()) wake_.Signal();
  return absl::OkStatus();
}

absl::Status TensorQueue::InFlightError(const TensorEntry& entry) {
  return absl::InvalidArgumentError(
      absl::StrCat("an operation named '", entry.name, "' is already in flight",
                   entry.process_set == 0
                       ? std::string()
                       : absl::StrCat(" on process set ", entry.process_set),
                   "; names must be unique among pending ops"));
}

void TensorQueue::Enqueued(TensorEntry& entry) {
  std::pair<int32_t, std::string> key(entry.process_set, entry.name);
  if (!awaited_.empty() && awaited_.erase(key) > 0 && awaited_.empty()) {
    awaited_arrived_ = true;
  }
  if (!seen_.contains(key)) {
    if (seen_.size() >= kMaxSeenNames) seen_.clear();
    seen_.insert(std::move(key));
    ++queued_new_;
  }
  queued_.push_back(std::move(entry));
}

bool TensorQueue::ShouldWake() const {
  // The engine holds no op when every name in flight is still queued.
  const bool idle = in_flight_.size() <= queued_.size();
  const bool repeats = !queued_.empty() && queued_new_ == 0;
  return (idle && repeats) || awaited_arrived_ || !closed_.ok() ||
         shutdown_requested_;
}

void TensorQueue::Await(std::vector<std::pair<int32_t, std::string>> names) {
  absl::MutexLock lock(&mu_);
  awaited_.clear();
  awaited_arrived_ = false;
  if (names.empty()) return;
  awaited_.reserve(names.size());
  for (auto& key : names) awaited_.insert(std::move(key));
  for (const TensorEntry& e : queued_) {
    awaited_.erase(std::make_pair(e.process_set, e.name));
  }
  awaited_arrived_ = awaited_.empty();
}

bool TensorQueue::WaitForPush(Clock::time_point deadline) {
  const absl::Time until =
      absl::Now() + absl::FromChrono(deadline - Clock::now());
  absl::MutexLock lock(&mu_);
  while (true) {
    if (ShouldWake()) return true;
    // The condition is checked by this thread (a CondVar, not an
    // absl::Condition that other threads would evaluate).
    if (wake_.WaitWithDeadline(&mu_, until)) return false;  // Timed out.
  }
}

void TensorQueue::Drain(std::vector<TensorEntry>* out) {
  absl::MutexLock lock(&mu_);
  for (TensorEntry& e : queued_) out->push_back(std::move(e));
  queued_.clear();
  queued_new_ = 0;
  awaited_.clear();
  awaited_arrived_ = false;
}

void TensorQueue::Release(int32_t set, const std::string& name) {
  absl::MutexLock lock(&mu_);
  in_flight_.erase(std::make_pair(set, name));
}

void TensorQueue::ReleaseAll(int32_t set,
                             const std::vector<std::string>& names) {
  absl::MutexLock lock(&mu_);
  for (const std::string& name : names) {
    in_flight_.erase(std::make_pair(set, name));
  }
}

void TensorQueue::Close(absl::Status status) {
  absl::MutexLock lock(&mu_);
  if (closed_.ok()) closed_ = Detached(status);
  wake_.Signal();
}

absl::Status TensorQueue::closed_status() const {
  absl::MutexLock lock(&mu_);
  return Detached(closed_);
}

std::vector<std::string> TensorQueue::InFlightNames() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> names;
  names.reserve(in_flight_.size());
  for (const auto& [set, name] : in_flight_) {
    names.push_back(set == 0 ? name
                             : absl::StrCat(name, " (process set ", set, ")"));
  }
  return names;
}

void TensorQueue::RequestShutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_requested_ = true;
  wake_.Signal();
}

bool TensorQueue::shutdown_requested() const {
  absl::MutexLock lock(&mu_);
  return shutdown_requested_;
}

}  // namespace terse
