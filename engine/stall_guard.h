// StallGuard: what the engine needs so that a rank stuck inside a blocking
// collective (a peer unreachable; MPI over TCP waits for ever) ends within
// TERSE_STALL_SHUTDOWN_SECONDS with a message naming the phase, the tensors
// held up and the unreachable ranks, instead of hanging silently. It owns
// a PeerMonitor (UDP heartbeats, engine/peer_monitor.h) and a
// CollectiveWatchdog (engine/collective_watchdog.h) whose action logs the
// message and ends the process (a thread blocked inside MPI cannot be
// unblocked), and whose warning logs the same message halfway there.
//
// Start is collective: every rank calls it once, on the thread that makes
// the collective calls, before the first cycle (the monitor exchanges
// addresses), whatever its own limit. Phase marks one blocking call; a
// null guard (no limit) makes it a no-op. Thread-safety: Phase from the
// background thread only.
#ifndef TERSE_ENGINE_STALL_GUARD_H_
#define TERSE_ENGINE_STALL_GUARD_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "collectives/communicator.h"
#include "engine/collective_watchdog.h"
#include "engine/peer_monitor.h"

namespace terse {

class StallGuard {
 public:
  // limit_seconds <= 0: takes part in the exchange and returns null (no
  // thread, no heartbeats). A failed exchange is logged; the guard then
  // works without naming unreachable ranks.
  static std::unique_ptr<StallGuard> Start(Communicator* comm, int rank,
                                           double limit_seconds,
                                           CollectiveWatchdog::HeldUp held_up);

  // Marks a blocking phase for its lifetime, named what + subject
  // ("negotiation", "allreduce of bucket " "3"; the name is built only when
  // there is a guard).
  class Phase {
   public:
    Phase(StallGuard* guard, absl::string_view what,
          absl::string_view subject = {});
    ~Phase();
    Phase(const Phase&) = delete;
    Phase& operator=(const Phase&) = delete;

   private:
    StallGuard* const guard_;
  };

 private:
  StallGuard() = default;

  std::unique_ptr<PeerMonitor> peers_;
  std::unique_ptr<CollectiveWatchdog> watchdog_;  // After peers_: uses it.
};

}  // namespace terse

#endif  // TERSE_ENGINE_STALL_GUARD_H_
