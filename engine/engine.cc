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
      negotiator_(comm_, NegotiatorOptions{config.cache_capacity,
                                           config.stall_check_seconds,
                                           config.stall_shutdown_seconds}),
      buckets_(
          config.fusion_threshold_bytes, options.solo_bytes,
          [config](const std::string& name, const std::string& spec) {
            // Tensors under different compression policies never share a
            // bucket, so each bucket has one policy (the per-call spec, when
            // given, else the name rules).
            const CompressionChoice c =
                ChooseCompressionFor(name, spec, config);
            return absl::StrCat(c.name, ":", c.cf);
          },
          [config](const std::string& name, const std::string& spec) {
            // Only dense tensors are reduced alone in place; a compressed
            // bucket copies into its buffer anyway.
            return ChooseCompressionFor(name, spec, config).name == "none";
          },
          config.forget_after_steps),
      reducer_(config, rank_, size_),
      executor_(comm_, &reducer_, timeline_.get()),
      device_(config, registry, runtimes_, &reducer_,
              [config](const Bucket& bucket) {
                // Compression or momentum correction: the reducer's work.
                return config.momentum_correction > 0 ||
                       ChooseCompressionFor(bucket.members.front().name,
                                            bucket.compression, config)
                               .name != "none";
              }) {}

Engine::~Engine() { Shutdown().IgnoreError(); }

