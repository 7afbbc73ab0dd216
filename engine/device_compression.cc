#include "engine/device_compression.h"

#include <chrono>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status.h"
#include "compressors/compressor.h"
#include "compressors/kernels/randomk.h"
#include "compressors/payload.h"
#include "engine/device_compression_internal.h"
#include "engine/device_powersgd.h"
#include "engine/momentum_correction.h"
#include "gravac/policy_factory.h"
#include "gravac/portfolio_policy.h"

namespace terse {
using namespace device_compression_internal;  // NOLINT: own internals.

DeviceCompression::DeviceCompression(const Config& config, int rank, int size,
                                     CompressedReducer* reducer)
    : config_(config), rank_(rank), size_(size), reducer_(reducer) {
  reducer_->set_external_state(this);
}

DeviceCompression::~DeviceCompression() {
  reducer_->set_external_state(nullptr);
  // Work a failed step left queued may still use the buffers freed below.
  absl::MutexLock lock(&mu_);
  std::set<Stream*> streams;
  for (const auto& [id, state] : buckets_) streams.insert(state->target.stream);
  for (const auto& [name, r] : residuals_) streams.insert(r.target.stream);
  for (const auto& [name, v] : velocities_) streams.insert(v.target.stream);
  for (const Residual& r : graveyard_) streams.insert(r.target.stream);
  for (Stream* stream : streams) {
    absl::Status synced = stream->Synchronize();
    if (!synced.ok()) {
      TERSE_LOG(Error) << "engine stream: " << synced.message();
    }
  }
}

bool DeviceCompression::HandlesPolicy(const CompressionChoice& choice,
                                      const Config& config) {
  if (!choice.is_policy) return false;
  if (choice.name == "gravac") {
    std::string family = config.gravac_compressor;
    if (!gravac::IsSingleFamily(config.gravac_candidates, &family)) {
      return PortfolioOnDevice(config);
    }
    return family == "topk" || family == "dgc" || family == "redsync" ||
           family == "randomk";
  }
  const std::string& c = config.accordion_compressor;
  return choice.name == "accordion" &&
         (c == "topk" || c == "dgc" || c == "redsync" || c == "randomk" ||
          c == "powersgd");
}

bool DeviceCompression::Handles(const CompressionChoice& choice,
                                const Config& config) {
  if (choice.is_policy) return HandlesPolicy(choice, config);
  return choice.name == "fp16" || choice.name == "bf16" ||
         choice.name == "topk" || choice.name == "dgc" ||
         choice.name == "redsync" || choice.name == "threshold" ||
         choice.name == "powersgd" || choice.name == "randomk" ||
         choice.name == "efsignsgd" || choice.name == "qsgd";
}

absl::StatusOr<DeviceOps*> DeviceCompression::OpsFor(const Target& target) {
  std::unique_ptr<DeviceOps>& ops = ops_[target.runtime->kind()];
  if (ops == nullptr) {
    TERSE_ASSIGN_OR_RETURN(ops, MakeDeviceOps(target.runtime, target.ordinal));
  }
  return ops.get();
}

absl::Status DeviceCompression::Prepare(const Target& target) {
  if (stale_) {
    // Rebuilt from the restored states on their next step, as the
    // reducer's; their stream's work may still use their buffers.
    for (auto& [id, state] : buckets_) {
      TERSE_RETURN_IF_ERROR(state->target.stream->Synchronize());
    }
    buckets_.clear();
    for (auto& [name, r] : residuals_) graveyard_.push_back(std::move(r));
    residuals_.clear();
    for (auto& [name, v] : velocities_) graveyard_.push_back(std::move(v));
    velocities_.clear();
    stale_ = false;
  }
  if (!graveyard_.empty()) {
    // Their stream's work may still use them.
    for (Residual& r : graveyard_) {
      TERSE_RETURN_IF_ERROR(r.target.stream->Synchronize());
    }
    graveyard_.clear();
  }
  (void)target;
  return absl::OkStatus();
}

absl::StatusOr<DeviceCompression::BucketState*> DeviceCompression::StateFor(
    const Bucket& bucket, const CompressionChoice& choice,
    const Target& target) {
  std::unique_ptr<BucketState>& slot = buckets_[bucket.id];
  if (slot != nullptr) return slot.get();
  auto s = std::make_unique<BucketState>();
  s->target = target;
  TERSE_ASSIGN_OR_RETURN(s->ops, OpsFor(target));
  s->id = bucket.id;
  s->tensors = static_cast<int>(bucket.members.size());
  s->count = bucket.count;
  s->bytes = bucket.bytes;
  s->stream_hash = BucketStream(bucket);
  int64_t offset = 0;
  for (const BucketMember& m : bucket.members) {
    Segment seg;
    seg.name = m.name;
    seg.offset = offset;
    seg.count = m.count;
    seg.shape = m.shape;
    s->segments.push_back(seg);
    offset += m.count;
  }
  s->policy = gravac::CreatePolicy(choice.name, choice.cf, config_, size_);
  if (choice.is_policy) {
    s->adaptive = true;
    s->accumulates = choice.name == "accordion";
  } else {
    TERSE_ASSIGN_OR_RETURN(s->id_kind, CompressorIdFromName(choice.name));
  }
  s->options = OptionsFromConfig(config_);
  s->cf = choice.cf;
  for (size_t i = 0; i < bucket.members.size(); ++i) {
    absl::StrAppend(&s->key, i > 0 ? "," : "", bucket.members[i].name);
  }
  if (s->accumulates) {
    TERSE_ASSIGN_OR_RETURN(
        s->accumulator,
        DeviceBuffer::Allocate(target.runtime, target.ordinal,
                               bucket.count * static_cast<int64_t>(4)));
    TERSE_RETURN_IF_ERROR(
        target.stream->Memset(s->accumulator.data(), 0, bucket.count * 4));
  }
  s->pending_norms.assign(kStatsTrailer, 0.0);
  if (s->id_kind == CompressorId::kPowerSgd) {
    // The CPU path's state key: "bucket:" and the members' names.
    s->powersgd = std::make_unique<DevicePowerSgd>(
        s->options, config_.seed, absl::StrCat("bucket:", s->key), s->segments,
        bucket.count);
  }
  // A loaded checkpoint's state of this bucket (saved on either device
  // kind): the policy's, and PowerSGD's warm starts.
  std::optional<proto::BucketCompressionState> restored =
      reducer_->TakeRestoredBucket(s->key);
  if (restored.has_value()) {
    absl::Status st = s->policy->RestoreState(restored->policy());
    if (!st.ok()) {
      TERSE_LOG(Warning) << "bucket " << bucket.id
                         << ": policy state not restored: " << st;
    }
    if (s->adaptive) {
      TERSE_RETURN_IF_ERROR(RestorePolicyState(*restored, s.get()));
    }
    if (s->powersgd != nullptr) {
      std::map<std::string, std::vector<float>> warm;
      for (const proto::WarmState& w : restored->warm_states()) {
        if (w.compressor() == choice.name && w.cf() == choice.cf &&
            w.level() == 0) {
          warm[w.key()].assign(w.values().begin(), w.values().end());
        }
      }
      s->powersgd->ImportWarm(std::move(warm));
    }
  }
  slot = std::move(s);
  return slot.get();
}

absl::StatusOr<DeviceCompression::Residual*> DeviceCompression::ResidualFor(
    const std::string& name, int64_t count, const Target& target) {
  auto it = residuals_.find(name);
  if (it != residuals_.end() && it->second.count == count &&
      it->second.target.runtime == target.runtime) {
    return &it->second;
  }
  if (it != residuals_.end()) {
    graveyard_.push_back(std::move(it->second));
    residuals_.erase(it);
  }
  Residual r;
  r.target = target;
  r.count = count;
  TERSE_ASSIGN_OR_RETURN(
      r.buffer,
      DeviceBuffer::Allocate(target.runtime, target.ordinal,
                             count * static_cast<int64_t>(sizeof(float))));
  std::optional<std::vector<float>> restored =
      reducer_->TakeResidual(name, count);
  if (restored.has_value()) {
    // The copy reads the host vector later: upload and wait (first use of
    // the tensor only).
    TERSE_RETURN_IF_ERROR(target.stream->Memcpy(
        r.buffer.data(), restored->data(), count * sizeof(float)));
    TERSE_RETURN_IF_ERROR(target.stream->Synchronize());
    r.valid = true;
  }
  return &residuals_.emplace(name, std::move(r)).first->second;
}

absl::Status DeviceCompression::Reduce(const Bucket& bucket, void* data,
                                       ReduceOp op, int64_t step,
                                       const Target& target,
                                       Communicator* control,
                                       const DeviceAllreduce& allreduce,
                                       const DeviceAllgatherv& allgatherv) {
  const CompressionChoice choice = ChooseCompressionFor(
      bucket.members.front().name, bucket.compression, config_);
  const bool compressible = bucket.dtype == DataType::kFloat32 &&
                            op == ReduceOp::kSum && Handles(choice, config_) &&
                            ShouldCompress(bucket.bytes, config_);
  return reducer_->RunExternalStep([&]() -> absl::StatusOr<BucketReport> {
    absl::MutexLock lock(&mu_);
    TERSE_RETURN_IF_ERROR(Prepare(target));
    if (!compressible) {
      if (config_.momentum_correction > 0) {
        // The CPU path's ApplyMomentumBeforeDense: float32 sums only.
        const bool fits =
            bucket.dtype == DataType::kFloat32 && op == ReduceOp::kSum;
        std::vector<Segment> segments;
        int64_t offset = 0;
        for (const BucketMember& m : bucket.members) {
          if (!fits && MomentumCorrection::Applies(m.name)) {
            return absl::FailedPreconditionError(absl::StrCat(
                "TERSE_MOMENTUM_CORRECTION=", config_.momentum_correction,
                " applies momentum to float32 gradients summed or averaged "
                "over ranks; gradient '",
                m.name, "' is ", DataTypeName(bucket.dtype), " (op ",
                static_cast<int>(op),
                "): set TERSE_MOMENTUM_CORRECTION=0 and let the optimizer "
                "apply momentum"));
          }
          Segment seg;
          seg.name = m.name;
          seg.offset = offset;
          seg.count = m.count;
          segments.push_back(seg);
          offset += m.count;
        }
        if (fits) {
          TERSE_ASSIGN_OR_RETURN(DeviceOps * ops, OpsFor(target));
          TERSE_RETURN_IF_ERROR(
              ApplyMomentum(ops, target, segments, static_cast<float*>(data)));
        }
      }
      TERSE_RETURN_IF_ERROR(allreduce(data, bucket.count, bucket.dtype));
      return BucketReport{bucket.id,    static_cast<int>(bucket.members.size()),
                          bucket.bytes, "none",
                          "none",       1,
                          bucket.bytes};
    }
    TERSE_ASSIGN_OR_RETURN(BucketState * s, StateFor(bucket, choice, target));
    const auto start = std::chrono::steady_clock::now();
    float* g = static_cast<float*>(data);
    // a = g + residual on the device (momentum first); a policy's step
    // does it itself, after the portfolio's window has summed g.
    if (!s->adaptive) TERSE_RETURN_IF_ERROR(FormA(*s, g));
    absl::StatusOr<BucketReport> report =
        s->adaptive ? PolicyStep(*s, g, step, control, allreduce, allgatherv)
        : s->id_kind == CompressorId::kFp16 || s->id_kind == CompressorId::kBf16
            ? CastStep(*s, g, allreduce)
        : s->id_kind == CompressorId::kPowerSgd
            ? PowerSgdStep(*s, g, step, allreduce)
        : s->id_kind == CompressorId::kRandomK
            ? RandomKStep(*s, g, step, allreduce)
        : s->id_kind == CompressorId::kEfSignSgd
            ? EfSignSgdStep(*s, g, control, allgatherv)
        : s->id_kind == CompressorId::kQsgd
            ? QsgdStep(*s, g, step, control, allgatherv)
            : SparseStep(*s, g, step, control, allgatherv);
    TERSE_RETURN_IF_ERROR(report.status());
    TERSE_RETURN_IF_ERROR(MarkResidualsWritten(target));
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    s->last_own = seconds;
    own_seconds_total_ += seconds;
    own_bytes_total_ += static_cast<double>(bucket.bytes);
    return report;
  });
}

absl::StatusOr<DeviceCompression::Residual*> DeviceCompression::VelocityFor(
    const std::string& name, int64_t count, const Target& target) {
  auto it = velocities_.find(name);
  if (it != velocities_.end() && it->second.count == count &&
      it->second.target.runtime == target.runtime) {
    return &it->second;
  }
  if (it != velocities_.end()) {
    graveyard_.push_back(std::move(it->second));
    velocities_.erase(it);
  }
  Residual v;
  v.target = target;
  v.count = count;
  TERSE_ASSIGN_OR_RETURN(
      v.buffer,
      DeviceBuffer::Allocate(target.runtime, target.ordinal,
                             count * static_cast<int64_t>(sizeof(float))));
  std::optional<std::vector<float>> restored =
      reducer_->TakeVelocity(name, count);
  if (restored.has_value()) {
    // The copy reads the host vector later: upload and wait (first use).
    TERSE_RETURN_IF_ERROR(target.stream->Memcpy(
        v.buffer.data(), restored->data(), count * sizeof(float)));
    TERSE_RETURN_IF_ERROR(target.stream->Synchronize());
    v.valid = true;
  }
  return &velocities_.emplace(name, std::move(v)).first->second;
}

absl::Status DeviceCompression::ApplyMomentum(
    DeviceOps* ops, const Target& target, const std::vector<Segment>& segments,
    float* g) {
  const float m = static_cast<float>(config_.momentum_correction);
  for (const Segment& seg : segments) {
    if (!MomentumCorrection::Applies(seg.name)) continue;
    TERSE_ASSIGN_OR_RETURN(Residual * v,
                           VelocityFor(seg.name, seg.count, target));
    if (v->valid) {
      TERSE_RETURN_IF_ERROR(ops->MomentumAccumulate(
          target.stream, m, v->buffer.as<float>(), g + seg.offset, seg.count));
    } else {
      // First step: u = g (g unchanged), as the CPU store.
      TERSE_RETURN_IF_ERROR(target.stream->Memcpy(
          v->buffer.data(), g + seg.offset, seg.count * sizeof(float)));
      v->valid = true;
    }
  }
  return absl::OkStatus();
}

absl::Status DeviceCompression::MaskSent(BucketState& s, const float* local) {
  if (config_.momentum_correction <= 0) return absl::OkStatus();
  const Target& t = s.target;
  for (const Segment& seg : s.segments) {
    auto r = residuals_.find(seg.name);
    if (r != residuals_.end() && r->second.valid) {
      TERSE_RETURN_IF_ERROR(s.ops->ClearWhereSent(t.stream, local + seg.offset,
                                                  r->second.buffer.as<float>(),
                                                  seg.count));
    }
    auto v = velocities_.find(seg.name);
    if (v != velocities_.end() && v->second.valid) {
      TERSE_RETURN_IF_ERROR(s.ops->ClearWhereSent(t.stream, local + seg.offset,
                                                  v->second.buffer.as<float>(),
                                                  seg.count));
    }
  }
  return absl::OkStatus();
}

absl::Status DeviceCompression::MarkResidualsWritten(const Target& target) {
  std::unique_ptr<Event>& event = written_[target.stream];
  if (event == nullptr) {
    TERSE_ASSIGN_OR_RETURN(event, target.runtime->CreateEvent(target.ordinal));
  }
  return target.stream->Record(event.get());
}

void DeviceCompression::Forget(int bucket_id) {
  absl::MutexLock lock(&mu_);
  auto it = buckets_.find(bucket_id);
  if (it == buckets_.end()) return;
  absl::Status synced = it->second->target.stream->Synchronize();
  if (!synced.ok()) {
    TERSE_LOG(Error) << "engine stream: " << synced.message();
  }
  buckets_.erase(it);
}

absl::StatusOr<std::vector<ResidualStore::Entry>>
DeviceCompression::ExportResiduals() {
  absl::MutexLock lock(&mu_);
  return ExportEntries(residuals_);
}

absl::StatusOr<std::vector<ResidualStore::Entry>>
DeviceCompression::ExportVelocities() {
  absl::MutexLock lock(&mu_);
  return ExportEntries(velocities_);
}

absl::StatusOr<std::vector<ResidualStore::Entry>>
DeviceCompression::ExportEntries(const std::map<std::string, Residual>& from) {
  std::vector<ResidualStore::Entry> out;
  if (stale_) return out;
  for (auto& [stream, event] : written_) {
    TERSE_RETURN_IF_ERROR(event->HostWait());
  }
  // This thread may not enqueue on the engine streams: copies go on
  // streams of its own (one per runtime), waited for at the end.
  std::map<DeviceRuntime*, std::unique_ptr<Stream>> copies;
  for (const auto& [name, r] : from) {
    if (!r.valid) continue;
    ResidualStore::Entry e;
    e.name = name;
    e.values.resize(r.count);
    const int64_t bytes = r.count * static_cast<int64_t>(sizeof(float));
    if (r.target.runtime->host_addressable()) {
      std::memcpy(e.values.data(), r.buffer.data(), bytes);
    } else {
      std::unique_ptr<Stream>& copy = copies[r.target.runtime];
      if (copy == nullptr) {
        TERSE_ASSIGN_OR_RETURN(
            copy, r.target.runtime->CreateStream(r.target.ordinal));
      }
      TERSE_RETURN_IF_ERROR(
          copy->Memcpy(e.values.data(), r.buffer.data(), bytes));
    }
    out.push_back(std::move(e));
  }
  for (auto& [runtime, copy] : copies) {
    TERSE_RETURN_IF_ERROR(copy->Synchronize());
  }
  return out;
}

absl::StatusOr<std::vector<ExternalCompressionState::SavedBucket>>
DeviceCompression::ExportBuckets() {
  absl::MutexLock lock(&mu_);
  std::vector<SavedBucket> out;
  if (stale_) return out;  // The reducer writes what it loaded.
  const gravac::Decision none;
  // Accumulators and PowerSGD's warm starts are downloaded on streams of
  // this thread's own (see ExportResiduals), one per device, after the
  // steps that wrote them.
  std::map<std::pair<DeviceRuntime*, int>, std::unique_ptr<Stream>> copies;
  auto copy_stream = [&copies](const Target& t) -> absl::StatusOr<Stream*> {
    std::unique_ptr<Stream>& copy = copies[{t.runtime, t.ordinal}];
    if (copy == nullptr) {
      TERSE_ASSIGN_OR_RETURN(copy, t.runtime->CreateStream(t.ordinal));
    }
    return copy.get();
  };
  for (const auto& [id, s] : buckets_) {
    SavedBucket b;
    proto::BucketCompressionState& h = b.header;
    h.set_key(s->key);
    s->policy->SaveState(h.mutable_policy());
    h.set_pending_compressor(none.compressor);
    h.set_pending_send_cf(none.send_cf);
    h.set_pending_quiet(!none.wants_stats);
    if (s->adaptive) {
      TERSE_ASSIGN_OR_RETURN(Stream * copy, copy_stream(s->target));
      TERSE_RETURN_IF_ERROR(SavePolicyState(*s, copy, &b));
      for (auto& [stream, event] : written_) {
        TERSE_RETURN_IF_ERROR(event->HostWait());
      }
      if (s->accumulates) {
        b.accumulator.resize(s->count);
        TERSE_RETURN_IF_ERROR(copy->Memcpy(
            b.accumulator.data(), s->accumulator.data(), s->count * 4));
      }
    }
    if (s->powersgd != nullptr) {
      TERSE_ASSIGN_OR_RETURN(Stream * copy, copy_stream(s->target));
      TERSE_ASSIGN_OR_RETURN(auto warm, s->powersgd->ExportWarm(copy));
      for (auto& [key, q] : warm) {
        proto::WarmState* w = h.add_warm_states();
        w->set_compressor(CompressorName(s->id_kind));
        w->set_cf(s->cf);
        w->set_level(0);
        w->set_key(key);
        b.warm.push_back(std::move(q));
      }
    }
    out.push_back(std::move(b));
  }
  for (auto& [device, copy] : copies) {
    TERSE_RETURN_IF_ERROR(copy->Synchronize());
  }
  return out;
}

void DeviceCompression::OnStateLoaded() {
  absl::MutexLock lock(&mu_);
  stale_ = true;
}

void DeviceCompression::ForgetTensors(const std::vector<std::string>& names) {
  absl::MutexLock lock(&mu_);
  for (const std::string& name : names) {
    for (std::map<std::string, Residual>* store : {&residuals_, &velocities_}) {
      auto it = store->find(name);
      if (it == store->end()) continue;
      graveyard_.push_back(std::move(it->second));
      store->erase(it);
    }
  }
}

}  // namespace terse
