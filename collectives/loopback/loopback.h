// Loopback: N ranks as threads of one process, over shared memory.
//
// For unit tests of multi-rank logic without mpirun (the MPI tests still run
// the same logic under mpirun). Each rank's thread uses its own
// Communicator; every collective is a rendezvous of all N threads: each posts
// its buffers, all read what they need, all wait until everyone has read, and
// only then write their own outputs, so in-place operations are safe.
//
// Mismatched calls (different operation, count, dtype, op or root on
// different ranks) fail on every rank with InvalidArgument naming the ranks
// and what each called. Abort() fails every pending and later call, so a test
// whose rank fails early does not leave the others blocked.
//
// Reductions run in rank order and accumulate f16/bf16 in fp32, rounding
// once, so results are deterministic.
#ifndef TERSE_COLLECTIVES_LOOPBACK_LOOPBACK_H_
#define TERSE_COLLECTIVES_LOOPBACK_LOOPBACK_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "collectives/communicator.h"

namespace terse {

class LoopbackCommunicator;

class LoopbackGroup {
 public:
  // `size` ranks; `local_size` ranks per simulated host (0: all on one host).
  explicit LoopbackGroup(int size, int local_size = 0);
  ~LoopbackGroup();
  LoopbackGroup(const LoopbackGroup&) = delete;
  LoopbackGroup& operator=(const LoopbackGroup&) = delete;

  int size() const { return size_; }

  // The communicator of `rank` (0 <= rank < size()); owned by the group.
  Communicator* communicator(int rank);

  // Every blocked and later collective of the group (and of the sub-groups
  // made from it, CreateSubgroup) returns `status`.
  void Abort(absl::Status status);

  // The sub-group made by the `seq`-th CreateSubgroup call of this group's
  // ranks (every rank calls in the same order), of `size` ranks: created by
  // the first rank to ask, shared with the others.
  std::shared_ptr<LoopbackGroup> Subgroup(int64_t seq, int size);

  // Description of one posted call, compared across ranks.
  struct Call {
    std::string kind;  // "allreduce", "allgather", ...
    int64_t count = 0;
    int32_t dtype = -1;
    int32_t op = -1;
    int root = -1;
    std::vector<int64_t> sizes;
    // Per rank and not compared across ranks (alltoallv: this rank's send
    // sizes, then its receive sizes).
    std::vector<int64_t> own;
    const void* in = nullptr;
    void* out = nullptr;
    std::string Describe() const;
  };

  // Posts `call` for `rank` and blocks until every rank has posted (phase 1).
  // Returns the calls of all ranks, or the mismatch / abort error.
  absl::Status Arrive(int rank, const Call& call, std::vector<Call>* all);
  // Blocks until every rank has finished reading (phase 2).
  absl::Status Depart(int rank);

 private:
  absl::Status WaitForAll(int phase) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int size_;
  std::vector<std::unique_ptr<LoopbackCommunicator>> communicators_;

  absl::Mutex mu_;
  absl::CondVar cv_;
  std::vector<Call> calls_ ABSL_GUARDED_BY(mu_);
  int arrived_[2] ABSL_GUARDED_BY(mu_) = {0, 0};
  int64_t generation_[2] ABSL_GUARDED_BY(mu_) = {0, 0};
  absl::Status abort_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, std::shared_ptr<LoopbackGroup>> subgroups_
      ABSL_GUARDED_BY(mu_);
};

// Runs body(rank, communicator) for every rank on its own thread and joins
// them. If a body returns an error, the group is aborted (so no rank blocks)
// and the first error in time is returned: the cause, not another rank's
// Aborted from the group's abort.
absl::Status RunLoopbackRanks(
    int size, const std::function<absl::Status(int, Communicator*)>& body);

}  // namespace terse

#endif  // TERSE_COLLECTIVES_LOOPBACK_LOOPBACK_H_
