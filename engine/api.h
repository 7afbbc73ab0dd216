// terse's process-wide C++ API (Horovod-style), used by the bindings and by
// C++ trainers. The one documented process-wide instance lives behind these
// functions, guarded by a mutex: Init() creates a CommunicatorRegistry (MPI
// for CPU tensors; initialises MPI if the application has not) and an Engine
// (engine.h) over it; Shutdown() destroys both.
//
// Every function is thread-safe. Ops run on the engine's background thread;
// callbacks run there too. Buffers passed to an op must stay valid and
// untouched until its handle completes. See engine.h for the error model.
//
// Handles are numbered per Init(): after Shutdown() and a new Init(), old
// handles are unknown (NotFound).
#ifndef TERSE_ENGINE_API_H_
#define TERSE_ENGINE_API_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/communicator.h"  // terse::ReduceOp.
#include "collectives/registry.h"      // WorldOptions.
#include "common/config.h"
#include "common/tensor_view.h"
#include "device/runtime.h"             // Event.
#include "engine/compressed_reducer.h"  // BucketReport.
#include "engine/types.h"  // Handle, DoneCallback, AllgatherResult.

namespace terse {

// Starts terse: communicators and background thread; sets the log level
// and log rank. FailedPrecondition if already initialised; the registry's or
// engine's error otherwise (e.g. a bad TERSE_BACKEND, an unwritable
// TERSE_TIMELINE, bad static process sets). `process_sets`: Horovod's
// static sets (EngineOptions::process_sets), ids 1, 2, ... in this order.
// `world`: the processes to run on (Horovod's init(comm=...)); blocks until
// every one of them called Init, and Rank(), Size(), LocalRank(),
// LocalSize() and process set ranks are then those of that world. A process
// outside its rank list gets InvalidArgument naming it.
absl::Status Init(const Config& config,
                  const std::vector<std::vector<int>>& process_sets = {},
                  const WorldOptions& world = WorldOptions());
// Init(Config::FromEnvironment()): the error names the bad TERSE_* variable.
absl::Status InitFromEnvironment();
// Fails pending handles with "terse was shut down" (or the root-cause error
// if one occurred), joins the background thread, releases the communicators
// (MPI is finalised at exit only if terse initialised it). Idempotent; OK
// when not initialised. Returns the root cause if the engine stopped on one.
absl::Status Shutdown();
bool IsInitialized();
// The root cause the running engine stopped with (Engine::fatal_status):
// OK while it runs, or when terse is not initialised. After an error, the
// engine stays initialised but every op fails fast until Shutdown and a new
// Init (what elastic training does).
absl::Status FatalStatus();

// FailedPrecondition("terse is not initialised; call init() first") before
// Init (and after Shutdown).
absl::StatusOr<int> Rank();
absl::StatusOr<int> Size();
absl::StatusOr<int> LocalRank();
absl::StatusOr<int> LocalSize();

// Enqueue an op; see Engine for the semantics and errors. Names must be
// unique among in-flight ops.
absl::StatusOr<Handle> AllreduceAsync(
    const std::string& name, TensorView in, TensorView out,
    const std::vector<int64_t>& shape, ReduceOp op, double prescale = 1.0,
    double postscale = 1.0, DoneCallback callback = nullptr,
    const std::string& compression = "", std::shared_ptr<Event> ready = nullptr,
    int32_t process_set = 0);
absl::StatusOr<Handle> AllgatherAsync(const std::string& name, TensorView in,
                                      const std::vector<int64_t>& shape,
                                      DoneCallback callback = nullptr,
                                      std::shared_ptr<Event> ready = nullptr,
                                      int32_t process_set = 0);
// Alltoall and reducescatter of CPU tensors (Engine::AlltoallAsync,
// Engine::ReducescatterAsync): one collective each, never fused. `splits`:
// rows to each rank of the set (empty: equal parts).
absl::StatusOr<Handle> AlltoallAsync(const std::string& name, TensorView in,
                                     const std::vector<int64_t>& shape,
                                     const std::vector<int64_t>& splits,
                                     DoneCallback callback = nullptr,
                                     int32_t process_set = 0);
absl::StatusOr<Handle> ReducescatterAsync(
    const std::string& name, TensorView in, const std::vector<int64_t>& shape,
    ReduceOp op, double prescale = 1.0, double postscale = 1.0,
    DoneCallback callback = nullptr, int32_t process_set = 0);
// root_rank is a world rank (in the process set).
absl::StatusOr<Handle> BroadcastAsync(const std::string& name,
                                      TensorView buffer,
                                      const std::vector<int64_t>& shape,
                                      int root_rank,
                                      DoneCallback callback = nullptr,
                                      std::shared_ptr<Event> ready = nullptr,
                                      int32_t process_set = 0);

// Grouped ops (Engine::GroupStart/GroupEnd): the ops this thread enqueues
// between the two calls are queued together as one group, answered in one
// negotiation cycle and fused only among themselves.
absl::Status GroupStart(const std::string& name);
absl::Status GroupEnd();

// true when the op has completed (successfully or not). NotFound for an
// unknown handle.
absl::StatusOr<bool> Poll(Handle handle);
// Blocks until completion, returns the op's status, and releases the handle
// (except a successful allgather's, alltoall's or reducescatter's,
// released by its Take*Result).
absl::Status Wait(Handle handle);
// Device ops: blocks until the op's device work is enqueued and returns its
// completion event for the consumer's stream (Engine::WaitIssued).
absl::StatusOr<std::shared_ptr<Event>> WaitIssued(Handle handle);
// After Wait(handle) returned OK for an allgather handle; releases it.
absl::StatusOr<AllgatherResult> TakeAllgatherResult(Handle handle);
// After Wait(handle) returned OK for an alltoall / reducescatter handle;
// releases it. first_dims: the rows received from each rank (alltoall),
// every rank's row count (reducescatter).
absl::StatusOr<AllgatherResult> TakeAlltoallResult(Handle handle);
absl::StatusOr<AllgatherResult> TakeReducescatterResult(Handle handle);

// Collective barrier of the process set's ranks (0: all ranks).
absl::Status Barrier(int32_t process_set = 0);
// Process sets (Engine::AddProcessSet etc.): add/remove are collective over
// every rank.
absl::StatusOr<int32_t> AddProcessSet(const std::vector<int>& ranks);
absl::Status RemoveProcessSet(int32_t id);
absl::StatusOr<std::vector<int>> ProcessSetRanks(int32_t id);
absl::StatusOr<std::vector<int32_t>> ProcessSetIds();
// This rank has no more data: it contributes zeros to allreduces of other
// ranks until every rank has called Join. Blocks until all ranks joined.
// Returns the last rank that joined.
absl::StatusOr<int> Join();

// Compression (engine/compressed_reducer.h) over every process set this
// rank is in (Engine::BucketReports etc.): what every bucket did on its
// last step (each report names its set), the bytes this rank has sent, and
// the checkpoint of the compression state (policies and error-feedback
// residuals; one part per set, refused at load when the sets differ).
absl::StatusOr<std::vector<BucketReport>> BucketReports();
absl::StatusOr<int64_t> BytesSent();
// The learning rate was just lowered (Accordion switches to its low CF).
absl::Status NotifyLearningRateDrop();
// Engine::StartTimeline / StopTimeline of the running engine.
absl::Status StartTimeline(const std::string& path);
absl::Status StopTimeline();
// The checkpoint in memory (engine/checkpoint_format.h; loads also accept
// the older serialised proto::CompressionState).
absl::StatusOr<std::string> SaveCompressionState();
absl::Status LoadCompressionState(const std::string& state);
// The same checkpoint streamed to/from a file: written to `path`.tmp and
// renamed over `path` once complete (a failed save leaves `path` as it
// was). A failed load (missing, truncated or corrupt file) names the problem
// and leaves the state as it was.
absl::Status SaveCompressionStateToFile(const std::string& path);
absl::Status LoadCompressionStateFromFile(const std::string& path);

}  // namespace terse

#endif  // TERSE_ENGINE_API_H_
