// ProcessSetRunner: the engine's work for one process set, a sorted list of
// world ranks with an id (0: every rank, the global set).
//
// Each set has its own communicator (a sub-group of the engine's control
// communicator, Communicator::CreateSubgroup), its own negotiation
// (negotiator.h, with its own response cache and coordinator: the set's
// rank 0), its own buckets (bucket_assigner.h: ops of different sets never
// share a bucket, whatever their keys), its own compression state
// (compressed_reducer.h) and its own in-flight ops. Tensor names are per
// set. A runner exists only on the set's members.
//
// The engine's one background thread drives every runner, each cycle in
// increasing set id (engine.cc): a rank only ever blocks in the collectives
// of sets it belongs to, and the members of a set reach its cycle in the
// same order, so no cycle of waits can form.
//
// Ranks inside a runner are set ranks (0 .. size-1); world_ranks() maps
// them back. Coordinator errors of a non-global set name the set and its
// world ranks.
//
// Device tensors (engine/device_executor.h): the global set's runner uses
// the engine's executor (set_device); another set's runner owns one of its
// own (own_device), whose registry builds the device communicators (NCCL)
// over the set's communicator, with its own engine streams and fusion
// buffers and its compression state in this runner's reducer.
//
// Not thread-safe: used by the engine's background thread only (stats
// getters included).
#ifndef TERSE_ENGINE_PROCESS_SET_RUNNER_H_
#define TERSE_ENGINE_PROCESS_SET_RUNNER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "collectives/registry.h"
#include "common/config.h"
#include "common/control.pb.h"
#include "device/runtime.h"
#include "engine/bucket_assigner.h"
#include "engine/bucket_executor.h"
#include "engine/compressed_reducer.h"
#include "engine/device_executor.h"
#include "engine/negotiator.h"
#include "engine/stall_guard.h"
#include "engine/tensor_entry.h"
#include "engine/timeline.h"
#include "engine/types.h"

namespace terse {

// 0, 1, ..., size - 1: the global set's ranks.
std::vector<int> AllRanks(int size);

// Static process sets for a world of `size` ranks: each sorted, distinct
// and in range, none of every rank and none twice. InvalidArgument naming
// the set.
absl::Status CheckProcessSets(const std::vector<std::vector<int>>& sets,
                              int size);

// What a runner needs from its engine: completing ops and the engine-wide
// bookkeeping. Called on the background thread.
class ProcessSetHost {
 public:
  virtual ~ProcessSetHost() = default;
  // Releases the names of `entries` (of set `set`), runs their callbacks
  // and completes their handles with `status`; results[i] (when given) is
  // entries[i]'s allgather result; `done`: their device completion event.
  virtual void Complete(int32_t set, std::vector<TensorEntry> entries,
                        const absl::Status& status,
                        std::vector<AllgatherResult> results,
                        std::shared_ptr<Event> done) = 0;
  // The global set's buckets are assigned for this cycle: a snapshot of
  // the statistics before any op of the cycle completes.
  virtual void BeforeCompletions(const class ProcessSetRunner& runner) = 0;
  virtual void CountBucketRun() = 0;
  // A JOIN response (global set): the last rank that joined.
  virtual void Joined(int last_joined_rank) = 0;
  // An executed barrier of the global set named "__terse.process_set.*":
  // the engine's set change, run before the barrier completes.
  virtual void ProcessSetChange(const proto::Response& response) = 0;
};

// Shared engine parts a runner uses (not owned; the engine's).
struct RunnerContext {
  const Config* config = nullptr;
  Timeline* timeline = nullptr;
  // Set at the start of the engine's loop (null: no stall limit).
  StallGuard* stall_guard = nullptr;
  int64_t stuck_limit = 10;
  int64_t solo_bytes = int64_t{1} << 20;
};

class ProcessSetRunner {
 public:
  // `comm`: the set's communicator (owned when `owned` holds it; else the
  // engine's control communicator). `device`: the global set's device
  // executor, null for other sets. None of the pointers is owned.
  ProcessSetRunner(int32_t id, std::vector<int> world_ranks, Communicator* comm,
                   std::unique_ptr<Communicator> owned,
                   const RunnerContext* context, ProcessSetHost* host);
  ~ProcessSetRunner();
  ProcessSetRunner(const ProcessSetRunner&) = delete;
  ProcessSetRunner& operator=(const ProcessSetRunner&) = delete;

