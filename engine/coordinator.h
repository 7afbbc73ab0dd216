// Coordinator: rank 0's table of the operations that some but not yet all
// ranks have requested, and the responses it decides when they complete.
//
// Ops complete in the order they were first requested; that order, which
// every rank receives in the broadcast response list, is the "order of first
// readiness" that bucket assignment follows. A rank that has joined counts as
// having requested every allreduce (it contributes zeros); any other op that
// would need a joined rank fails. When every rank has joined, a JOIN
// response closes the join.
//
// Not thread-safe; lives on rank 0's background thread.
#ifndef TERSE_ENGINE_COORDINATOR_H_
#define TERSE_ENGINE_COORDINATOR_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "common/control.pb.h"
#include "engine/types.h"

namespace terse {

class Coordinator {
 public:
  explicit Coordinator(int size);

  // Records the requests of `list`, which rank `from` sent. Each request is
  // validated (ValidateRequest, rank fields equal to `from`, no name twice
  // from one rank); the first problem is returned as InvalidArgument and the
  // list's remaining requests are ignored. The op's age is taken from the
  // oldest queued_seconds among its requests.
  absl::Status Add(int from, const proto::RequestList& list,
                   Clock::time_point now);

  // Appends to `out` the response of every op that is now complete (EXECUTE
  // or ERROR), oldest request first, then a JOIN response if every rank has
  // joined.
  void Complete(proto::ResponseList* out);

  // One op waiting for some ranks.
  struct PendingOp {
    std::string name;
    std::vector<int> submitted;  // Ranks that sent it, ascending.
    Clock::time_point since;     // When the earliest rank queued it.
  };
  std::vector<PendingOp> PendingOps() const;
  std::vector<int> JoinedRanks() const;

 private:
  struct Op {
    std::vector<std::optional<proto::Request>> by_rank;
    int received = 0;
    Clock::time_point since;
    int64_t seq = 0;
  };

  const int size_;
  int64_t next_seq_ = 0;
  absl::flat_hash_map<std::string, Op> table_;
  std::map<int64_t, std::string> order_;  // seq -> name.
  std::vector<bool> joined_;
  int last_joined_ = -1;
  // Groups one of whose ops failed: the error, and how many of their ops
  // are still to be answered (failed with it).
  struct FailedGroup {
    std::string error;
    int32_t remaining = 0;
  };
  absl::flat_hash_map<std::string, FailedGroup> failed_groups_;
};

}  // namespace terse

#endif  // TERSE_ENGINE_COORDINATOR_H_
