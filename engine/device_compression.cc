#include "engine/device_compression.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status.h"
#include "compressors/compressor.h"
#include "compressors/kernels/randomk.h"
#include "compressors/payload.h"
#include "engine/device_powersgd.h"
#include "gravac/policy_factory.h"

namespace terse {
namespace {

// The statistics trailer behind each allgathered payload: the reducer's
// kNumStats doubles (compressed_reducer_internal.h), ||a||^2 first and the
// payload's byte count last, so the message is the CPU path's.
constexpr int kStatsTrailer = 9;
constexpr int kStatNormEf = 0;
constexpr int kStatSentBytes = 8;

// The bucket identity the CPU path seeds DGC's sampling with (FNV-1a of the
// members' names joined by ","; compressed_reducer_internal.h's StableHash
// of KeyOf).
uint64_t BucketStream(const Bucket& bucket) {
  const std::string key = absl::StrJoin(
      bucket.members, ",", [](std::string* out, const BucketMember& m) {
        absl::StrAppend(out, m.name);
      });
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  return h;
}

// `bytes` of device memory in *buffer (reallocated when smaller; callers
// grow buffers only where the stream has no pending work on them).
absl::Status Ensure(const DeviceCompression::Target& t, int64_t bytes,
                    DeviceBuffer* buffer) {
  if (buffer->data() != nullptr && buffer->bytes() >= bytes) {
    return absl::OkStatus();
  }
  TERSE_RETURN_IF_ERROR(t.stream->Synchronize());
  TERSE_ASSIGN_OR_RETURN(*buffer,
                         DeviceBuffer::Allocate(t.runtime, t.ordinal, bytes));
  return absl::OkStatus();
}

}  // namespace

struct DeviceCompression::BucketState {
  Target target;
  DeviceOps* ops = nullptr;
  int id = 0;
  int tensors = 0;
  int64_t count = 0;
  int64_t bytes = 0;
  uint64_t stream_hash = 0;
  std::vector<Segment> segments;
  std::unique_ptr<gravac::Policy> policy;
  std::string key;  // Members' names joined by ',' (checkpoints).
  double cf = 0;    // The choice's CF (warm states are keyed by it).
  CompressorId id_kind = CompressorId::kNone;
  CompressorOptions options;
  // Device buffers.
  DeviceBuffer half, a, indices, values, norm, recv_indices, recv_values,
      sent_negated;
  // Host copies; each is reused only after the stream ran the work that
  // reads or writes it (the step's Synchronize comes first).
  std::vector<uint32_t> host_indices;
  std::vector<float> host_values;
  double host_norm = 0;
  std::vector<uint32_t> up_indices;
  std::vector<float> up_values, up_negated;
  // efsignsgd: the encoded body (device), every rank's (device, and its
  // host copy), each rank's slot 8-byte aligned.
  DeviceBuffer sign_bits, sign_received;
  std::vector<uint8_t> host_bits, up_bytes;
  // powersgd: its state and this rank's own reconstruction (device).
  std::unique_ptr<DevicePowerSgd> powersgd;
  DeviceBuffer local;
};

DeviceCompression::DeviceCompression(const Config& config, int rank, int size,
                                     CompressedReducer* reducer)
    : config_(config), rank_(rank), size_(size), reducer_(reducer) {
  reducer_->set_external_state(this);
}

DeviceCompression::~DeviceCompression() {
  reducer_->set_external_state(nullptr);
}

bool DeviceCompression::Handles(const CompressionChoice& choice) {
  if (choice.is_policy) return false;
  return choice.name == "fp16" || choice.name == "bf16" ||
         choice.name == "topk" || choice.name == "dgc" ||
         choice.name == "powersgd" || choice.name == "randomk" ||
         choice.name == "efsignsgd";
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
  TERSE_ASSIGN_OR_RETURN(s->id_kind, CompressorIdFromName(choice.name));
  s->options = OptionsFromConfig(config_);
  s->cf = choice.cf;
  for (size_t i = 0; i < bucket.members.size(); ++i) {
    absl::StrAppend(&s->key, i > 0 ? "," : "", bucket.members[i].name);
  }
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
                                       const DeviceAllreduce& allreduce) {
  const CompressionChoice choice = ChooseCompressionFor(
      bucket.members.front().name, bucket.compression, config_);
  const bool compressible = bucket.dtype == DataType::kFloat32 &&
                            op == ReduceOp::kSum && Handles(choice) &&
                            ShouldCompress(bucket.bytes, config_);
  return reducer_->RunExternalStep([&]() -> absl::StatusOr<BucketReport> {
    absl::MutexLock lock(&mu_);
    TERSE_RETURN_IF_ERROR(Prepare(target));
    if (!compressible) {
      TERSE_RETURN_IF_ERROR(allreduce(data, bucket.count, bucket.dtype));
      return BucketReport{bucket.id,    static_cast<int>(bucket.members.size()),
                          bucket.bytes, "none",
                          "none",       1,
                          bucket.bytes};
    }
    TERSE_ASSIGN_OR_RETURN(BucketState * s, StateFor(bucket, choice, target));
    float* g = static_cast<float*>(data);
    // a = g + residual, per tensor, on the device.
    for (const Segment& seg : s->segments) {
      TERSE_ASSIGN_OR_RETURN(Residual * r,
                             ResidualFor(seg.name, seg.count, target));
      if (r->valid) {
        TERSE_RETURN_IF_ERROR(s->ops->Add(target.stream, r->buffer.as<float>(),
                                          g + seg.offset, seg.count));
      }
    }
    absl::StatusOr<BucketReport> report =
        s->id_kind == CompressorId::kFp16 || s->id_kind == CompressorId::kBf16
            ? CastStep(*s, g, allreduce)
        : s->id_kind == CompressorId::kPowerSgd
            ? PowerSgdStep(*s, g, step, allreduce)
        : s->id_kind == CompressorId::kRandomK
            ? RandomKStep(*s, g, step, allreduce)
        : s->id_kind == CompressorId::kEfSignSgd
            ? EfSignSgdStep(*s, g, control)
            : SparseStep(*s, g, step, control);
    TERSE_RETURN_IF_ERROR(report.status());
    TERSE_RETURN_IF_ERROR(MarkResidualsWritten(target));
    return report;
  });
}

absl::StatusOr<BucketReport> DeviceCompression::CastStep(
    BucketState& s, float* data, const DeviceAllreduce& allreduce) {
  const gravac::Decision decision = s.policy->Decide();
  const Target& t = s.target;
  const int64_t n = s.count;
  const DataType type = s.id_kind == CompressorId::kFp16 ? DataType::kFloat16
                                                         : DataType::kBFloat16;
  // Not lossy: nothing stays behind (the CPU path erases the residuals).
  for (const Segment& seg : s.segments) residuals_[seg.name].valid = false;
  TERSE_RETURN_IF_ERROR(Ensure(t, n * 2, &s.half));
  uint16_t* half = s.half.as<uint16_t>();
  TERSE_RETURN_IF_ERROR(s.ops->CastToHalf(t.stream, data, half, n, type));
  TERSE_RETURN_IF_ERROR(allreduce(half, n, type));
  // dense = 0 + the decoded sum, as the CPU's AccumulateInto.
  TERSE_RETURN_IF_ERROR(t.stream->Memset(data, 0, n * 4));
  TERSE_RETURN_IF_ERROR(s.ops->AccumulateHalf(t.stream, half, data, n, type));
  s.policy->Observe(decision, gravac::StepStats{});
  return BucketReport{s.id,
                      s.tensors,
                      s.bytes,
                      s.policy->Describe(),
                      CompressorName(s.id_kind),
                      decision.send_cf,
                      n * 2};
}

absl::StatusOr<BucketReport> DeviceCompression::PowerSgdStep(
    BucketState& s, float* a, int64_t step, const DeviceAllreduce& allreduce) {
  const gravac::Decision decision = s.policy->Decide();
  const Target& t = s.target;
  TERSE_RETURN_IF_ERROR(Ensure(t, s.count * 4, &s.local));
  float* local = s.local.as<float>();
  TERSE_ASSIGN_OR_RETURN(
      const int64_t bytes,
      s.powersgd->Step(
          s.ops, t.runtime, t.ordinal, t.stream, a, local, step,
          [&](float* data, int64_t count) {
            return allreduce(data, count, DataType::kFloat32);
          },
          [&]() -> absl::Status {
            // Error feedback: residual = a - this rank's share.
            for (const Segment& seg : s.segments) {
              Residual& r = residuals_[seg.name];
              TERSE_RETURN_IF_ERROR(
                  s.ops->Subtract(t.stream, a + seg.offset, local + seg.offset,
                                  r.buffer.as<float>(), seg.count));
              r.valid = true;
            }
            return absl::OkStatus();
          }));
  s.policy->Observe(decision, gravac::StepStats{});
  return BucketReport{s.id,
                      s.tensors,
                      s.bytes,
                      s.policy->Describe(),
                      CompressorName(s.id_kind),
                      decision.send_cf,
                      bytes};
}

absl::StatusOr<BucketReport> DeviceCompression::RandomKStep(
    BucketState& s, float* a, int64_t step, const DeviceAllreduce& allreduce) {
  const gravac::Decision decision = s.policy->Decide();
  const Target& t = s.target;
  const int64_t n = s.count;
  if (s.options.randomk_value_type != ValueType::kFloat32) {
    return absl::UnimplementedError(
        absl::StrCat("bucket ", s.id, ": randomk with ",
                     ValueTypeName(s.options.randomk_value_type), " values on ",
                     Device::KindName(t.runtime->kind()), " devices"));
  }
  if (n >= (int64_t{1} << 32)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bucket ", s.id, ": randomk of ", n, " elements is too large"));
  }
  const int64_t k = KeepCount(n, decision.send_cf);
  TERSE_RETURN_IF_ERROR(Ensure(t, std::max<int64_t>(k, 1) * 4, &s.indices));
  TERSE_RETURN_IF_ERROR(Ensure(t, std::max<int64_t>(k, 1) * 4, &s.values));
  TERSE_RETURN_IF_ERROR(Ensure(t, n * 4, &s.local));
  // The positions depend on the shared seed only: drawn on the host (as the
  // CUDA select kernels do), uploaded. The collective below waits for the
  // stream before the host vector is reused.
  const uint64_t seed = kernels::MixSeed(
      config_.seed, static_cast<uint64_t>(step), s.stream_hash);
  kernels::RandomKIndices(seed, n, k, &s.host_indices);
  uint32_t* indices = s.indices.as<uint32_t>();
  float* values = s.values.as<float>();
  float* local = s.local.as<float>();
  TERSE_RETURN_IF_ERROR(
      t.stream->Memcpy(indices, s.host_indices.data(), k * 4));
  TERSE_RETURN_IF_ERROR(s.ops->Gather(t.stream, a, indices, k, values));
  // Error feedback: residual = a - (0 + what was sent), per tensor.
  TERSE_RETURN_IF_ERROR(t.stream->Memset(local, 0, n * 4));
  TERSE_RETURN_IF_ERROR(s.ops->ScatterAdd(t.stream, indices, values, k, local));
  for (const Segment& seg : s.segments) {
    Residual& r = residuals_[seg.name];
    TERSE_RETURN_IF_ERROR(s.ops->Subtract(t.stream, a + seg.offset,
                                          local + seg.offset,
                                          r.buffer.as<float>(), seg.count));
    r.valid = true;
  }
  // The values are the summable body of the CPU path's payload.
  TERSE_RETURN_IF_ERROR(allreduce(values, k, DataType::kFloat32));
  TERSE_RETURN_IF_ERROR(t.stream->Memset(a, 0, n * 4));
  TERSE_RETURN_IF_ERROR(s.ops->ScatterAdd(t.stream, indices, values, k, a));
  s.policy->Observe(decision, gravac::StepStats{});
  return BucketReport{s.id,
                      s.tensors,
                      s.bytes,
                      s.policy->Describe(),
                      CompressorName(s.id_kind),
                      decision.send_cf,
                      k * 4};
}

absl::StatusOr<BucketReport> DeviceCompression::EfSignSgdStep(
    BucketState& s, float* a, Communicator* control) {
  const gravac::Decision decision = s.policy->Decide();
  const Target& t = s.target;
  DeviceOps* ops = s.ops;
  const int64_t n = s.count;
  // The CPU compressor's block: sign_block_size, or the whole bucket.
  const int64_t option = std::max<int64_t>(0, s.options.sign_block_size);
  const int64_t block =
      option == 0 || option > n ? std::max<int64_t>(n, 1) : option;
  const int64_t blocks = n == 0 ? 0 : (n + block - 1) / block;
  const int64_t bit_bytes = (n + 7) / 8;
  TERSE_RETURN_IF_ERROR(Ensure(t, std::max<int64_t>(blocks, 1) * 4, &s.values));
  TERSE_RETURN_IF_ERROR(
      Ensure(t, std::max<int64_t>(bit_bytes, 1), &s.sign_bits));
  TERSE_RETURN_IF_ERROR(Ensure(t, n * 4, &s.local));
  TERSE_RETURN_IF_ERROR(Ensure(t, sizeof(double), &s.norm));
  float* scales = s.values.as<float>();
  uint8_t* bits = s.sign_bits.as<uint8_t>();
  TERSE_RETURN_IF_ERROR(ops->SquaredNorm(t.stream, a, n, s.norm.as<double>()));
  TERSE_RETURN_IF_ERROR(ops->SignEncode(t.stream, a, n, block, scales, bits));
  s.host_values.resize(blocks);
  s.host_bits.resize(bit_bytes);
  TERSE_RETURN_IF_ERROR(
      t.stream->Memcpy(s.host_values.data(), scales, blocks * 4));
  TERSE_RETURN_IF_ERROR(t.stream->Memcpy(s.host_bits.data(), bits, bit_bytes));
  TERSE_RETURN_IF_ERROR(
      t.stream->Memcpy(&s.host_norm, s.norm.data(), sizeof(double)));
  TERSE_RETURN_IF_ERROR(t.stream->Synchronize());

  // The CPU compressor's payload: the block size as its parameter, the
  // scales then the bits as its body; the statistics trailer behind it.
  PayloadHeader h;
  h.compressor = CompressorId::kEfSignSgd;
  h.value_type = ValueType::kFloat32;
  h.index_coding = IndexCoding::kImplicit;
  h.dense_count = static_cast<uint64_t>(n);
  h.entry_count = static_cast<uint64_t>(n);
  h.ext_bytes = 8;
  h.body_bytes = static_cast<uint64_t>(4 * blocks + bit_bytes);
  Payload payload;
  PayloadRegions regions = StartPayload(h, &payload);
  StoreLe<uint64_t>(regions.ext, static_cast<uint64_t>(block));
  std::memcpy(regions.body, s.host_values.data(), blocks * 4);
  std::memcpy(regions.body + 4 * blocks, s.host_bits.data(), bit_bytes);
  const int64_t payload_bytes = static_cast<int64_t>(payload.bytes.size());
  double stats[kStatsTrailer] = {};
  stats[kStatNormEf] = s.host_norm;
  stats[kStatSentBytes] = static_cast<double>(payload_bytes);
  std::vector<uint8_t> message = std::move(payload.bytes);
  message.resize(payload_bytes + sizeof(stats));
  std::memcpy(message.data() + payload_bytes, stats, sizeof(stats));
  const int64_t each = static_cast<int64_t>(message.size());
  std::vector<uint8_t> gathered(each * control->size());
  TERSE_RETURN_IF_ERROR(
      control->Allgather(message.data(), gathered.data(), each));

  // Validate every rank's payload on the host (as the CPU decoder does),
  // then upload the bodies, each in an 8-byte aligned slot.
  struct Slot {
    int64_t at = 0, block = 1, blocks = 0;
  };
  std::vector<Slot> slots(control->size());
  s.up_bytes.clear();
  for (int r = 0; r < control->size(); ++r) {
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat("bucket ", s.id, ": the efsignsgd payload from rank ", r,
                       " does not decode: ", why));
    };
    absl::StatusOr<PayloadView> view = ParsePayload(
        absl::MakeConstSpan(gathered.data() + r * each, payload_bytes),
        CompressorId::kEfSignSgd, static_cast<uint64_t>(n));
    if (!view.ok()) return bad(view.status().message());
    if (view->header.ext_bytes != 8 ||
        view->header.entry_count != static_cast<uint64_t>(n)) {
      return bad("bad payload: efsignsgd layout");
    }
    const uint64_t their_block = LoadLe<uint64_t>(view->ext.data());
    if (their_block < 1 || (n > 0 && their_block > static_cast<uint64_t>(n))) {
      return bad("bad payload: efsignsgd block size");
    }
    Slot& slot = slots[r];
    slot.block = static_cast<int64_t>(their_block);
    slot.blocks = n == 0 ? 0 : (n + slot.block - 1) / slot.block;
    if (view->header.body_bytes !=
        static_cast<uint64_t>(4 * slot.blocks + bit_bytes)) {
      return bad("bad payload: efsignsgd body size");
    }
    slot.at = static_cast<int64_t>(s.up_bytes.size());
    s.up_bytes.insert(s.up_bytes.end(), view->body.begin(), view->body.end());
    s.up_bytes.resize((s.up_bytes.size() + 7) / 8 * 8, 0);
  }
  const int64_t total = static_cast<int64_t>(s.up_bytes.size());
  TERSE_RETURN_IF_ERROR(
      Ensure(t, std::max<int64_t>(total, 8), &s.sign_received));
  uint8_t* received = s.sign_received.as<uint8_t>();
  TERSE_RETURN_IF_ERROR(t.stream->Memcpy(received, s.up_bytes.data(), total));
  auto decode_into = [&](int r, float* dense) {
    const Slot& slot = slots[r];
    const uint8_t* body = received + slot.at;
    return ops->SignDecodeAdd(t.stream, reinterpret_cast<const float*>(body),
                              body + 4 * slot.blocks, n, slot.block, dense);
  };
  // Error feedback: residual = a - (0 + this rank's decoded payload).
  float* local = s.local.as<float>();
  TERSE_RETURN_IF_ERROR(t.stream->Memset(local, 0, n * 4));
  TERSE_RETURN_IF_ERROR(decode_into(rank_, local));
  for (const Segment& seg : s.segments) {
    Residual& r = residuals_[seg.name];
    TERSE_RETURN_IF_ERROR(ops->Subtract(t.stream, a + seg.offset,
                                        local + seg.offset,
                                        r.buffer.as<float>(), seg.count));
    r.valid = true;
  }
  // The sum over ranks, decoded in rank order.
  TERSE_RETURN_IF_ERROR(t.stream->Memset(a, 0, n * 4));
  for (int r = 0; r < control->size(); ++r) {
    TERSE_RETURN_IF_ERROR(decode_into(r, a));
  }
  s.policy->Observe(decision, gravac::StepStats{});
  return BucketReport{s.id,
                      s.tensors,
                      s.bytes,
                      s.policy->Describe(),
                      CompressorName(s.id_kind),
                      decision.send_cf,
                      payload_bytes};
}

