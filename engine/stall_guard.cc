#include "engine/stall_guard.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace terse {

std::unique_ptr<StallGuard> StallGuard::Start(
    Communicator* comm, int rank, double limit_seconds,
    CollectiveWatchdog::HeldUp held_up) {
  // Heartbeats four times per limit (at most one a second), so a rank is
  // "not heard" well before the limit ends the process.
  absl::StatusOr<std::unique_ptr<PeerMonitor>> peers = PeerMonitor::Connect(
      comm, limit_seconds > 0 ? std::min(1.0, limit_seconds / 4) : 0);
  if (limit_seconds <= 0) return nullptr;
  std::unique_ptr<StallGuard> guard(new StallGuard());
  if (peers.ok()) {
    guard->peers_ = *std::move(peers);
  } else {
    TERSE_LOG(Warning) << "rank " << rank << ": " << peers.status().message()
                       << "; a stall report will not name unreachable ranks";
  }
  guard->watchdog_ = std::make_unique<CollectiveWatchdog>(
      rank, limit_seconds, guard->peers_.get(), std::move(held_up),
      [](const std::string& message) {
        TERSE_LOG(Error) << message << "; ending this process";
        std::fflush(nullptr);
        std::_Exit(70);
      },
      /*poll_seconds=*/0.5,
      [](const std::string& message) {
        TERSE_LOG(Warning) << message;
        std::fflush(nullptr);
      });
  return guard;
}

StallGuard::Phase::Phase(StallGuard* guard, absl::string_view what,
                         absl::string_view subject)
    : guard_(guard) {
  if (guard_ != nullptr) guard_->watchdog_->Enter(absl::StrCat(what, subject));
}

StallGuard::Phase::~Phase() {
  if (guard_ != nullptr) guard_->watchdog_->Leave();
}

}  // namespace terse
