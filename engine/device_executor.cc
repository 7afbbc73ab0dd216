#include "engine/device_executor.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/data_type.h"
#include "common/logging.h"
#include "common/status.h"
#include "compressors/registry.h"
#include "device/cuda_kernels.h"
#include "engine/scale.h"

namespace terse {

DeviceExecutor::DeviceExecutor(const Config& config,
                               CommunicatorRegistry* registry,
                               const DeviceRuntimes* runtimes,
                               CompressedReducer* reducer,
                               NeedsReducer needs_reducer)
    : config_(config),
      staged_(config.gpu_operations == "mpi"),
      reducer_(reducer),
      needs_reducer_(std::move(needs_reducer)),
      registry_(registry),
      runtimes_(runtimes),
      local_rank_(registry->control()->local_rank()),
      compression_(config, registry->control()->rank(),
                   registry->control()->size(), reducer) {}

namespace {

// The engine stream's progress on the timeline. Mark() enqueues a host
// function that takes the time when the stream reaches it; the last one
// (after phases.size() + 1 marks) records the phases between the marks.
// Inert when no timeline is being written. The marks run in stream order on
// the stream's own thread, one after another, so the times need no lock;
// the executor's destructor synchronises its streams before the engine's
// timeline goes, so a pending mark never outlives it.
class StreamPhases {
 public:
  StreamPhases(Timeline* timeline, std::string track,
               std::vector<std::pair<std::string, TimelineArgs>> phases) {
    if (timeline == nullptr || !timeline->active()) return;
    state_ = std::make_shared<State>();
    state_->timeline = timeline;
    state_->track = std::move(track);
    state_->phases = std::move(phases);
    state_->marks.resize(state_->phases.size() + 1);
  }

  absl::Status Mark(Stream* stream) {
    if (state_ == nullptr) return absl::OkStatus();
    const size_t i = next_++;
    std::shared_ptr<State> s = state_;
    return stream->LaunchHost([s, i] {
      s->marks[i] = Clock::now();
      if (i + 1 < s->marks.size()) return;
      for (size_t p = 0; p < s->phases.size(); ++p) {
        s->timeline->Record(s->track, s->phases[p].first, s->marks[p],
                            s->marks[p + 1], s->phases[p].second);
      }
    });
  }

 private:
  struct State {
    Timeline* timeline = nullptr;
    std::string track;
    std::vector<std::pair<std::string, TimelineArgs>> phases;
    std::vector<Clock::time_point> marks;
  };
  std::shared_ptr<State> state_;
  size_t next_ = 0;
};

}  // namespace

DeviceExecutor::~DeviceExecutor() {
  // Pending work may still read or write the fusion and staging buffers.
  for (auto& [kind, ctx] : contexts_) {
    absl::Status synced = ctx->stream->Synchronize();
    if (!synced.ok()) {
      TERSE_LOG(Error) << "engine stream on " << Device::KindName(kind)
                       << " at shutdown: " << synced.message();
    }
  }
  fusion_.clear();
}

void DeviceExecutor::Forget(int bucket_id) {
  compression_.Forget(bucket_id);
  auto it = fusion_.find(bucket_id);
  if (it == fusion_.end()) return;
  auto ctx = contexts_.find(it->second.kind);
  if (ctx != contexts_.end()) {
    absl::Status synced = ctx->second->stream->Synchronize();
    if (!synced.ok()) {
      TERSE_LOG(Error) << "engine stream: " << synced.message();
    }
  }
  fusion_.erase(it);
}

absl::Status DeviceExecutor::CheckView(const std::string& name,
                                       const TensorView& view,
                                       const char* what) {
  absl::StatusOr<DeviceRuntime*> runtime = runtimes_->Get(view.device.kind);
  if (!runtime.ok()) {
    return absl::Status(
        runtime.status().code(),
        absl::StrCat("tensor '", name, "': ", what, " on ",
                     view.device.ToString(), ": ", runtime.status().message()));
  }
  if (view.device.ordinal < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': ", what, " has device ordinal ",
                     view.device.ordinal));
  }
  {
    absl::MutexLock lock(&mu_);
    auto [it, fresh] = ordinals_.emplace(view.device.kind, view.device.ordinal);
    if (!fresh && it->second != view.device.ordinal) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", name, "': ", what, " is on ", view.device.ToString(),
          " but this rank's engine moves ", Device::KindName(view.device.kind),
          " tensors of ", Device{view.device.kind, it->second}.ToString(),
          " (one device per kind and rank)"));
    }
  }
  return (*runtime)->CheckDeviceMemory(
      view.data, view.bytes(), view.device.ordinal,
      absl::StrCat("tensor '", name, "': ", what));
}

