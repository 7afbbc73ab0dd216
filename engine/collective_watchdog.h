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
// thread blocked inside MPI cannot be unblocked). Halfway there, once per
// phase, the optional warning gets the same message saying when the process
// will end: a job whose runtime gives up on a dead link before the limit
// (Open MPI's daemons time out in about 16 s when a host's own interface
// drops its packets) still names the unreachable rank and the tensors.
//
// Thread-safe: Enter/Leave from the background thread, Overdue from any.
#ifndef TERSE_ENGINE_COLLECTIVE_WATCHDOG_H_
#define TERSE_ENGINE_COLLECTIVE_WATCHDOG_H_

#include <cstdint>
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

  // limit_seconds <= 0: disabled (no thread; Overdue and Warning are
  // always empty). `peers` (may be null) is not owned and must outlive this
  // object. `warning` may be null.
  CollectiveWatchdog(int rank, double limit_seconds, const PeerMonitor* peers,
                     HeldUp held_up, Action action, double poll_seconds = 0.5,
                     Action warning = nullptr);
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
  // The warning if the current phase has lasted more than half the limit
  // (and not more than the limit) at `now`, else empty.
  std::string Warning(Clock::time_point now) const;

 private:
  void Run();
  // The message of the current phase if it has lasted more than `after`
  // seconds and at most `until` at `now`, else empty; `*serial` (may be
  // null) gets the phase's serial. Ranks silent for `silent_after` seconds
  // are named unreachable; `ending` says the process ends now (the
  // action's message) rather than when.
  std::string Describe(Clock::time_point now, double after, double until,
                       double silent_after, bool ending,
                       uint64_t* serial) const;

  const int rank_;
  const double limit_;
  const PeerMonitor* const peers_;
  const HeldUp held_up_;
  const Action action_;
  const double poll_;
  const Action warning_;
  std::thread thread_;

  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool inside_ ABSL_GUARDED_BY(mu_) = false;
  std::string phase_ ABSL_GUARDED_BY(mu_);
  Clock::time_point since_ ABSL_GUARDED_BY(mu_);
  uint64_t serial_ ABSL_GUARDED_BY(mu_) = 0;  // Phases entered so far.
};

}  // namespace terse

#endif  // TERSE_ENGINE_COLLECTIVE_WATCHDOG_H_
