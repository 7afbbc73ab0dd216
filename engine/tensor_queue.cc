#include "engine/tensor_queue.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace terse {

absl::Status TensorQueue::Push(TensorEntry& entry) {
  absl::MutexLock lock(&mu_);
  if (!closed_.ok()) return Detached(closed_);
  if (!in_flight_.insert(entry.name).second) {
    return absl::InvalidArgumentError(absl::StrCat(
        "an operation named '", entry.name,
        "' is already in flight; names must be unique among pending ops"));
  }
  queued_.push_back(std::move(entry));
  return absl::OkStatus();
}

void TensorQueue::Drain(std::vector<TensorEntry>* out) {
  absl::MutexLock lock(&mu_);
  for (TensorEntry& e : queued_) out->push_back(std::move(e));
  queued_.clear();
}

void TensorQueue::Release(const std::string& name) {
  absl::MutexLock lock(&mu_);
  in_flight_.erase(name);
}

void TensorQueue::ReleaseAll(const std::vector<std::string>& names) {
  absl::MutexLock lock(&mu_);
  for (const std::string& name : names) in_flight_.erase(name);
}

void TensorQueue::Close(absl::Status status) {
  absl::MutexLock lock(&mu_);
  if (closed_.ok()) closed_ = Detached(status);
}

absl::Status TensorQueue::closed_status() const {
  absl::MutexLock lock(&mu_);
  return Detached(closed_);
}

std::vector<std::string> TensorQueue::InFlightNames() const {
  absl::MutexLock lock(&mu_);
  return std::vector<std::string>(in_flight_.begin(), in_flight_.end());
}

void TensorQueue::RequestShutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_requested_ = true;
}

bool TensorQueue::shutdown_requested() const {
  absl::MutexLock lock(&mu_);
  return shutdown_requested_;
}

}  // namespace terse
