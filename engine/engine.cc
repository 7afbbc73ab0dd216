#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "collectives/reduce.h"
#include "collectives/sim_communicator.h"
#include "common/logging.h"
#include "common/status.h"
#include "compressors/registry.h"
#include "device/cuda_runtime.h"
#include "engine/exchange.h"

namespace terse {
namespace {

absl::Status ShutDownError() {
  return absl::AbortedError("terse was shut down");
}

absl::Status CheckView(const std::string& name, const TensorView& view,
                       const char* what) {
  if (view.count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': ", what, " has a negative count"));
  }
  if (view.data == nullptr && view.count > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': ", what, " is null with ",
                     view.count, " elements"));
  }
  if (!IsValidDataType(static_cast<int32_t>(view.dtype))) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': ", what, " has an unknown dtype"));
  }
  if (!Device::IsValidKind(static_cast<int32_t>(view.device.kind))) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': ", what, " has an unknown device"));
  }
  return absl::OkStatus();
}

// An allreduce's or reducescatter's op and scales.
absl::Status CheckReduction(const TensorEntry& e) {
  absl::Status supported = CheckReduceSupported(e.input.dtype, e.reduce_op);
  if (!supported.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", e.name, "': ", supported.message()));
  }
  if (!std::isfinite(e.prescale) || !std::isfinite(e.postscale)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", e.name, "': prescale/postscale must be finite"));
  }
  if (!IsFloatingPoint(e.input.dtype) &&
      (e.prescale != 1.0 || e.postscale != 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", e.name, "': prescale/postscale need a floating-point ",
        "dtype, not ", DataTypeName(e.input.dtype)));
  }
  return absl::OkStatus();
}

absl::Status CheckEntry(const TensorEntry& e, int size) {
  if (e.name.empty()) {
    return absl::InvalidArgumentError("an operation needs a non-empty name");
  }
  if (absl::StartsWith(e.name, "__terse.") && e.op != proto::BARRIER &&
      e.op != proto::JOIN) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", e.name, "': names starting '__terse.' are reserved"));
  }
  if (e.op == proto::BARRIER || e.op == proto::JOIN) return absl::OkStatus();
  TERSE_RETURN_IF_ERROR(CheckView(e.name, e.input, "input"));
  const int64_t elements = ShapeElements(e.shape);
  if (elements < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", e.name, "': invalid shape ", ShapeString(e.shape)));
  }
  if (elements != e.input.count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", e.name, "': shape ", ShapeString(e.shape), " has ",
        elements, " elements but the input has ", e.input.count));
  }
  switch (e.op) {
    case proto::ALLREDUCE: {
      TERSE_RETURN_IF_ERROR(CheckView(e.name, e.output, "output"));
      if (e.output.count != e.input.count || e.output.dtype != e.input.dtype) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor '", e.name, "': output (", e.output.count, " x ",
            DataTypeName(e.output.dtype), ") differs from input (",
            e.input.count, " x ", DataTypeName(e.input.dtype), ")"));
      }
      return CheckReduction(e);
    }
    case proto::BROADCAST:
      if (e.root_rank < 0 || e.root_rank >= size) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", e.name, "': root rank ", e.root_rank,
                         " outside [0, ", size, ")"));
      }
      return absl::OkStatus();
    case proto::ALLGATHER:
      if (e.shape.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor '", e.name, "': allgather needs at least one dimension"));
      }
      return absl::OkStatus();
    case proto::ALLTOALL:
      // Shape, splits and device: CheckExchange (at Enqueue).
      return absl::OkStatus();
    case proto::REDUCESCATTER:
      return CheckReduction(e);
    default:
      return absl::InvalidArgumentError("unknown op");
  }
}

// The engine's runtimes: the caller's, or `owned` holding `cuda`.
const DeviceRuntimes* ChooseRuntimes(const DeviceRuntimes* given,
                                     DeviceRuntime* cuda,
                                     DeviceRuntimes* owned) {
  if (given != nullptr) return given;
  owned->Register(cuda).IgnoreError();  // A fresh table: cannot clash.
  return owned;
}

