// Engine: terse's core, one instance per rank. Framework threads enqueue
// collective operations; one background thread negotiates readiness across
// ranks (negotiator.h), fuses allreduces into stable buckets
// (bucket_assigner.h), reduces them (bucket_executor.h, bucket_reducer.h),
// runs allgathers, broadcasts, alltoalls and reducescatters (the last two
// never fused: exchange.h), and completes handles and callbacks.
//
// No globals: several engines (one per loopback rank) can run in one
// process. The process-wide API (api.h) wraps one Engine.
//
// Threading: every public method is thread-safe. Only the background thread
// calls the communicator; other threads validate and enqueue under a mutex.
// Callbacks run on the background thread.
//
// Buffers: an op's input and output must stay valid and untouched until its
// handle completes; the output may equal the input (in place). Buffers of
// different ops must not overlap.
//
// Device tensors (CUDA, or the simulated device; engine/device_executor.h):
// an op may pass `ready`, an event recorded on the producer's stream after
// the input was written; the engine's stream waits on it, never the host.
// The handle (and the callback) complete when the op's device work is
// enqueued on the engine's stream; its buffers must stay valid until that
// work is done. WaitIssued returns the completion event for the consumer's
// stream to wait on; Wait blocks the host until the work is done; Poll is
// true only then. Compression and momentum correction of device buckets run
// on the device, in stream order (DeviceCompression, device_executor.h).
//
// Process sets (engine/process_set_runner.h): every op names a process set,
// 0 (every rank, the default) or one registered at Create
// (EngineOptions::process_sets, ids 1, 2, ... in that order) or by
// AddProcessSet. Each set negotiates and fuses on its own; names are
// unique per set; a broadcast's root is a world rank in the set. Enqueueing
// on a set this rank is not in, or on an unknown one, is InvalidArgument.
// Compression works per set (each set has its own compression state);
// BucketReports, BytesSent and the compression checkpoints cover every set
// this rank is in (engine_compression.cc); compression() is the global
// set's alone. Device tensors run on every set: a set's device
// communicators (NCCL) span its members, built at its first device op.
//
// Errors: a bad argument is an error at enqueue. A disagreement between
// ranks (dtype, shape, op, root, scales, compression) fails that op on every
// rank with a message naming the tensor and the ranks on each side. A fatal
// error (a failed collective, a stall past TERSE_STALL_SHUTDOWN_SECONDS, a
// malformed peer message) is agreed across ranks (first error wins), fails
// every pending op with that root cause, and every later enqueue fails fast
// with it. Shutdown (by any rank) stops every rank's engine; pending ops fail
// with "terse was shut down".
#ifndef TERSE_ENGINE_ENGINE_H_
#define TERSE_ENGINE_ENGINE_H_

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "collectives/communicator.h"
#include "collectives/registry.h"
#include "common/config.h"
#include "common/tensor_view.h"
#include "device/runtime.h"
#include "engine/autotune.h"
#include "engine/bucket_assigner.h"
#include "engine/bucket_executor.h"
#include "engine/bucket_reducer.h"
#include "engine/compressed_reducer.h"
#include "engine/device_executor.h"
#include "engine/handle_table.h"
#include "engine/negotiator.h"
#include "engine/process_set_runner.h"
#include "engine/set_checkpoint.h"
#include "engine/stall_guard.h"
#include "engine/tensor_queue.h"
#include "engine/timeline.h"
#include "engine/types.h"