  int32_t id() const { return id_; }
  // Appends (id(), name) for every member not submitted by this rank of the
  // buckets this rank has submitted other members of: what the engine waits
  // for before its next cycle (TensorQueue::Await).
  void AwaitedNames(std::vector<std::pair<int32_t, std::string>>* out) const;
  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::vector<int>& world_ranks() const { return world_ranks_; }
  Communicator* comm() const { return comm_; }
  CompressedReducer& reducer() { return reducer_; }
  const Negotiator& negotiator() const { return negotiator_; }
  const BucketAssigner& buckets() const { return buckets_; }
  // For autotune: bytes and steps (BucketExecutor::steps_run) of the CPU
  // allreduce buckets run so far, and a new fusion threshold for this set's
  // buckets (BucketAssigner::Regroup).
  int64_t bytes_reduced() const { return executor_.bytes_run(); }
  int64_t steps_reduced() const { return executor_.steps_run(); }
  bool Regroup(int64_t threshold_bytes) {
    return buckets_.Regroup(threshold_bytes);
  }
  // Set once by the engine, for the global set only (it must be built
  // after the reducer it uses).
  void set_device(DeviceExecutor* device) { device_ = device; }
  // A non-global set's device executor (built over this runner's reducer)
  // and the registry over comm() it uses; destroyed before the reducer and
  // the communicator.
  void own_device(std::unique_ptr<CommunicatorRegistry> registry,
                  std::unique_ptr<DeviceExecutor> device) {
    owned_registry_ = std::move(registry);
    owned_device_ = std::move(device);
    device_ = owned_device_.get();
  }

  // Takes `entry` (an op of this set) into negotiation; a refused one
  // completes at once with the error.
  void Submit(TensorEntry entry);
  // One cycle: negotiation (collective over the set), then the agreed ops.
  // `shutdown`/`local_error`: as Negotiator::RunCycle (the global set
  // carries them; other sets pass false/OK). Returns the outcome's shutdown
  // flag and agreed error in `outcome`; an error return means this set
  // cannot negotiate any more.
  absl::Status Cycle(bool shutdown, const absl::Status& local_error,
                     CycleOutcome* outcome);
  // The first error of a local collective since the last call (then OK).
  absl::Status TakeLocalError();
  // Fails every in-flight op of this set with `status`.
  void FailAll(const absl::Status& status);

 private:
  void Execute(const std::vector<proto::Response>& responses);
  void RunBucket(int id, Clock::time_point ready_at);
  void RunBroadcast(const proto::Response& response,
                    Clock::time_point ready_at);
  void RunAllgather(const proto::Response& response,
                    Clock::time_point ready_at);
  // Alltoall and reducescatter (engine/exchange.h): one collective each.
  void RunExchange(const proto::Response& response, Clock::time_point ready_at);
  void NoteError(const absl::Status& status);
  // The coordinator's error of a non-global set, with the set named.
  std::string Labelled(const std::string& error) const;
  // Completes and forgets the in-flight op `name` (if this rank has it).
  void Finish(const std::string& name, const absl::Status& status,
              AllgatherResult result = {},
              std::shared_ptr<Event> done = nullptr);
  void FinishAll(const std::vector<std::string>& names,
                 const absl::Status& status,
                 std::shared_ptr<Event> done = nullptr);

  const int32_t id_;
  const std::vector<int> world_ranks_;
  std::unique_ptr<Communicator> owned_comm_;
  Communicator* const comm_;
  const int rank_;
  const int size_;
  const RunnerContext* const context_;
  ProcessSetHost* const host_;
  DeviceExecutor* device_ = nullptr;

  Negotiator negotiator_;
  BucketAssigner buckets_;
  CompressedReducer reducer_;  // Dense where nothing is to be compressed.
  BucketExecutor executor_;
  absl::flat_hash_map<std::string, TensorEntry> in_flight_;
  absl::Status local_error_;
  // Declared last, destroyed first: the executor's streams drain and its
  // compression state detaches from reducer_ before the rest goes; the
  // registry's device communicators go before owned_comm_, their control.
  std::unique_ptr<CommunicatorRegistry> owned_registry_;
  std::unique_ptr<DeviceExecutor> owned_device_;
};

}  // namespace terse

#endif  // TERSE_ENGINE_PROCESS_SET_RUNNER_H_