absl::Status DeviceExecutor::CheckEntry(const TensorEntry& e) {
  if (e.op == proto::BARRIER || e.op == proto::JOIN) return absl::OkStatus();
  if (e.input.device.is_cpu()) {
    if (e.ready != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", e.name, "': a ready event is for device tensors"));
    }
    if (e.op == proto::ALLREDUCE && !e.output.device.is_cpu()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", e.name, "': output on ",
                       e.output.device.ToString(), ", input on cpu"));
    }
    return absl::OkStatus();
  }
  TERSE_RETURN_IF_ERROR(CheckView(e.name, e.input, "input"));
  if (e.op != proto::ALLREDUCE) return absl::OkStatus();
  if (e.output.device != e.input.device) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", e.name, "': output on ", e.output.device.ToString(),
        ", input on ", e.input.device.ToString()));
  }
  TERSE_RETURN_IF_ERROR(CheckView(e.name, e.output, "output"));
  return absl::OkStatus();
}

int DeviceExecutor::OrdinalFor(Device::Kind kind) const {
  absl::MutexLock lock(&mu_);
  auto pinned = ordinals_.find(kind);
  return pinned != ordinals_.end() ? pinned->second : local_rank_;
}

absl::StatusOr<DeviceExecutor::Context*> DeviceExecutor::ContextFor(
    Device::Kind kind) {
  auto it = contexts_.find(kind);
  if (it != contexts_.end()) return it->second.get();
  auto ctx = std::make_unique<Context>();
  TERSE_ASSIGN_OR_RETURN(ctx->runtime, runtimes_->Get(kind));
  ctx->ordinal = pins_->OrdinalFor(kind);
  TERSE_ASSIGN_OR_RETURN(ctx->stream, ctx->runtime->CreateStream(ctx->ordinal));
  Context* raw = ctx.get();
  contexts_.emplace(kind, std::move(ctx));
  return raw;
}

absl::StatusOr<void*> DeviceExecutor::Staging(Context* ctx, int64_t bytes) {
  if (ctx->staging.data() == nullptr || ctx->staging.bytes() < bytes) {
    // The stream may still copy from the old buffer.
    TERSE_RETURN_IF_ERROR(ctx->stream->Synchronize());
    TERSE_ASSIGN_OR_RETURN(
        ctx->staging, DeviceBuffer::Allocate(ctx->runtime, ctx->ordinal, bytes,
                                             /*host=*/true));
  }
  return ctx->staging.data();
}

absl::StatusOr<void*> DeviceExecutor::Scratch(Context* ctx, int64_t bytes) {
  if (ctx->scratch.data() == nullptr || ctx->scratch.bytes() < bytes) {
    TERSE_RETURN_IF_ERROR(ctx->stream->Synchronize());
    TERSE_ASSIGN_OR_RETURN(
        ctx->scratch,
        DeviceBuffer::Allocate(ctx->runtime, ctx->ordinal, bytes));
  }
  return ctx->scratch.data();
}

absl::Status DeviceExecutor::ScaledCopy(Context* ctx, void* dst,
                                        const void* src, int64_t count,
                                        DataType dtype, double factor) {
  if (count == 0 || (dst == src && factor == 1.0)) return absl::OkStatus();
  if (factor == 1.0) {
    return ctx->stream->Memcpy(
        dst, src, count * static_cast<int64_t>(DataTypeSize(dtype)));
  }
  if (ctx->runtime->host_addressable()) {
    // The simulated device: the CPU kernel, run in stream order.
    return ctx->stream->LaunchHost([dst, src, count, dtype, factor] {
      terse::ScaledCopy(dst, src, count, dtype, factor);
    });
  }
  return CudaScaledCopy(ctx->ordinal, ctx->stream->native_handle(), dst, src,
                        count, dtype, factor);
}