std::string TimelinePath(const std::string& path, int rank) {
  if (path.empty()) return "";
  if (absl::StrContains(path, "{rank}")) {
    return absl::StrReplaceAll(path, {{"{rank}", absl::StrCat(rank)}});
  }
  return rank == 0 ? path : "";
}

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(
    const Config& config, CommunicatorRegistry* registry,
    const EngineOptions& options) {
  if (registry == nullptr) {
    return absl::InvalidArgumentError("Engine::Create: null registry");
  }
  return Start(config, registry, nullptr, options);
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(
    const Config& config, Communicator* comm, const EngineOptions& options) {
  if (comm == nullptr) {
    return absl::InvalidArgumentError("Engine::Create: null communicator");
  }
  BackendTable table;
  TERSE_RETURN_IF_ERROR(table.Register(
      "borrowed", Device::Kind::kCpu,
      [comm](Device,
             Communicator*) -> absl::StatusOr<std::unique_ptr<Communicator>> {
        return BorrowCommunicator(comm);
      }));
  if (options.devices != nullptr) {
    absl::StatusOr<DeviceRuntime*> sim =
        options.devices->Get(Device::Kind::kSim);
    if (sim.ok()) TERSE_RETURN_IF_ERROR(RegisterSimBackend(&table, *sim));
  }
  Config borrowed = config;
  borrowed.backend = "auto";
  TERSE_ASSIGN_OR_RETURN(
      std::unique_ptr<CommunicatorRegistry> registry,
      CommunicatorRegistry::Create(borrowed, std::move(table)));
  CommunicatorRegistry* raw = registry.get();
  return Start(config, raw, std::move(registry), options);
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Start(
    const Config& config, CommunicatorRegistry* registry,
    std::unique_ptr<CommunicatorRegistry> owned_registry,
    const EngineOptions& options) {
  const int rank = registry->control()->rank();
  TERSE_RETURN_IF_ERROR(
      CheckProcessSets(options.process_sets, registry->control()->size()));
  // Always a Timeline (stopped without TERSE_TIMELINE), so one can be
  // started at runtime (StartTimeline).
  std::unique_ptr<Timeline> timeline = Timeline::Stopped(rank);
  const std::string path = TimelinePath(config.timeline_path, rank);
  if (!path.empty()) {
    TERSE_ASSIGN_OR_RETURN(timeline, Timeline::Open(path, rank));
  }
  std::unique_ptr<Engine> engine(new Engine(config, options, registry,
                                            std::move(owned_registry),
                                            std::move(timeline)));
  Engine* e = engine.get();
  e->thread_ = std::thread([e] { e->Loop(); });
  return engine;
}

DeviceExecutor::NeedsReducer Engine::DeviceNeedsReducer(const Config& config) {
  return [config](const Bucket& bucket) {
    return config.momentum_correction > 0 ||
           ChooseCompressionFor(bucket.members.front().name, bucket.compression,
                                config)
                   .name != "none";
  };
}

Engine::Engine(const Config& config, const EngineOptions& options,
               CommunicatorRegistry* registry,
               std::unique_ptr<CommunicatorRegistry> owned_registry,
               std::unique_ptr<Timeline> timeline)
    : config_(config),
      owned_registry_(std::move(owned_registry)),
      registry_(registry),
      comm_(registry->control()),
      rank_(comm_->rank()),
      size_(comm_->size()),
      local_rank_(comm_->local_rank()),
      local_size_(comm_->local_size()),
      stuck_limit_(std::max<int64_t>(
          10, static_cast<int64_t>(options.bucket_split_seconds * 1000.0 /
                                   std::max(config.cycle_time_ms, 0.01)))),
      owned_cuda_(options.devices == nullptr ? std::make_unique<CudaRuntime>()
                                             : nullptr),
      runtimes_(
          ChooseRuntimes(options.devices, owned_cuda_.get(), &owned_runtimes_)),
      timeline_(std::move(timeline)),
      static_sets_(options.process_sets),
      context_{&config_, timeline_.get(), nullptr, stuck_limit_,
               options.solo_bytes},
      global_(std::make_unique<ProcessSetRunner>(
          0, AllRanks(size_), comm_, nullptr, &context_,
          static_cast<ProcessSetHost*>(this))),
      device_(config, registry, runtimes_, &global_->reducer(),
              DeviceNeedsReducer(config)) {
  global_->set_device(&device_);
  {
    absl::MutexLock lock(&mu_);
    set_ranks_[0] = AllRanks(size_);
  }
  // Ids 1, 2, ... now, so ops may be enqueued on them at once; the
  // background thread builds their communicators before its first cycle.
  for (const std::vector<int>& ranks : static_sets_) {
    ReserveSet(ranks).IgnoreError();  // Checked by Start: no duplicates.
  }
}

Engine::~Engine() { Shutdown().IgnoreError(); }

absl::StatusOr<Handle> Engine::Enqueue(TensorEntry entry) {
  TERSE_RETURN_IF_ERROR(queue_.closed_status());
  TERSE_ASSIGN_OR_RETURN(const int set_size, ResolveProcessSet(entry));
  TERSE_RETURN_IF_ERROR(CheckEntry(entry, set_size));
  TERSE_RETURN_IF_ERROR(CheckExchange(entry, set_size));
  TERSE_RETURN_IF_ERROR(device_.CheckEntry(entry));
  entry.handle = handles_.Allocate(entry.op == proto::ALLGATHER ||
                                   entry.op == proto::ALLTOALL ||
                                   entry.op == proto::REDUCESCATTER);
  entry.enqueued = Clock::now();
  const Handle handle = entry.handle;
  if (num_open_groups_.load(std::memory_order_acquire) > 0) {
    absl::StatusOr<bool> held = HoldInGroup(entry);
    if (!held.ok()) {
      handles_.Discard(handle);
      return held.status();
    }
    if (*held) return handle;
  }
  absl::Status pushed = queue_.Push(entry);
  if (!pushed.ok()) {
    handles_.Discard(handle);
    return pushed;
  }
  return handle;
}

absl::StatusOr<Handle> Engine::AllreduceAsync(
    const std::string& name, TensorView in, TensorView out,
    const std::vector<int64_t>& shape, ReduceOp op, double prescale,
    double postscale, DoneCallback callback, const std::string& compression,
    std::shared_ptr<Event> ready, int32_t process_set) {
  TensorEntry e;
  e.process_set = process_set;
  if (!compression.empty()) {
    absl::StatusOr<CompressionRule> spec = ParseCompressionSpec(compression);
    if (!spec.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "': ", spec.status().message()));
    }
    e.compression = CompressionSpecString(*spec);
  }
  e.name = name;
  e.op = proto::ALLREDUCE;
  e.input = in;
  e.output = out;
  e.shape = shape;
  e.reduce_op = op;
  e.prescale = prescale;
  e.postscale = postscale;
  e.callback = std::move(callback);
  e.ready = std::move(ready);
  return Enqueue(std::move(e));
}