namespace terse {

// Counters for tests and benchmarks (a consistent-enough snapshot).
struct EngineStats {
  int64_t cycles = 0;
  int64_t coordinator_rounds = 0;
  int64_t requests_sent = 0;  // Through the coordinator (cache misses).
  int64_t buckets = 0;        // Buckets currently assigned.
  int64_t bucket_runs = 0;    // Bucket executions so far.
  int64_t cache_entries = 0;
  // TERSE_AUTOTUNE: the setting run now, and whether the search is over.
  int64_t autotune_threshold_bytes = 0;
  double autotune_cycle_time_ms = 0;
  bool autotune_done = false;
};

// Engine tunables that are not TERSE_* knobs (tests and benchmarks).
struct EngineOptions {
  // A bucket that stays partially ready for this long, counted in cycles of
  // the configured length, is split (see bucket_assigner.h).
  double bucket_split_seconds = 2.0;
  // Tensors of at least this many bytes get a bucket of their own and are
  // reduced in place (see bucket_assigner.h): above about 1 MiB a fusion copy
  // in and out costs more than the extra collective call.
  int64_t solo_bytes = int64_t{1} << 20;
  // The runtimes of device tensors (not owned; must outlive the engine).
  // Null: CUDA only (an engine-owned CudaRuntime). Tests register a
  // SimRuntime here; Create(config, comm, ...) then also moves simulated
  // buffers over `comm` (the "sim" backend, collectives/sim_communicator.h).
  const DeviceRuntimes* devices = nullptr;
  // Static process sets (Horovod's init(process_sets=...)): sorted,
  // distinct world ranks each, no set twice and none of every rank (that is
  // the global set, 0); they get ids 1, 2, ... in this order, on every rank
  // alike. A bad list fails Create with InvalidArgument naming the set.
  std::vector<std::vector<int>> process_sets;
};

class Engine : private ProcessSetHost {
 public:
  // Starts an engine for rank control()->rank() of control()->size() of
  // `registry` (not owned; it must outlive the engine). The control
  // communicator carries negotiation and CPU tensors; from now on only the
  // engine's background thread uses the registry's communicators. Every rank
  // must create its engine with the same fusion threshold, cache capacity
  // and cycle time. The timeline (config.timeline_path) is written by rank
  // 0, or by every rank when the path contains "{rank}" (replaced by the
  // rank). Error: unwritable timeline path.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(
      const Config& config, CommunicatorRegistry* registry,
      const EngineOptions& options = EngineOptions());
  // Same over a single communicator for every CPU tensor (tests: a loopback
  // rank); `comm` is not owned and must outlive the engine.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(
      const Config& config, Communicator* comm,
      const EngineOptions& options = EngineOptions());
  ~Engine() override;  // Shutdown().
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }

  // Sum/Average/Min/Max of `in` over ranks into `out` (may equal `in`).
  // `shape` is validated across ranks; in.count must equal its product.
  // prescale/postscale multiply the input before / the result after the
  // reduction (floating-point types only). `compression`: this op's
  // compression spec ("fp16", "topk:100", "gravac"; common/config.h
  // ParseCompressionSpec), which every rank must pass alike and which puts
  // the tensor only into buckets of the same spec; empty: the engine's
  // policy (TERSE_COMPRESSION / TERSE_COMPRESSION_RULES). A bad spec is
  // InvalidArgument at enqueue.
  absl::StatusOr<Handle> AllreduceAsync(
      const std::string& name, TensorView in, TensorView out,
      const std::vector<int64_t>& shape, ReduceOp op, double prescale = 1.0,
      double postscale = 1.0, DoneCallback callback = nullptr,
      const std::string& compression = "",
      std::shared_ptr<Event> ready = nullptr, int32_t process_set = 0);
  // Concatenation of every rank's tensor along dimension 0 (first dims may
  // differ, the rest must agree); fetched with TakeAllgatherResult.
  // A device input's result is host memory too (staged; see
  // device_executor.h).
  absl::StatusOr<Handle> AllgatherAsync(const std::string& name, TensorView in,
                                        const std::vector<int64_t>& shape,
                                        DoneCallback callback = nullptr,
                                        std::shared_ptr<Event> ready = nullptr,
                                        int32_t process_set = 0);
  // `buffer` of root_rank (a world rank, in the process set) into every
  // member's `buffer`.
  absl::StatusOr<Handle> BroadcastAsync(const std::string& name,
                                        TensorView buffer,
                                        const std::vector<int64_t>& shape,
                                        int root_rank,
                                        DoneCallback callback = nullptr,
                                        std::shared_ptr<Event> ready = nullptr,
                                        int32_t process_set = 0);

  // Alltoall (engine_exchange.cc, engine/exchange.h): sends rows of `in`
  // (shape `shape`, at least one dimension) to each rank of the process
  // set, splits[j] rows to set rank j in order (empty: equal parts), and
  // receives the rows each rank sent this one. Dtype and the dimensions
  // after the first must agree across ranks (else an error on every rank
  // naming the tensor and the ranks). Splits that do not fit (a count
  // other than the set's size, a negative one, a sum other than shape[0],
  // or no splits and shape[0] not divisible by the size) fail the op on
  // every rank at Wait, naming this rank and the reason. CPU tensors only
  // (Unimplemented otherwise). Never fused: one Alltoallv. The result
  // (TakeAlltoallResult): data packed by source rank, first_dims = rows
  // received from each set rank, shape = [their sum, trailing dims].
  absl::StatusOr<Handle> AlltoallAsync(const std::string& name, TensorView in,
                                       const std::vector<int64_t>& shape,
                                       const std::vector<int64_t>& splits,
                                       DoneCallback callback = nullptr,
                                       int32_t process_set = 0);
  // Reducescatter: the reduction of `in` over the set's ranks (op, scales
  // and their checks as AllreduceAsync's; Adasum refused), of which set
  // rank i keeps rows [offset_i, offset_i + n_i) of dimension 0 (Horovod's
  // split: shape[0] / size each, the first shape[0] % size ranks one
  // more). Shape, dtype, op and scales must agree across ranks. CPU tensors
  // only. Never fused: one ReduceScatter. The result
  // (TakeReducescatterResult): data = this rank's rows, first_dims = every
  // set rank's n_i, shape = [n_rank, trailing dims].
  absl::StatusOr<Handle> ReducescatterAsync(
      const std::string& name, TensorView in, const std::vector<int64_t>& shape,
      ReduceOp op, double prescale = 1.0, double postscale = 1.0,
      DoneCallback callback = nullptr, int32_t process_set = 0);

  // Grouped ops (Horovod's grouped_allreduce and friends; the same idea as
  // ncclGroupStart/End): between GroupStart and GroupEnd, the ops this
  // thread enqueues are checked and get their handles as usual, but are
  // held; GroupEnd queues them together as one group named `name`, of as
  // many ops as were held. Negotiation answers a group's ops in one cycle,
  // once every one of them is ready on every rank (they never come from the
  // response cache), and a grouped allreduce is fused only with members of
  // its group. If one of them fails (a mismatch across ranks, a refused
  // alltoall), every op of the group fails with its error on every rank.
  // Every rank must group the same ops under the same name, and each group
  // in flight on a process set needs its own name; the ops of a group
  // share one process set (InvalidArgument at enqueue otherwise). An op
  // refused at enqueue is not held (its error is returned as always).
  // Errors: GroupStart while this thread has a group open, or GroupEnd
  // without one: FailedPrecondition; an empty name: InvalidArgument. The
  // held ops are queued all at once or not at all: if one cannot be (its
  // name is in flight or given twice, the engine stopped), none is, every
  // one's handle completes with that error, and GroupEnd returns it.
  // Thread-safe; a group belongs to the thread that opened it.
  absl::Status GroupStart(const std::string& name);
  absl::Status GroupEnd();

  absl::StatusOr<bool> Poll(Handle handle) const;
  absl::Status Wait(Handle handle);
  // Blocks the host until the op is complete (CPU) or its device work is
  // enqueued (device), releases the handle as Wait does, and returns the
  // completion event for a consumer stream to wait on (null for CPU ops and
  // for allgathers, whose result is already in host memory).
  absl::StatusOr<std::shared_ptr<Event>> WaitIssued(Handle handle);
  absl::StatusOr<AllgatherResult> TakeAllgatherResult(Handle handle);
  // After Wait returned OK on an alltoall / reducescatter handle: its
  // result (see above); releases the handle. (The three Take* share one
  // result type and one handle kind: each takes any of them.)
  absl::StatusOr<AllgatherResult> TakeAlltoallResult(Handle handle) {
    return TakeAllgatherResult(handle);
  }
  absl::StatusOr<AllgatherResult> TakeReducescatterResult(Handle handle) {
    return TakeAllgatherResult(handle);
  }

  // Blocks until every rank of the process set has called Barrier.
  absl::Status Barrier(int32_t process_set = 0);

  // Registers a process set over the sorted, distinct world ranks `ranks`
  // and returns its id. Collective over EVERY rank (members or not), which
  // must call it with the same ranks in the same order relative to other
  // AddProcessSet/RemoveProcessSet calls; blocks until the set exists
  // everywhere. Errors: InvalidArgument for bad ranks (locally) or ranks
  // that differ between ranks (on every rank, naming them); AlreadyExists
  // (on every rank) when a set of these ranks exists (the global set
  // included).
  absl::StatusOr<int32_t> AddProcessSet(const std::vector<int>& ranks);
  // Unregisters set `id`: collective over every rank as AddProcessSet. Its
  // pending ops fail ("process set N was removed"). InvalidArgument for id
  // 0; NotFound (on every rank) for an unknown id.
  absl::Status RemoveProcessSet(int32_t id);
  // The world ranks of a registered set (0: every rank); NotFound else.
  absl::StatusOr<std::vector<int>> ProcessSetRanks(int32_t id) const;
  // The ids of the registered sets, ascending (0 first).
  std::vector<int32_t> ProcessSetIds() const;
  // This rank has no more data: it contributes zeros to the other ranks'
  // allreduces until every rank has joined. Blocks until then; returns the
  // last rank that joined. Allgather/broadcast/barrier fail while a rank is
  // joined.
  absl::StatusOr<int> Join();

  // Stops every rank's engine (see above) and joins this one's background
  // thread. Idempotent. Returns the root-cause error if the engine stopped
  // because of one, else OK.
  absl::Status Shutdown();

  // Horovod's start_timeline / stop_timeline: this rank starts writing a
  // timeline to `path` (with "{rank}" replaced by the rank; without it only
  // rank 0 writes, as for TERSE_TIMELINE), or completes the one it writes.
  // Local, not collective. Start fails with FailedPrecondition while a
  // timeline is being written, InvalidArgument if `path` cannot be opened.
  absl::Status StartTimeline(const std::string& path);
  absl::Status StopTimeline();

  // The root cause the engine stopped with (OK while running or after a
  // clean shutdown).
  absl::Status fatal_status() const;
  // Rank 0: the last stall warning logged (empty if none).
  std::string last_stall_warning() const;
  EngineStats stats() const;
  // The compression state of the global set's buckets (reports,
  // checkpoints); the reducer is thread-safe for these calls.
  CompressedReducer& compression() { return global_->reducer(); }

  // Compression over every process set this rank is in
  // (engine_compression.cc). Thread-safe; each waits for the step a
  // reducer is running, never for a whole cycle.
  //
  // What every bucket did on its last step: the global set's buckets
  // first, then each other set's in increasing id, each report naming its
  // set (BucketReport::process_set).
  std::vector<BucketReport> BucketReports() const;
  // Bytes this rank has sent through every set's reducer since Create
  // (sets removed since included).
  int64_t BytesSent() const;
  // Forwards a learning-rate drop to every set's policies (Accordion).
  void NotifyLearningRateDrop();
  // The checkpoint of every set's compression state. A rank in no
  // non-global set gets its global reducer's checkpoint alone (the format
  // of compressed_reducer.h, as before process sets); a rank in others
  // gets engine/set_checkpoint.h's, one part per set keyed by set id and
  // world ranks. The file variants write `path`.tmp and rename it, so a
  // failed save leaves `path` as it was.
  absl::StatusOr<std::string> SaveCompressionState() const;
  absl::Status SaveCompressionStateToFile(const std::string& path) const;
  // Restores a checkpoint saved by this rank. FailedPrecondition, naming
  // both layouts, unless this rank is in the same sets (ids and ranks) as
  // when it was saved; InvalidArgument/DataLoss for a damaged one. A failed
  // load leaves every set's state as it was.
  absl::Status LoadCompressionState(absl::string_view bytes);
  absl::Status LoadCompressionStateFromFile(const std::string& path);

 private:
  static absl::StatusOr<std::unique_ptr<Engine>> Start(
      const Config& config, CommunicatorRegistry* registry,
      std::unique_ptr<CommunicatorRegistry> owned_registry,
      const EngineOptions& options);
  Engine(const Config& config, const EngineOptions& options,
         CommunicatorRegistry* registry,
         std::unique_ptr<CommunicatorRegistry> owned_registry,
         std::unique_ptr<Timeline> timeline);

  absl::StatusOr<Handle> Enqueue(TensorEntry entry);
  // Enqueue's last step: into this thread's open group (true), if any.
  // InvalidArgument for a join or barrier, or an op on another process set
  // than the group's.
  absl::StatusOr<bool> HoldInGroup(TensorEntry& entry);
  // Enqueue's process-set part: the set exists and holds this rank; a
  // broadcast's root becomes its rank in the set. Returns the set's size.
  absl::StatusOr<int> ResolveProcessSet(TensorEntry& entry) const;
  // Enqueues a change of the process sets ({0, ranks...}: add; {1, id}:
  // remove) as a global barrier and waits for it; returns its outcome.
  absl::StatusOr<int32_t> ChangeProcessSets(std::vector<int64_t> change);

  // Background thread.
  void Loop();
  // Creates the static sets (collective); an error becomes local_error_.
  void CreateStaticSets();
  // Gives `ranks` the next id (AlreadyExists when a set holds them).
  absl::StatusOr<int32_t> ReserveSet(const std::vector<int>& ranks);
  // Background thread: the reserved set's communicator (collective over
  // every rank) and, on members, its runner with its device executor.
  absl::Status BuildSet(int32_t id, const std::vector<int>& ranks);
  // Which device buckets go through a set's reducer: those with
  // compression or momentum correction.
  static DeviceExecutor::NeedsReducer DeviceNeedsReducer(const Config& config);
  // Every non-global set's cycle, in increasing id.
  void CycleSets();
  // After a cycle: tells the queue which members of partly submitted
  // buckets to wait for (TensorQueue::Await), on every set.
  void AwaitBucketMembers();
  void NoteLocalError(const absl::Status& status);
  std::shared_ptr<Event> TakeDone(Handle handle);
  void Stop(const absl::Status& cause, bool fatal);
  // Background thread: a runner of a non-global set joins / leaves the
  // sets whose compression state the getters above cover.
  void RegisterSetReducer(ProcessSetRunner& runner);
  void UnregisterSetReducers(const std::vector<int32_t>& ids);
  // The global set's and every registered set's checkpoint parts (states
  // empty unless `with_states`), global first.
  absl::StatusOr<std::vector<set_checkpoint::Part>> CompressionParts(
      bool with_states) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(reducers_mu_);
  absl::Status LoadCompressionParts(std::vector<set_checkpoint::Part> parts)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(reducers_mu_);
  // FailedPrecondition unless this rank is in no non-global set (a
  // checkpoint of the global set alone is being loaded).
  absl::Status CheckGlobalOnlyLayout() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(reducers_mu_);

  // ProcessSetHost.
  void Complete(int32_t set, std::vector<TensorEntry> entries,
                const absl::Status& status,
                std::vector<AllgatherResult> results,
                std::shared_ptr<Event> done) override;
  void BeforeCompletions(const ProcessSetRunner& runner) override;
  void CountBucketRun() override;
  void Joined(int last_joined_rank) override;
  void ProcessSetChange(const proto::Response& response) override;

  const Config config_;
  std::unique_ptr<CommunicatorRegistry> owned_registry_;
  CommunicatorRegistry* const registry_;
  Communicator* const comm_;  // registry_->control().
  const int rank_;
  const int size_;
  const int local_rank_;
  const int local_size_;
  const int64_t stuck_limit_;

  // Without options.devices: an engine-owned CUDA runtime.
  std::unique_ptr<DeviceRuntime> owned_cuda_;
  DeviceRuntimes owned_runtimes_;
  const DeviceRuntimes* const runtimes_;

  TensorQueue queue_;
  HandleTable handles_;
  std::unique_ptr<Timeline> timeline_;
  const std::vector<std::vector<int>> static_sets_;

  // Background thread only (context_.stall_guard is set in Loop).
  RunnerContext context_;
  std::unique_ptr<ProcessSetRunner> global_;
  DeviceExecutor device_;  // The global set's device tensors.
  // The non-global sets this rank is in, by id (served in this order).
  std::map<int32_t, std::unique_ptr<ProcessSetRunner>> sets_;
  absl::Status local_error_;
  // TERSE_STALL_SHUTDOWN_SECONDS inside a blocking collective (null when
  // off); set at the start of Loop.
  std::unique_ptr<StallGuard> stall_guard_;
  std::unique_ptr<AutotuneSession> autotune_;  // TERSE_AUTOTUNE; loop only.

  mutable absl::Mutex mu_;
  absl::Status fatal_ ABSL_GUARDED_BY(mu_);
  std::string stall_warning_ ABSL_GUARDED_BY(mu_);
  int last_joined_ ABSL_GUARDED_BY(mu_) = -1;
  EngineStats stats_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  // Every registered set's world ranks (0: every rank), members or not.
  std::map<int32_t, std::vector<int>> set_ranks_ ABSL_GUARDED_BY(mu_);
  int32_t next_set_id_ ABSL_GUARDED_BY(mu_) = 1;
  // Per set: the next barrier's number (names are per set).
  std::map<int32_t, int64_t> barrier_seq_ ABSL_GUARDED_BY(mu_);
  int64_t set_change_seq_ ABSL_GUARDED_BY(mu_) = 0;
  // Outcomes of process-set changes, by barrier name, until taken.
  absl::flat_hash_map<std::string, absl::StatusOr<int32_t>> set_changes_
      ABSL_GUARDED_BY(mu_);
  // Completion events of device ops whose handles completed and were not
  // yet waited for.
  absl::flat_hash_map<Handle, std::shared_ptr<Event>> done_
      ABSL_GUARDED_BY(mu_);

  // The reducers of the non-global sets this rank is in, by id, with the
  // sets' world ranks: written by the background thread when a runner is
  // built or destroyed, read by the compression getters on any thread
  // (which hold the lock while they use a reducer, so it outlives them).
  struct SetReducer {
    std::vector<int> ranks;
    CompressedReducer* reducer = nullptr;  // The runner's.
  };
  mutable absl::Mutex reducers_mu_;
  std::map<int32_t, SetReducer> set_reducers_ ABSL_GUARDED_BY(reducers_mu_);
  // Bytes sent by the reducers of sets since removed.
  int64_t removed_bytes_sent_ ABSL_GUARDED_BY(reducers_mu_) = 0;

  // Open groups (GroupStart), by the thread that opened them, and how
  // many there are (read without the lock by Enqueue's fast path).
  struct OpenGroup {
    std::string name;
    std::vector<TensorEntry> entries;
  };
  absl::Mutex groups_mu_;
  absl::flat_hash_map<std::thread::id, OpenGroup> open_groups_
      ABSL_GUARDED_BY(groups_mu_);
  std::atomic<int> num_open_groups_{0};

  std::once_flag shutdown_once_;
  std::thread thread_;
};

}  // namespace terse

#endif  // TERSE_ENGINE_ENGINE_H_