absl::Status DeviceExecutor::Collective(
    Context* ctx, void* data, int64_t bytes,
    const std::function<absl::Status(Communicator*, void*)>& op) {
  if (staged_) {
    TERSE_ASSIGN_OR_RETURN(void* host, Staging(ctx, bytes));
    TERSE_RETURN_IF_ERROR(ctx->stream->Memcpy(host, data, bytes));
    TERSE_RETURN_IF_ERROR(ctx->stream->Synchronize());
    TERSE_RETURN_IF_ERROR(op(registry_->control(), host));
    return ctx->stream->Memcpy(data, host, bytes);
  }
  TERSE_ASSIGN_OR_RETURN(
      Communicator * comm,
      registry_->ForDevice(Device{ctx->runtime->kind(), ctx->ordinal}));
  // NCCL enqueues on the engine stream itself, after the fuse copies: no
  // host wait before it. Backends that read memory when called (the
  // simulated device's) need the stream drained first.
  if (!comm->UseStream(ctx->stream->native_handle())) {
    TERSE_RETURN_IF_ERROR(ctx->stream->Synchronize());
  }
  TERSE_RETURN_IF_ERROR(op(comm, data));
  return comm->Synchronize();
}

absl::Status DeviceExecutor::RecordDone(Context* ctx,
                                        std::shared_ptr<Event>* done) {
  TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Event> event,
                         ctx->runtime->CreateEvent(ctx->ordinal));
  TERSE_RETURN_IF_ERROR(ctx->stream->Record(event.get()));
  *done = std::move(event);
  return absl::OkStatus();
}

