// StallInspector: notices operations that some ranks submitted and others
// did not, for longer than TERSE_STALL_CHECK_SECONDS, and names them.
//
// Runs on rank 0 over the coordinator's table (ops cached on every rank fall
// back to the coordinator when they wait too long, see negotiator.h). The
// warning lists, per op, which ranks submitted it and which did not; after
// TERSE_STALL_SHUTDOWN_SECONDS (if > 0) the list of every op still missing
// some ranks becomes the error that fails every pending op on every rank.
//
// Not thread-safe; lives on rank 0's background thread.
#ifndef TERSE_ENGINE_STALL_INSPECTOR_H_
#define TERSE_ENGINE_STALL_INSPECTOR_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/coordinator.h"
#include "engine/types.h"

namespace terse {

class StallInspector {
 public:
  // A value <= 0 disables the warning / the shutdown.
  StallInspector(int size, double check_seconds, double shutdown_seconds);

  struct Verdict {
    // Non-empty at most once per check period, while something is stalled.
    std::string warning;
    // An error once an op has waited shutdown_seconds.
    absl::Status shutdown;
  };

  // `pending`: the coordinator's waiting ops; `joined`: ranks that joined
  // (they are not missing anything).
  Verdict Inspect(const std::vector<Coordinator::PendingOp>& pending,
                  const std::vector<int>& joined, Clock::time_point now);

 private:
  // "tensor 'w' submitted by ranks 0,2 but not by rank 1 (waiting 61.0 s)"
  // for every op older than `threshold`, "; "-separated; empty if none.
  std::string Describe(const std::vector<Coordinator::PendingOp>& pending,
                       const std::vector<int>& joined, Clock::time_point now,
                       double threshold) const;

  const int size_;
  const double check_seconds_;
  const double shutdown_seconds_;
  Clock::time_point last_warning_;
  bool warned_ = false;
};

}  // namespace terse

#endif  // TERSE_ENGINE_STALL_INSPECTOR_H_
