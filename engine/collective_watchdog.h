// CollectiveWatchdog: ends a process whose engine is stuck inside one
// blocking communicator call, which nothing else can notice.
//
// The engine's background thread makes every collective call; when a peer
// becomes unreachable (a link down), MPI over TCP waits for ever inside the
// call, so the stall inspector (which runs on that thread, between cycles)
// never runs and every rank hangs silently. The background thread marks
// each blocking phase with Enter/Leave; this class's own thread checks
// every `poll` seconds whether the current phase has lasted longer than
// `limit` seconds (TERSE_STALL_SHUTDOWN_SECONDS) and, once, calls the action
// with a message naming the phase, the tensors held up (`held_up`: this
// rank's ops submitted and not completed, read only then) and the ranks a
// PeerMonitor has not heard from, e.g.
//   terse: rank 0: negotiation has not completed in 20.4 s
//   (TERSE_STALL_SHUTDOWN_SECONDS=20), holding up 3 tensors: 'fc1.weight',
//   'fc1.bias', 'fc2.weight'; unreachable: rank 3 (not heard for 21.0 s)
// The action is the engine's (log the message and end the process: a
// thread blocked inside MPI cannot be unblocked).
//
// Thread-safe: Enter/Leave from the background thread, Overdue from any.
#ifndef TERSE_ENGINE_COLLECTIVE_WATCHDOG_H_
#define TERSE_ENGINE_COLLECTIVE_WATCHDOG_H_

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "engine/peer_monitor.h"
#include "engine/types.h"

namespace terse {

class CollectiveWatchdog {
 public:
  using Action = std::function<void(const std::string& message)>;
  // Names of the ops held up; called from this class's thread (so it must
  // be thread-safe), only when a phase is overdue. May be null.
  using HeldUp = std::function<std::vector<std::string>()>;

  // limit_seconds <= 0: disabled (no thread; Overdue is always empty).
  // `peers` (may be null) is not owned and must outlive this object.
  CollectiveWatchdog(int rank, double limit_seconds, const PeerMonitor* peers,
                     HeldUp held_up, Action action, double poll_seconds = 0.5);
  ~CollectiveWatchdog();
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  // A blocking phase begins: `phase` names it ("negotiation", "allreduce of
  // bucket 3"). Cheap: called around every collective.
  void Enter(absl::string_view phase);
  void Leave();

  // The message if the current phase has lasted more than the limit at
  // `now`, else empty.
  std::string Overdue(Clock::time_point now) const;

 private:
  void Run();

  const int rank_;
  const double limit_;
  const PeerMonitor* const peers_;
  const HeldUp held_up_;
  const Action action_;
  const double poll_;
  std::thread thread_;

  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool inside_ ABSL_GUARDED_BY(mu_) = false;
  std::string phase_ ABSL_GUARDED_BY(mu_);
  Clock::time_point since_ ABSL_GUARDED_BY(mu_);
};

}  // namespace terse

#endif  // TERSE_ENGINE_COLLECTIVE_WATCHDOG_H_