absl::Status DeviceExecutor::RunBucket(
    const Bucket& bucket, const std::vector<const TensorEntry*>& entries,
    Clock::time_point ready_at, Timeline* timeline,
    std::shared_ptr<Event>* done) {
  const Clock::time_point start = Clock::now();
  const Device::Kind kind = static_cast<Device::Kind>(bucket.device_kind);
  TERSE_ASSIGN_OR_RETURN(Context * ctx, ContextFor(kind));
  const ReduceOp op = bucket.reduce_op == ReduceOp::kAverage ? ReduceOp::kSum
                                                             : bucket.reduce_op;
  const bool reduce = needs_reducer_ && needs_reducer_(bucket);
  const CompressionChoice choice = ChooseCompressionFor(
      bucket.members.front().name, bucket.compression, config_);
  const std::string track = absl::StrCat("bucket ", bucket.id);
  if (timeline != nullptr) {
    Clock::time_point first_enqueued = ready_at;
    for (const TensorEntry* e : entries) {
      if (e != nullptr) first_enqueued = std::min(first_enqueued, e->enqueued);
    }
    timeline->Record(track, "NEGOTIATE", first_enqueued, ready_at,
                     {{"bucket", absl::StrCat(bucket.id)},
                      {"tensors", absl::StrCat(bucket.members.size())},
                      {"bytes", absl::StrCat(bucket.bytes)},
                      {"dtype", std::string(DataTypeName(bucket.dtype))},
                      {"device", Device::KindName(kind)}});
    timeline->Record(track, "QUEUE", ready_at, start);
  }
  StreamPhases phases(
      timeline, track,
      {{"FUSE", {}},
       {"COMMUNICATE",
        {{"compression", reduce ? choice.name : std::string("none")}}},
       {"UNFUSE", {}}});
  TERSE_RETURN_IF_ERROR(phases.Mark(ctx->stream.get()));
  if (bucket.members.size() == 1 && entries.front() != nullptr && !reduce) {
    // One tensor, nothing to compress: reduced in its own output (input x
    // prescale into it, the collective there, x postscale / size after).
    // No fusion buffer, and for an in-place op without scaling no copy at
    // all: the device twin of the host path's zero-copy solo buckets.
    const TensorEntry& e = *entries.front();
    if (e.ready != nullptr) {
      TERSE_RETURN_IF_ERROR(ctx->stream->WaitEvent(e.ready.get()));
    }
    void* out = e.output.data;
    TERSE_RETURN_IF_ERROR(ScaledCopy(ctx, out, e.input.data, bucket.count,
                                     bucket.dtype, bucket.prescale));
    TERSE_RETURN_IF_ERROR(phases.Mark(ctx->stream.get()));
    TERSE_RETURN_IF_ERROR(
        Collective(ctx, out, bucket.bytes, [&](Communicator* comm, void* data) {
          return comm->Allreduce(data, bucket.count, bucket.dtype, op);
        }));
    TERSE_RETURN_IF_ERROR(phases.Mark(ctx->stream.get()));
    double scale = bucket.postscale;
    if (bucket.reduce_op == ReduceOp::kAverage) {
      scale /= registry_->control()->size();
    }
    TERSE_RETURN_IF_ERROR(
        ScaledCopy(ctx, out, out, bucket.count, bucket.dtype, scale));
    TERSE_RETURN_IF_ERROR(phases.Mark(ctx->stream.get()));
    return RecordDone(ctx, done);
  }
  auto it = fusion_.find(bucket.id);
  if (it == fusion_.end() || it->second.buffer.bytes() < bucket.bytes) {
    if (it != fusion_.end()) TERSE_RETURN_IF_ERROR(ctx->stream->Synchronize());
    TERSE_ASSIGN_OR_RETURN(
        DeviceBuffer buffer,
        DeviceBuffer::Allocate(ctx->runtime, ctx->ordinal, bucket.bytes));
    const int64_t runs = it != fusion_.end() ? it->second.runs : 0;
    it = fusion_
             .insert_or_assign(bucket.id, Fusion{kind, std::move(buffer), runs})
             .first;
  }
  uint8_t* region = it->second.buffer.as<uint8_t>();
  const int64_t elem = static_cast<int64_t>(DataTypeSize(bucket.dtype));

  // Fuse: after each producer's event, member i's input (x prescale) into
  // its place in the region; zeros for a member without a local op.
  int64_t offset = 0;
  for (size_t i = 0; i < bucket.members.size(); ++i) {
    const int64_t count = bucket.members[i].count;
    const TensorEntry* e = entries[i];
    if (e != nullptr && e->ready != nullptr) {
      TERSE_RETURN_IF_ERROR(ctx->stream->WaitEvent(e->ready.get()));
    }
    if (e != nullptr) {
      TERSE_RETURN_IF_ERROR(ScaledCopy(ctx, region + offset * elem,
                                       e->input.data, count, bucket.dtype,
                                       bucket.prescale));
    } else {
      TERSE_RETURN_IF_ERROR(
          ctx->stream->Memset(region + offset * elem, 0, count * elem));
    }
    offset += count;
  }

  TERSE_RETURN_IF_ERROR(phases.Mark(ctx->stream.get()));
  const DataType dtype = bucket.dtype;
  const int64_t count = bucket.count;
  int size = registry_->control()->size();
  if (reduce &&
      (DeviceCompression::Handles(choice, config_) || choice.name == "none")) {
    // Compression on the device, in stream order.
    const DeviceCompression::Target target{ctx->runtime, ctx->ordinal,
                                           ctx->stream.get()};
    // Sparse messages go device to device over the device's communicator
    // (not when staged: TERSE_GPU_OPERATIONS=mpi).
    DeviceCompression::DeviceAllgatherv gather;
    if (!staged_) {
      gather = [&](const void* send, void* recv,
                   const std::vector<int64_t>& recv_bytes) -> absl::Status {
        TERSE_ASSIGN_OR_RETURN(
            Communicator * comm,
            registry_->ForDevice(Device{ctx->runtime->kind(), ctx->ordinal}));
        // As Collective: NCCL gathers on the engine stream, after the
        // encode; the host waits once, after it (the caller reads the
        // headers). The sizes come from the control plane's allgather of
        // counts (or are fixed for every rank), so they agree.
        if (!comm->UseStream(ctx->stream->native_handle())) {
          TERSE_RETURN_IF_ERROR(ctx->stream->Synchronize());
        }
        TERSE_RETURN_IF_ERROR(
            comm->AllgathervAgreedSizes(send, recv, recv_bytes));
        return comm->Synchronize();
      };
    }
    TERSE_RETURN_IF_ERROR(compression_.Reduce(
        bucket, region, op, it->second.runs++, target, registry_->control(),
        [&](void* data, int64_t n, DataType type) {
          return Collective(ctx, data, n * DataTypeSize(type),
                            [&](Communicator* comm, void* buffer) {
                              return comm->Allreduce(buffer, n, type, op);
                            });
        },
        gather));
  } else if (reduce) {
    // A policy DeviceCompression does not run (none that Config accepts at
    // present; see device_compression.h): the reducer's CPU kernels on the
    // bucket, its residuals, velocities and payloads on the host (payloads
    // over the control communicator). Memory the host cannot address
    // (CUDA) goes through the context's pinned staging buffer, a copy each
    // way per step: correct, not fast.
    void* data = region;
    const bool stage = !ctx->runtime->host_addressable();
    if (it->second.runs == 0) {
      TERSE_LOG(Warning) << "bucket " << bucket.id << " on "
                         << Device::KindName(ctx->runtime->kind())
                         << ": compression '" << choice.name
                         << "' does not run on the device: the CPU reducer "
                            "runs it on a host copy of the bucket"
                         << (stage ? ", one copy each way per step" : "");
    }
    if (stage) {
      TERSE_ASSIGN_OR_RETURN(data, Staging(ctx, bucket.bytes));
      TERSE_RETURN_IF_ERROR(ctx->stream->Memcpy(data, region, bucket.bytes));
    }
    // The reducer reads the bucket on this thread: the fuse (and the copy
    // out) must have run.
    TERSE_RETURN_IF_ERROR(ctx->stream->Synchronize());
    BucketReduceContext rctx;
    rctx.bucket = &bucket;
    rctx.data = data;
    rctx.op = op;
    rctx.comm = registry_->control();
    rctx.track = absl::StrCat("bucket ", bucket.id);
    rctx.step = it->second.runs++;
    rctx.host_addressable = true;
    TERSE_RETURN_IF_ERROR(reducer_->Reduce(rctx));
    if (stage) {
      TERSE_RETURN_IF_ERROR(ctx->stream->Memcpy(region, data, bucket.bytes));
    }
  } else {
    TERSE_RETURN_IF_ERROR(Collective(
        ctx, region, bucket.bytes, [&](Communicator* comm, void* data) {
          return comm->Allreduce(data, count, dtype, op);
        }));
  }

  TERSE_RETURN_IF_ERROR(phases.Mark(ctx->stream.get()));
  // Unfuse: the result (x postscale, / size for an average) into each
  // output this rank has.
  double scale = bucket.postscale;
  if (bucket.reduce_op == ReduceOp::kAverage) scale /= size;
  offset = 0;
  for (size_t i = 0; i < bucket.members.size(); ++i) {
    const int64_t n = bucket.members[i].count;
    if (const TensorEntry* e = entries[i]) {
      TERSE_RETURN_IF_ERROR(ScaledCopy(
          ctx, e->output.data, region + offset * elem, n, dtype, scale));
    }
    offset += n;
  }
  TERSE_RETURN_IF_ERROR(phases.Mark(ctx->stream.get()));
  return RecordDone(ctx, done);
}