absl::StatusOr<Handle> Engine::AllgatherAsync(
    const std::string& name, TensorView in, const std::vector<int64_t>& shape,
    DoneCallback callback, std::shared_ptr<Event> ready, int32_t process_set) {
  TensorEntry e;
  e.process_set = process_set;
  e.name = name;
  e.op = proto::ALLGATHER;
  e.input = in;
  e.shape = shape;
  e.callback = std::move(callback);
  e.ready = std::move(ready);
  return Enqueue(std::move(e));
}

absl::StatusOr<Handle> Engine::BroadcastAsync(
    const std::string& name, TensorView buffer,
    const std::vector<int64_t>& shape, int root_rank, DoneCallback callback,
    std::shared_ptr<Event> ready, int32_t process_set) {
  TensorEntry e;
  e.process_set = process_set;
  e.name = name;
  e.op = proto::BROADCAST;
  e.input = buffer;
  e.output = buffer;
  e.shape = shape;
  e.root_rank = root_rank;
  e.callback = std::move(callback);
  e.ready = std::move(ready);
  return Enqueue(std::move(e));
}

absl::StatusOr<bool> Engine::Poll(Handle handle) const {
  TERSE_ASSIGN_OR_RETURN(bool complete, handles_.Poll(handle));
  if (!complete) return false;
  std::shared_ptr<Event> done;
  {
    absl::MutexLock lock(&mu_);
    auto it = done_.find(handle);
    if (it != done_.end()) done = it->second;
  }
  if (done == nullptr) return true;
  return done->Query();
}

absl::Status Engine::Wait(Handle handle) {
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Event> done, WaitIssued(handle));
  if (done == nullptr) return absl::OkStatus();
  return done->HostWait();
}

absl::StatusOr<std::shared_ptr<Event>> Engine::WaitIssued(Handle handle) {
  absl::Status status = handles_.Wait(handle);
  std::shared_ptr<Event> done = TakeDone(handle);
  if (!status.ok()) return status;
  return done;
}