absl::StatusOr<BucketReport> DeviceCompression::SparseStep(
    BucketState& s, float* a, int64_t step, Communicator* control) {
  const gravac::Decision decision = s.policy->Decide();
  const Target& t = s.target;
  DeviceOps* ops = s.ops;
  const int64_t n = s.count;
  const int64_t k = KeepCount(n, decision.send_cf);
  if (n >= (int64_t{1} << 32)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bucket ", s.id, ": ", CompressorName(s.id_kind), " of ",
                     n, " elements needs 64-bit indices"));
  }
  TERSE_RETURN_IF_ERROR(Ensure(t, n * 4, &s.a));
  TERSE_RETURN_IF_ERROR(Ensure(t, std::max<int64_t>(k, 1) * 4, &s.indices));
  TERSE_RETURN_IF_ERROR(Ensure(t, std::max<int64_t>(k, 1) * 4, &s.values));
  TERSE_RETURN_IF_ERROR(Ensure(t, sizeof(double), &s.norm));
  uint32_t* indices = s.indices.as<uint32_t>();

  // Select and gather on the device; only k entries and ||a||^2 come back.
  TERSE_RETURN_IF_ERROR(ops->SquaredNorm(t.stream, a, n, s.norm.as<double>()));
  int64_t kept = k;
  if (s.id_kind == CompressorId::kDgc) {
    kernels::SampledTopKOptions opt = s.options.dgc;
    opt.num_threads = s.options.num_threads;
    opt.seed = kernels::MixSeed(config_.seed, static_cast<uint64_t>(step),
                                s.stream_hash);
    TERSE_ASSIGN_OR_RETURN(kept,
                           ops->SampledTopK(t.stream, a, n, k, opt, indices));
  } else {
    TERSE_RETURN_IF_ERROR(ops->TopK(t.stream, a, n, k, indices));
  }
  TERSE_RETURN_IF_ERROR(
      ops->Gather(t.stream, a, indices, kept, s.values.as<float>()));
  s.host_indices.resize(kept);
  s.host_values.resize(kept);
  TERSE_RETURN_IF_ERROR(
      t.stream->Memcpy(s.host_indices.data(), indices, kept * 4));
  TERSE_RETURN_IF_ERROR(
      t.stream->Memcpy(s.host_values.data(), s.values.data(), kept * 4));
  TERSE_RETURN_IF_ERROR(
      t.stream->Memcpy(&s.host_norm, s.norm.data(), sizeof(double)));
  TERSE_RETURN_IF_ERROR(t.stream->Synchronize());

  // The CPU path's message: the sparse payload, then the statistics.
  Payload payload;
  EncodeSparsePayload(s.id_kind, s.options.value_type, s.options.index_coding,
                      static_cast<uint64_t>(n), s.host_indices.data(),
                      s.host_values.data(), kept, &payload);
  const int64_t payload_bytes = static_cast<int64_t>(payload.bytes.size());
  double stats[kStatsTrailer] = {};
  stats[kStatNormEf] = s.host_norm;
  stats[kStatSentBytes] = static_cast<double>(payload_bytes);
  std::vector<uint8_t> message = std::move(payload.bytes);
  message.resize(payload_bytes + sizeof(stats));
  std::memcpy(message.data() + payload_bytes, stats, sizeof(stats));
  std::vector<uint8_t> gathered;
  std::vector<int64_t> sizes;
  const bool fixed = s.id_kind == CompressorId::kTopK &&
                     s.options.index_coding == IndexCoding::kU32;
  if (fixed) {
    const int64_t each = static_cast<int64_t>(message.size());
    gathered.resize(each * control->size());
    TERSE_RETURN_IF_ERROR(
        control->Allgather(message.data(), gathered.data(), each));
    sizes.assign(control->size(), each);
  } else {
    TERSE_RETURN_IF_ERROR(control->AllgathervUnknownSizes(
        message.data(), static_cast<int64_t>(message.size()), &gathered,
        &sizes));
  }

  // Validate and decode every rank's payload on the host.
  s.up_indices.clear();
  s.up_values.clear();
  std::vector<int64_t> starts, counts;
  int64_t own_start = 0, own_count = 0;
  size_t at = 0;
  for (int r = 0; r < control->size(); ++r) {
    const int64_t size = sizes[r];
    if (size < static_cast<int64_t>(sizeof(stats))) {
      return absl::InvalidArgumentError(
          absl::StrCat("bucket ", s.id, ": rank ", r, " sent ", size,
                       " bytes, too short for a payload"));
    }
    absl::StatusOr<SparseEntries> entries = DecodeSparsePayload(
        absl::MakeConstSpan(gathered.data() + at, size - sizeof(stats)),
        s.id_kind, static_cast<uint64_t>(n));
    if (!entries.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("bucket ", s.id, ": the ", CompressorName(s.id_kind),
                       " payload from rank ", r,
                       " does not decode: ", entries.status().message()));
    }
    starts.push_back(static_cast<int64_t>(s.up_indices.size()));
    counts.push_back(static_cast<int64_t>(entries->indices.size()));
    if (r == rank_) {
      own_start = starts.back();
      own_count = counts.back();
    }
    s.up_indices.insert(s.up_indices.end(), entries->indices.begin(),
                        entries->indices.end());
    s.up_values.insert(s.up_values.end(), entries->values.begin(),
                       entries->values.end());
    at += static_cast<size_t>(size);
  }
  // What this rank sent, as its peers decode it, negated: residual = a - sent.
  s.up_negated.resize(own_count);
  for (int64_t i = 0; i < own_count; ++i) {
    s.up_negated[i] = -s.up_values[own_start + i];
  }
  const int64_t total = static_cast<int64_t>(s.up_indices.size());
  TERSE_RETURN_IF_ERROR(
      Ensure(t, std::max<int64_t>(total, 1) * 4, &s.recv_indices));
  TERSE_RETURN_IF_ERROR(
      Ensure(t, std::max<int64_t>(total, 1) * 4, &s.recv_values));
  TERSE_RETURN_IF_ERROR(
      Ensure(t, std::max<int64_t>(own_count, 1) * 4, &s.sent_negated));
  uint32_t* recv_indices = s.recv_indices.as<uint32_t>();
  float* recv_values = s.recv_values.as<float>();
  TERSE_RETURN_IF_ERROR(
      t.stream->Memcpy(recv_indices, s.up_indices.data(), total * 4));
  TERSE_RETURN_IF_ERROR(
      t.stream->Memcpy(recv_values, s.up_values.data(), total * 4));
  TERSE_RETURN_IF_ERROR(t.stream->Memcpy(s.sent_negated.data(),
                                         s.up_negated.data(), own_count * 4));

  // Error feedback on the device: residual = a - sent, per tensor.
  float* kept_a = s.a.as<float>();
  TERSE_RETURN_IF_ERROR(t.stream->Memcpy(kept_a, a, n * 4));
  TERSE_RETURN_IF_ERROR(ops->ScatterAdd(t.stream, recv_indices + own_start,
                                        s.sent_negated.as<float>(), own_count,
                                        kept_a));
  for (const Segment& seg : s.segments) {
    Residual& r = residuals_[seg.name];
    TERSE_RETURN_IF_ERROR(
        t.stream->Memcpy(r.buffer.data(), kept_a + seg.offset, seg.count * 4));
    r.valid = true;
  }
  // The sum over ranks, in rank order (every rank adds the same floats in
  // the same order, as the CPU path).
  TERSE_RETURN_IF_ERROR(t.stream->Memset(a, 0, n * 4));
  for (size_t r = 0; r < starts.size(); ++r) {
    TERSE_RETURN_IF_ERROR(ops->ScatterAdd(t.stream, recv_indices + starts[r],
                                          recv_values + starts[r], counts[r],
                                          a));
  }
  s.policy->Observe(decision, gravac::StepStats{});
  return BucketReport{s.id,
                      s.tensors,
                      s.bytes,
                      s.policy->Describe(),
                      CompressorName(s.id_kind),
                      decision.send_cf,
                      payload_bytes};
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
  std::vector<ResidualStore::Entry> out;
  if (stale_) return out;
  for (auto& [stream, event] : written_) {
    TERSE_RETURN_IF_ERROR(event->HostWait());
  }
  for (auto& [name, r] : residuals_) {
    if (!r.valid) continue;
    ResidualStore::Entry e;
    e.name = name;
    e.values.resize(r.count);
    const int64_t bytes = r.count * static_cast<int64_t>(sizeof(float));
    if (r.target.runtime->host_addressable()) {
      std::memcpy(e.values.data(), r.buffer.data(), bytes);
    } else {
      // Another thread may not use the engine stream: a stream of our own.
      TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Stream> copy,
                             r.target.runtime->CreateStream(r.target.ordinal));
      TERSE_RETURN_IF_ERROR(
          copy->Memcpy(e.values.data(), r.buffer.data(), bytes));
      TERSE_RETURN_IF_ERROR(copy->Synchronize());
    }
    out.push_back(std::move(e));
  }
  return out;
}

absl::StatusOr<std::vector<ExternalCompressionState::SavedBucket>>
DeviceCompression::ExportBuckets() {
  absl::MutexLock lock(&mu_);
  std::vector<SavedBucket> out;
  if (stale_) return out;  // The reducer writes what it loaded.
  const gravac::Decision none;
  for (const auto& [id, s] : buckets_) {
    SavedBucket b;
    proto::BucketCompressionState& h = b.header;
    h.set_key(s->key);
    s->policy->SaveState(h.mutable_policy());
    h.set_pending_compressor(none.compressor);
    h.set_pending_send_cf(none.send_cf);
    h.set_pending_quiet(!none.wants_stats);
    if (s->powersgd != nullptr) {
      for (const auto& [key, q] : s->powersgd->warm()) {
        proto::WarmState* w = h.add_warm_states();
        w->set_compressor(CompressorName(s->id_kind));
        w->set_cf(s->cf);
        w->set_level(0);
        w->set_key(key);
        b.warm.push_back(q);
      }
    }
    out.push_back(std::move(b));
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
    auto it = residuals_.find(name);
    if (it == residuals_.end()) continue;
    graveyard_.push_back(std::move(it->second));
    residuals_.erase(it);
  }
}

}  // namespace terse