absl::StatusOr<Handle> Engine::Enqueue(TensorEntry entry) {
  TERSE_RETURN_IF_ERROR(queue_.closed_status());
  TERSE_RETURN_IF_ERROR(CheckEntry(entry, size_));
  TERSE_RETURN_IF_ERROR(device_.CheckEntry(entry));
  entry.handle = handles_.Allocate(entry.op == proto::ALLGATHER);
  entry.enqueued = Clock::now();
  const Handle handle = entry.handle;
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
    std::shared_ptr<Event> ready) {
  TensorEntry e;
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

absl::StatusOr<Handle> Engine::AllgatherAsync(const std::string& name,
                                              TensorView in,
                                              const std::vector<int64_t>& shape,
                                              DoneCallback callback,
                                              std::shared_ptr<Event> ready) {
  TensorEntry e;
  e.name = name;
  e.op = proto::ALLGATHER;
  e.input = in;
  e.shape = shape;
  e.callback = std::move(callback);
  e.ready = std::move(ready);
  return Enqueue(std::move(e));
}

absl::StatusOr<Handle> Engine::BroadcastAsync(const std::string& name,
                                              TensorView buffer,
                                              const std::vector<int64_t>& shape,
                                              int root_rank,
                                              DoneCallback callback,
                                              std::shared_ptr<Event> ready) {
  TensorEntry e;
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

absl::Status Engine::Barrier() {
  TensorEntry e;
  e.name = absl::StrCat("__terse.barrier.", barrier_seq_++);
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
  const auto cycle = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double, std::milli>(config_.cycle_time_ms));
  Clock::time_point next = Clock::now();
  while (true) {
    next += cycle;
    const Clock::time_point now = Clock::now();
    if (next > now) {
      std::this_thread::sleep_until(next);
    } else {
      next = now;
    }
    std::vector<TensorEntry> fresh;
    queue_.Drain(&fresh);
    for (TensorEntry& e : fresh) {
      absl::Status submitted =
          negotiator_.Submit(MakeRequest(e, rank_), e.enqueued);
      const std::string name = e.name;
      in_flight_[name] = std::move(e);
      if (!submitted.ok()) Finish(name, submitted);
    }
    absl::StatusOr<CycleOutcome> outcome = [&] {
      StallGuard::Phase phase(stall_guard_.get(), "negotiation");
      return negotiator_.RunCycle(queue_.shutdown_requested(), local_error_);
    }();
    if (!outcome.ok()) {
      Stop(outcome.status(), /*fatal=*/true);
      return;
    }
    if (!outcome->stall_warning.empty()) {
      TERSE_LOG(Warning) << outcome->stall_warning;
      absl::MutexLock lock(&mu_);
      stall_warning_ = outcome->stall_warning;
    }
    Execute(outcome->responses);
    if (!outcome->error.ok()) {
      Stop(outcome->error, /*fatal=*/true);
      return;
    }
    if (outcome->shutdown) {
      Stop(ShutDownError(), /*fatal=*/false);
      return;
    }
  }
}

void Engine::Execute(const std::vector<proto::Response>& responses) {
  const Clock::time_point ready_at = Clock::now();
  std::vector<const proto::Response*> ready;
  std::vector<const proto::Response*> others;
  std::vector<int> complete;
  for (const proto::Response& r : responses) {
    if (r.op() != proto::JOIN && r.names_size() != 1) {
      // Every response this engine's coordinator builds names one op.
      if (local_error_.ok()) {
        local_error_ = absl::DataLossError(
            "negotiation: a response from rank 0 does not name one op");
      }
      continue;
    }
    if (r.kind() == proto::Response::ERROR) {
      for (const std::string& name : r.names()) {
        Finish(name, absl::InvalidArgumentError(r.error()));
        for (int id : buckets_.Remove(name)) complete.push_back(id);
      }
    } else if (r.op() == proto::ALLREDUCE) {
      std::vector<int64_t> shape(r.shape().begin(), r.shape().end());
      if (ShapeElements(shape) < 0 || !IsValidDataType(r.dtype())) {
        if (local_error_.ok()) {
          local_error_ = absl::DataLossError(
              "negotiation: malformed allreduce response from rank 0");
        }
        continue;
      }
      ready.push_back(&r);
    } else {
      others.push_back(&r);
    }
  }
  for (int id : buckets_.OnReady(ready)) complete.push_back(id);
  for (int id : buckets_.Tick(stuck_limit_)) complete.push_back(id);
  for (int id : buckets_.TakeChanged()) {
    executor_.Forget(id);
    device_.Forget(id);
  }
  executor_.ForgetTensors(buckets_.TakeForgotten());
  {
    // Before any op of this cycle completes, so a waiter sees fresh stats.
    absl::MutexLock lock(&mu_);
    stats_.cycles = negotiator_.cycles();
    stats_.coordinator_rounds = negotiator_.coordinator_rounds();
    stats_.requests_sent = negotiator_.requests_sent();
    stats_.buckets = buckets_.num_buckets();
    stats_.cache_entries = negotiator_.cache().size();
  }
  std::vector<int> seen;
  for (int id : complete) {
    // A bucket may be reported twice (a member failed, then the rest became
    // ready) or have changed since; run each complete bucket once.
    if (std::find(seen.begin(), seen.end(), id) != seen.end() ||
        !buckets_.exists(id) || !buckets_.bucket(id).complete()) {
      continue;
    }
    seen.push_back(id);
    RunBucket(id, ready_at);
  }
  for (const proto::Response* r : others) {
    switch (r->op()) {
      case proto::BROADCAST:
        RunBroadcast(*r, ready_at);
        break;
      case proto::ALLGATHER:
        RunAllgather(*r, ready_at);
        break;
      case proto::BARRIER:
        Finish(r->names(0), absl::OkStatus());
        break;
      case proto::JOIN: {
        {
          absl::MutexLock lock(&mu_);
          last_joined_ = r->last_joined_rank();
        }
        Finish(kJoinName, absl::OkStatus());
        break;
      }
      default:
        break;
    }
  }
}

void Engine::RunBucket(int id, Clock::time_point ready_at) {
  {
    absl::MutexLock lock(&mu_);
    ++stats_.bucket_runs;  // Before the ops complete (see Execute).
  }
  const Bucket& bucket = buckets_.bucket(id);
  std::vector<const TensorEntry*> entries(bucket.members.size(), nullptr);
  for (size_t i = 0; i < entries.size(); ++i) {
    auto it = in_flight_.find(bucket.members[i].name);
    if (it != in_flight_.end() && it->second.op == proto::ALLREDUCE &&
        it->second.input.count == bucket.members[i].count &&
        it->second.input.dtype == bucket.dtype) {
      entries[i] = &it->second;
    }
  }
  // Even after a local error this rank takes part, so that no peer blocks in
  // the collective; the error reaches every rank in the next cycle.
  std::shared_ptr<Event> done;
  absl::Status status = [&] {
    StallGuard::Phase phase(stall_guard_.get(), "allreduce of bucket ",
                            std::to_string(id));
    return bucket.device_kind == static_cast<int32_t>(Device::Kind::kCpu)
               ? executor_.Run(bucket, entries, ready_at)
               : device_.RunBucket(bucket, entries, &done);
  }();
  if (!status.ok() && local_error_.ok()) local_error_ = status;
  std::vector<std::string> names;
  names.reserve(bucket.members.size());
  for (const BucketMember& m : bucket.members) names.push_back(m.name);
  buckets_.Reset(id);
  FinishAll(names, status, std::move(done));
}

void Engine::RunBroadcast(const proto::Response& r,
                          Clock::time_point ready_at) {
  const std::string& name = r.names(0);
  StallGuard::Phase phase(stall_guard_.get(), "broadcast of ", name);
  const Clock::time_point start = Clock::now();
  std::vector<int64_t> shape(r.shape().begin(), r.shape().end());
  const int64_t count = ShapeElements(shape);
  if (count < 0 || !IsValidDataType(r.dtype())) {
    Finish(name, absl::DataLossError(absl::StrCat(
                     "tensor '", name, "': malformed broadcast response")));
    return;
  }
  const int64_t bytes =
      count *
      static_cast<int64_t>(DataTypeSize(static_cast<DataType>(r.dtype())));
  auto it = in_flight_.find(name);
  const bool local = it != in_flight_.end() &&
                     it->second.input.bytes() == bytes &&
                     it->second.op == proto::BROADCAST;
  if (r.device_kind() != static_cast<int32_t>(Device::Kind::kCpu)) {
    std::shared_ptr<Event> done;
    absl::Status status = device_.RunBroadcast(
        static_cast<Device::Kind>(r.device_kind()),
        local ? &it->second : nullptr, bytes, r.root_rank(), &done);
    if (!status.ok() && local_error_.ok()) local_error_ = status;
    Finish(name, status, {}, std::move(done));
    return;
  }
  std::vector<uint8_t> scratch;
  void* buffer = nullptr;
  if (it != in_flight_.end() && it->second.input.bytes() == bytes) {
    buffer = it->second.input.data;
  } else {
    scratch.resize(bytes);  // No local op: take part without one.
    buffer = scratch.data();
  }
  absl::Status status = comm_->Broadcast(buffer, bytes, r.root_rank());
  if (!status.ok() && local_error_.ok()) local_error_ = status;
  if (timeline_ != nullptr) {
    const std::string track = absl::StrCat("broadcast ", name);
    const Clock::time_point enqueued =
        it != in_flight_.end() ? it->second.enqueued : ready_at;
    timeline_->Record(track, "NEGOTIATE", enqueued, ready_at);
    timeline_->Record(track, "QUEUE", ready_at, start);
    timeline_->Record(track, "COMMUNICATE", start, Clock::now(),
                      {{"bytes", absl::StrCat(bytes)},
                       {"root", absl::StrCat(r.root_rank())}});
  }
  Finish(name, status);
}

void Engine::RunAllgather(const proto::Response& r,
                          Clock::time_point ready_at) {
  const std::string& name = r.names(0);
  StallGuard::Phase phase(stall_guard_.get(), "allgather of ", name);
  const Clock::time_point start = Clock::now();
  auto malformed = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat(
        "tensor '", name, "': malformed allgather response: ", why));
  };
  if (r.tensor_sizes_size() != size_ || r.shape_size() == 0 ||
      !IsValidDataType(r.dtype())) {
    Finish(name, malformed("sizes"));
    return;
  }
  std::vector<int64_t> row_shape(r.shape().begin() + 1, r.shape().end());
  const int64_t row = ShapeElements(row_shape);
  const DataType dtype = static_cast<DataType>(r.dtype());
  const int64_t elem = static_cast<int64_t>(DataTypeSize(dtype));
  std::vector<int64_t> recv_bytes(size_);
  int64_t total = 0;
  for (int i = 0; i < size_; ++i) {
    const int64_t d = r.tensor_sizes(i);
    if (row < 0 || d < 0 || (row > 0 && d > (int64_t{1} << 40) / row / elem)) {
      Finish(name, malformed("first dimensions"));
      return;
    }
    recv_bytes[i] = d * row * elem;
    total += recv_bytes[i];
  }
  AllgatherResult result;
  result.data.resize(total);
  result.dtype = dtype;
  result.shape.assign(r.shape().begin(), r.shape().end());
  result.first_dims.assign(r.tensor_sizes().begin(), r.tensor_sizes().end());
  auto it = in_flight_.find(name);
  std::vector<uint8_t> scratch;
  const void* send = nullptr;
  const bool local =
      it != in_flight_.end() && it->second.input.bytes() == recv_bytes[rank_];
  if (local) {
    send = it->second.input.data;
  } else {
    scratch.resize(recv_bytes[rank_]);  // Take part without a local op.
    send = scratch.data();
  }
  absl::Status status =
      r.device_kind() != static_cast<int32_t>(Device::Kind::kCpu)
          ? device_.RunAllgather(static_cast<Device::Kind>(r.device_kind()),
                                 local ? &it->second : nullptr, recv_bytes,
                                 result.data.data())
          : comm_->Allgatherv(send, result.data.data(), recv_bytes);
  if (!status.ok() && local_error_.ok()) local_error_ = status;
  if (timeline_ != nullptr) {
    const std::string track = absl::StrCat("allgather ", name);
    const Clock::time_point enqueued =
        it != in_flight_.end() ? it->second.enqueued : ready_at;
    timeline_->Record(track, "NEGOTIATE", enqueued, ready_at);
    timeline_->Record(track, "QUEUE", ready_at, start);
    timeline_->Record(track, "COMMUNICATE", start, Clock::now(),
                      {{"bytes", absl::StrCat(total)}});
  }
  Finish(name, status, std::move(result));
}