std::shared_ptr<Event> Engine::TakeDone(Handle handle) {
  absl::MutexLock lock(&mu_);
  auto node = done_.extract(handle);
  return node.empty() ? nullptr : std::move(node.mapped());
}

absl::StatusOr<AllgatherResult> Engine::TakeAllgatherResult(Handle handle) {
  return handles_.TakeAllgatherResult(handle);
}

absl::Status Engine::Barrier(int32_t process_set) {
  TensorEntry e;
  {
    absl::MutexLock lock(&mu_);
    e.name = absl::StrCat("__terse.barrier.", barrier_seq_[process_set]++);
  }
  e.process_set = process_set;
  e.op = proto::BARRIER;
  TERSE_ASSIGN_OR_RETURN(Handle handle, Enqueue(std::move(e)));
  return Wait(handle);
}

absl::StatusOr<int> Engine::Join() {
  TensorEntry e;
  e.name = kJoinName;
  e.op = proto::JOIN;
  TERSE_ASSIGN_OR_RETURN(Handle handle, Enqueue(std::move(e)));
  TERSE_RETURN_IF_ERROR(Wait(handle));
  absl::MutexLock lock(&mu_);
  return last_joined_;
}

absl::Status Engine::Shutdown() {
  // Idempotent; a concurrent caller waits for the first. (call_once rather
  // than a mutex held across the queue's: no nested lock.)
  std::call_once(shutdown_once_, [this] {
    queue_.RequestShutdown();
    if (thread_.joinable()) thread_.join();
    if (timeline_ != nullptr) timeline_->Close().IgnoreError();
  });
  return fatal_status();
}

absl::Status Engine::StartTimeline(const std::string& path) {
  const std::string mine = TimelinePath(path, rank_);
  if (mine.empty()) return absl::OkStatus();
  return timeline_->Start(mine);
}

absl::Status Engine::StopTimeline() { return timeline_->Stop(); }

absl::Status Engine::fatal_status() const {
  absl::MutexLock lock(&mu_);
  return Detached(fatal_);
}

std::string Engine::last_stall_warning() const {
  absl::MutexLock lock(&mu_);
  return stall_warning_;
}

EngineStats Engine::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void Engine::Loop() {
  // Collective (heartbeat addresses), on the thread of every collective.
  stall_guard_ = StallGuard::Start(comm_, rank_, config_.stall_shutdown_seconds,
                                   [this] { return queue_.InFlightNames(); });
  context_.stall_guard = stall_guard_.get();
  CreateStaticSets();
  auto cycle_of = [](double ms) {
    return std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double, std::milli>(ms));
  };
  auto cycle = cycle_of(config_.cycle_time_ms);
  if (config_.autotune) {
    absl::StatusOr<std::unique_ptr<AutotuneSession>> tune =
        AutotuneSession::Create(config_, comm_);
    if (!tune.ok()) {
      Stop(tune.status(), /*fatal=*/true);
      return;
    }
    autotune_ = *std::move(tune);
  }
  Clock::time_point next = Clock::now();
  while (true) {
    next += cycle;
    const Clock::time_point now = Clock::now();
    if (next > now) {
      // Idle: the first op of a burst starts a cycle at once (issue 19).
      if (queue_.WaitForPush(next)) next = Clock::now();
    } else {
      next = now;
    }
    std::vector<TensorEntry> fresh;
    queue_.Drain(&fresh);
    for (TensorEntry& e : fresh) {
      if (e.process_set == 0) {
        global_->Submit(std::move(e));
        continue;
      }
      auto it = sets_.find(e.process_set);
      if (it != sets_.end()) {
        it->second->Submit(std::move(e));
        continue;
      }
      // Removed between enqueue and now.
      const int32_t set = e.process_set;
      const absl::Status removed = absl::InvalidArgumentError(absl::StrCat(
          "tensor '", e.name, "': process set ", set, " was removed"));
      std::vector<TensorEntry> gone;
      gone.push_back(std::move(e));
      Complete(set, std::move(gone), removed, {}, nullptr);
    }
    CycleOutcome outcome;
    absl::Status negotiated =
        global_->Cycle(queue_.shutdown_requested(), local_error_, &outcome);
    if (!negotiated.ok()) {
      Stop(negotiated, /*fatal=*/true);
      return;
    }
    if (!outcome.stall_warning.empty()) {
      TERSE_LOG(Warning) << outcome.stall_warning;
      absl::MutexLock lock(&mu_);
      stall_warning_ = outcome.stall_warning;
    }
    NoteLocalError(global_->TakeLocalError());
    if (!outcome.error.ok()) {
      Stop(outcome.error, /*fatal=*/true);
      return;
    }
    if (outcome.shutdown) {
      Stop(ShutDownError(), /*fatal=*/false);
      return;
    }
    CycleSets();
    if (autotune_ != nullptr) {
      absl::Status tuned = autotune_->AfterCycle(
          global_->steps_reduced(), global_->bytes_reduced(), Clock::now(),
          [this](int64_t bytes) { return global_->Regroup(bytes); });
      if (!tuned.ok()) {
        Stop(tuned, /*fatal=*/true);
        return;
      }
      cycle = cycle_of(autotune_->cycle_time_ms());
      absl::MutexLock lock(&mu_);
      stats_.autotune_threshold_bytes =
          autotune_->tuner().current().fusion_threshold_bytes;
      stats_.autotune_cycle_time_ms = autotune_->cycle_time_ms();
      stats_.autotune_done = autotune_->tuner().done();
    }
    AwaitBucketMembers();
  }
}

