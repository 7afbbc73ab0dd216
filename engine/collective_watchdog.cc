#include "engine/collective_watchdog.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"

namespace terse {
namespace {

constexpr size_t kMaxListed = 20;

}  // namespace

CollectiveWatchdog::CollectiveWatchdog(int rank, double limit_seconds,
                                       const PeerMonitor* peers, HeldUp held_up,
                                       Action action, double poll_seconds,
                                       Action warning)
    : rank_(rank),
      limit_(limit_seconds),
      peers_(peers),
      held_up_(std::move(held_up)),
      action_(std::move(action)),
      poll_(poll_seconds),
      warning_(std::move(warning)) {
  if (limit_ > 0) thread_ = std::thread([this] { Run(); });
}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void CollectiveWatchdog::Enter(absl::string_view phase) {
  absl::MutexLock lock(&mu_);
  inside_ = true;
  phase_.assign(phase.data(), phase.size());
  since_ = Clock::now();
  ++serial_;
}

void CollectiveWatchdog::Leave() {
  absl::MutexLock lock(&mu_);
  inside_ = false;
}

std::string CollectiveWatchdog::Overdue(Clock::time_point now) const {
  // Silent for most of the wait: heartbeats go every second or so.
  return Describe(now, limit_, std::numeric_limits<double>::infinity(),
                  limit_ / 2, /*ending=*/true, nullptr);
}

std::string CollectiveWatchdog::Warning(Clock::time_point now) const {
  return Describe(now, limit_ / 2, limit_, limit_ / 4, /*ending=*/false,
                  nullptr);
}

std::string CollectiveWatchdog::Describe(Clock::time_point now, double after,
                                         double until, double silent_after,
                                         bool ending, uint64_t* serial) const {
  if (limit_ <= 0) return "";
  std::string phase;
  double waited = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!inside_) return "";
    waited = SecondsBetween(since_, now);
    if (waited <= after || waited > until) return "";
    phase = phase_;
    if (serial != nullptr) *serial = serial_;
  }
  // Outside mu_: held_up_ takes its owner's lock.
  std::vector<std::string> held;
  if (held_up_) held = held_up_();
  std::sort(held.begin(), held.end());
  const std::vector<std::string>* tensors = &held;
  std::string message =
      ending ? absl::StrFormat(
                   "terse: rank %d: %s has not completed in %.1f s "
                   "(TERSE_STALL_SHUTDOWN_SECONDS=%g)",
                   rank_, phase, waited, limit_)
             : absl::StrFormat(
                   "terse: rank %d: %s has not completed in %.1f s "
                   "(TERSE_STALL_SHUTDOWN_SECONDS=%g ends this process at "
                   "%g s)",
                   rank_, phase, waited, limit_, limit_);
  if (!tensors->empty()) {
    std::vector<std::string> quoted;
    for (size_t i = 0; i < tensors->size() && i < kMaxListed; ++i) {
      quoted.push_back(absl::StrCat("'", (*tensors)[i], "'"));
    }
    absl::StrAppend(&message, ", holding up ", tensors->size(),
                    tensors->size() == 1 ? " tensor: " : " tensors: ",
                    absl::StrJoin(quoted, ", "),
                    tensors->size() > kMaxListed ? ", ..." : "");
  }
  if (peers_ != nullptr) {
    const std::vector<int> silent = peers_->Silent(silent_after, now);
    if (silent.empty()) {
      absl::StrAppend(&message,
                      "; every rank still answers heartbeats (a peer is "
                      "stuck, not unreachable)");
    } else {
      std::vector<std::string> named;
      for (int r : silent) {
        named.push_back(absl::StrFormat("rank %d (not heard for %.1f s)", r,
                                        peers_->SilentFor(r, now)));
      }
      absl::StrAppend(&message, "; unreachable: ", absl::StrJoin(named, ", "));
    }
  }
  return message;
}

void CollectiveWatchdog::Run() {
  const absl::Duration poll = absl::Seconds(poll_);
  uint64_t warned = 0;  // The serial of the last phase warned about.
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    mu_.AwaitWithTimeout(absl::Condition(&stop_), poll);
    if (stop_) return;
    mu_.Unlock();
    const Clock::time_point now = Clock::now();
    const std::string message = Overdue(now);
    if (!message.empty()) {
      action_(message);
    } else if (warning_) {
      uint64_t serial = 0;
      const std::string warning =
          Describe(now, limit_ / 2, limit_, limit_ / 4, false, &serial);
      if (!warning.empty() && serial != warned) {
        warned = serial;
        warning_(warning);
      }
    }
    mu_.Lock();
    if (!message.empty()) return;  // Once.
  }
}

}  // namespace terse