void Engine::Finish(const std::string& name, const absl::Status& status,
                    AllgatherResult result, std::shared_ptr<Event> done) {
  auto node = in_flight_.extract(name);
  if (node.empty()) return;
  TensorEntry entry = std::move(node.mapped());
  queue_.Release(name);
  if (done != nullptr && status.ok()) {
    absl::MutexLock lock(&mu_);
    done_[entry.handle] = std::move(done);
  }
  if (entry.callback) entry.callback(status);
  handles_.Complete(entry.handle, status, std::move(result));
}

void Engine::FinishAll(const std::vector<std::string>& names,
                       const absl::Status& status,
                       std::shared_ptr<Event> done) {
  std::vector<TensorEntry> entries;
  std::vector<std::string> released;
  std::vector<Handle> handles;
  entries.reserve(names.size());
  for (const std::string& name : names) {
    auto node = in_flight_.extract(name);
    if (node.empty()) continue;
    released.push_back(name);
    handles.push_back(node.mapped().handle);
    entries.push_back(std::move(node.mapped()));
  }
  queue_.ReleaseAll(released);
  if (done != nullptr && status.ok()) {
    absl::MutexLock lock(&mu_);
    for (Handle h : handles) done_[h] = done;
  }
  for (TensorEntry& e : entries) {
    if (e.callback) e.callback(status);
  }
  handles_.CompleteAll(handles, status);
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
    const std::string name = e.name;
    in_flight_[name] = std::move(e);
  }
  std::vector<std::string> names;
  for (const auto& [name, entry] : in_flight_) names.push_back(name);
  for (const std::string& name : names) Finish(name, pending_error);
  absl::MutexLock lock(&mu_);
  stopped_ = true;
}

}  // namespace terse