void Engine::NoteLocalError(const absl::Status& status) {
  if (!status.ok() && local_error_.ok()) local_error_ = status;
}

void Engine::Complete(int32_t set, std::vector<TensorEntry> entries,
                      const absl::Status& status,
                      std::vector<AllgatherResult> results,
                      std::shared_ptr<Event> done) {
  std::vector<std::string> names;
  std::vector<Handle> handles;
  names.reserve(entries.size());
  handles.reserve(entries.size());
  for (const TensorEntry& e : entries) {
    names.push_back(e.name);
    handles.push_back(e.handle);
  }
  queue_.ReleaseAll(set, names);
  if (done != nullptr && status.ok()) {
    absl::MutexLock lock(&mu_);
    for (Handle h : handles) done_[h] = done;
  }
  for (TensorEntry& e : entries) {
    if (e.callback) e.callback(status);
  }
  if (entries.size() == 1 && results.size() == 1) {
    handles_.Complete(handles[0], status, std::move(results[0]));
  } else {
    handles_.CompleteAll(handles, status);
  }
}

void Engine::BeforeCompletions(const ProcessSetRunner& runner) {
  // Before any op of this cycle completes, so a waiter sees fresh stats.
  absl::MutexLock lock(&mu_);
  stats_.cycles = runner.negotiator().cycles();
  stats_.coordinator_rounds = runner.negotiator().coordinator_rounds();
  stats_.requests_sent = runner.negotiator().requests_sent();
  stats_.buckets = runner.buckets().num_buckets();
  stats_.cache_entries = runner.negotiator().cache().size();
}

void Engine::CountBucketRun() {
  absl::MutexLock lock(&mu_);
  ++stats_.bucket_runs;
}

void Engine::Joined(int last_joined_rank) {
  absl::MutexLock lock(&mu_);
  last_joined_ = last_joined_rank;
}

void Engine::Stop(const absl::Status& cause, bool fatal) {
  absl::Status enqueue_error;
  absl::Status pending_error;
  if (fatal) {
    pending_error = absl::Status(
        cause.code(),
        absl::StrCat("terse stopped after an error: ", cause.message()));
    enqueue_error = pending_error;
    TERSE_LOG(Error) << pending_error.message();
    absl::MutexLock lock(&mu_);
    fatal_ = Detached(cause);
  } else {
    pending_error = cause;
    enqueue_error = absl::FailedPreconditionError("terse was shut down");
  }
  queue_.Close(enqueue_error);
  std::vector<TensorEntry> queued;
  queue_.Drain(&queued);
  for (TensorEntry& e : queued) {
    const int32_t set = e.process_set;
    std::vector<TensorEntry> one;
    one.push_back(std::move(e));
    Complete(set, std::move(one), pending_error, {}, nullptr);
  }
  global_->FailAll(pending_error);
  std::vector<int32_t> ids;
  for (auto& [id, runner] : sets_) {
    runner->FailAll(pending_error);
    ids.push_back(id);
  }
  UnregisterSetReducers(ids);
  sets_.clear();
  absl::MutexLock lock(&mu_);
  stopped_ = true;
}

}  // namespace terse