absl::Status DeviceExecutor::RunBroadcast(Device::Kind kind,
                                          const TensorEntry* entry,
                                          int64_t bytes, int root,
                                          std::shared_ptr<Event>* done) {
  TERSE_ASSIGN_OR_RETURN(Context * ctx, ContextFor(kind));
  void* buffer = nullptr;
  if (entry != nullptr) {
    if (entry->ready != nullptr) {
      TERSE_RETURN_IF_ERROR(ctx->stream->WaitEvent(entry->ready.get()));
    }
    buffer = entry->input.data;
  } else {
    TERSE_ASSIGN_OR_RETURN(buffer, Scratch(ctx, bytes));
  }
  TERSE_RETURN_IF_ERROR(
      Collective(ctx, buffer, bytes, [&](Communicator* comm, void* data) {
        return comm->Broadcast(data, bytes, root);
      }));
  return RecordDone(ctx, done);
}

absl::Status DeviceExecutor::RunAllgather(
    Device::Kind kind, const TensorEntry* entry,
    const std::vector<int64_t>& recv_bytes, void* recv) {
  TERSE_ASSIGN_OR_RETURN(Context * ctx, ContextFor(kind));
  Communicator* control = registry_->control();
  const int64_t mine = recv_bytes[control->rank()];
  TERSE_ASSIGN_OR_RETURN(void* host, Staging(ctx, mine));
  if (entry != nullptr) {
    if (entry->ready != nullptr) {
      TERSE_RETURN_IF_ERROR(ctx->stream->WaitEvent(entry->ready.get()));
    }
    TERSE_RETURN_IF_ERROR(ctx->stream->Memcpy(host, entry->input.data, mine));
  }
  TERSE_RETURN_IF_ERROR(ctx->stream->Synchronize());
  if (entry == nullptr) std::memset(host, 0, static_cast<size_t>(mine));
  // The sizes come from the negotiated response, alike on every rank.
  return control->AllgathervAgreedSizes(host, recv, recv_bytes);
}

}  // namespace terse
