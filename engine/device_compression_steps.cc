// One step of each compressor DeviceCompression runs on the device (see
// device_compression.h) but QSGD (device_qsgd.cc); state, residuals and
// checkpoints are in device_compression.cc.
#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "compressors/compressor.h"
#include "compressors/kernels/randomk.h"
#include "compressors/payload.h"
#include "engine/device_compression.h"
#include "engine/device_compression_internal.h"

namespace terse {
using namespace device_compression_internal;  // NOLINT: own internals.

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
  TERSE_RETURN_IF_ERROR(MaskSent(s, local));
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

absl::StatusOr<BucketReport> DeviceCompression::FinishGathered(
    BucketState& s, float* a, const gravac::Decision& decision,
    int64_t payload_bytes, Communicator* control,
    const std::function<absl::Status(int rank, float* dense)>& decode_into) {
  const Target& t = s.target;
  DeviceOps* ops = s.ops;
  const int64_t n = s.count;
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

absl::StatusOr<BucketReport> DeviceCompression::EfSignSgdStep(
    BucketState& s, float* a, Communicator* control,
    const DeviceAllgatherv& allgatherv) {
  const gravac::Decision decision = s.policy->Decide();
  const Target& t = s.target;
  DeviceOps* ops = s.ops;
  const int64_t n = s.count;
  // The CPU compressor's block: sign_block_size, or the whole bucket.
  const int64_t option = std::max<int64_t>(0, s.options.sign_block_size);
  const int64_t block =
      option == 0 || option > n ? std::max<int64_t>(n, 1) : option;
  if (allgatherv) {
    return EfSignSgdOnDevice(s, a, decision, block, control, allgatherv);
  }
  // Staged: the payload is built, gathered and validated on the host.
  const int64_t blocks = n == 0 ? 0 : (n + block - 1) / block;
  const int64_t bit_bytes = (n + 7) / 8;
  TERSE_RETURN_IF_ERROR(Ensure(t, std::max<int64_t>(blocks, 1) * 4, &s.values));
  TERSE_RETURN_IF_ERROR(
      Ensure(t, std::max<int64_t>(bit_bytes, 1), &s.sign_bits));
  TERSE_RETURN_IF_ERROR(Ensure(t, n * 4, &s.local));
  float* scales = s.values.as<float>();
  uint8_t* bits = s.sign_bits.as<uint8_t>();
  TERSE_RETURN_IF_ERROR(ops->SignEncode(t.stream, a, n, block, scales, bits));
  s.host_values.resize(blocks);
  s.host_bits.resize(bit_bytes);
  TERSE_RETURN_IF_ERROR(
      t.stream->Memcpy(s.host_values.data(), scales, blocks * 4));
  TERSE_RETURN_IF_ERROR(t.stream->Memcpy(s.host_bits.data(), bits, bit_bytes));
  TERSE_RETURN_IF_ERROR(t.stream->Synchronize());

  // The CPU compressor's payload: the block size as its parameter, the
  // scales then the bits as its body; the statistics trailer behind it.
  const PayloadHeader h =
      DenseCodedHeader(CompressorId::kEfSignSgd, n, 4 * blocks + bit_bytes);
  Payload payload;
  PayloadRegions regions = StartPayload(h, &payload);
  StoreLe<uint64_t>(regions.ext, static_cast<uint64_t>(block));
  std::memcpy(regions.body, s.host_values.data(), blocks * 4);
  std::memcpy(regions.body + 4 * blocks, s.host_bits.data(), bit_bytes);
  const int64_t payload_bytes = static_cast<int64_t>(payload.bytes.size());
  std::vector<uint8_t> gathered;
  std::vector<int64_t> sizes;
  TERSE_RETURN_IF_ERROR(GatherWithStats(std::move(payload), /*norm_ef=*/0.0,
                                        /*fixed_size=*/true, control, &gathered,
                                        &sizes));
  const int64_t each = sizes[0];

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
  return FinishGathered(s, a, decision, payload_bytes, control, decode_into);
}

absl::StatusOr<BucketReport> DeviceCompression::SparseStep(
    BucketState& s, float* a, int64_t step, Communicator* control,
    const DeviceAllgatherv& allgatherv) {
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
  const int64_t room = std::max<int64_t>(SelectRoom(s.id_kind, k), 1) * 4;
  TERSE_RETURN_IF_ERROR(Ensure(t, n * 4, &s.a));
  TERSE_RETURN_IF_ERROR(Ensure(t, room, &s.indices));
  TERSE_RETURN_IF_ERROR(Ensure(t, room, &s.values));
  uint32_t* indices = s.indices.as<uint32_t>();

  // Select and gather on the device; only the k entries come back (a
  // static policy reads no norms: the trailer's are 0, as the CPU path's).
  TERSE_ASSIGN_OR_RETURN(const int64_t kept,
                         Select(s, s.id_kind, a, k, step, indices));
  TERSE_RETURN_IF_ERROR(
      ops->Gather(t.stream, a, indices, kept, s.values.as<float>()));
  if (allgatherv && s.options.index_coding == IndexCoding::kU32) {
    // The messages over the device communicator; nothing crosses to the
    // host but the headers, the trailers and the index checks.
    int64_t payload_bytes = 0;
    TERSE_ASSIGN_OR_RETURN(
        const DeviceEntries entries,
        ExchangeSparseOnDevice(s, s.id_kind, indices, s.values.as<float>(),
                               kept, std::vector<double>(kStatsTrailer, 0.0),
                               /*device_stats=*/{}, control, allgatherv,
                               &payload_bytes, /*summed=*/nullptr));
    // Error feedback: residual = a - (0 + what this rank sent, decoded).
    TERSE_RETURN_IF_ERROR(Ensure(t, n * 4, &s.local));
    float* local = s.local.as<float>();
    TERSE_RETURN_IF_ERROR(t.stream->Memset(local, 0, n * 4));
    TERSE_RETURN_IF_ERROR(ops->ScatterAdd(t.stream, entries.indices[rank_],
                                          entries.values[rank_],
                                          entries.counts[rank_], local));
    for (const Segment& seg : s.segments) {
      Residual& r = residuals_[seg.name];
      TERSE_RETURN_IF_ERROR(ops->Subtract(t.stream, a + seg.offset,
                                          local + seg.offset,
                                          r.buffer.as<float>(), seg.count));
      r.valid = true;
    }
    TERSE_RETURN_IF_ERROR(MaskSent(s, local));
    // The sum over ranks, in rank order.
    TERSE_RETURN_IF_ERROR(t.stream->Memset(a, 0, n * 4));
    for (size_t r = 0; r < entries.counts.size(); ++r) {
      TERSE_RETURN_IF_ERROR(ops->ScatterAdd(t.stream, entries.indices[r],
                                            entries.values[r],
                                            entries.counts[r], a));
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
  s.host_indices.resize(kept);
  s.host_values.resize(kept);
  TERSE_RETURN_IF_ERROR(
      t.stream->Memcpy(s.host_indices.data(), indices, kept * 4));
  TERSE_RETURN_IF_ERROR(
      t.stream->Memcpy(s.host_values.data(), s.values.data(), kept * 4));
  TERSE_RETURN_IF_ERROR(t.stream->Synchronize());

  // The CPU path's message: the sparse payload, then the statistics.
  Payload payload;
  EncodeSparsePayload(s.id_kind, s.options.value_type, s.options.index_coding,
                      static_cast<uint64_t>(n), s.host_indices.data(),
                      s.host_values.data(), kept, &payload);
  const int64_t payload_bytes = static_cast<int64_t>(payload.bytes.size());
  std::vector<uint8_t> gathered;
  std::vector<int64_t> sizes;
  const bool fixed = s.id_kind == CompressorId::kTopK &&
                     s.options.index_coding == IndexCoding::kU32;
  TERSE_RETURN_IF_ERROR(GatherWithStats(std::move(payload), /*norm_ef=*/0.0,
                                        fixed, control, &gathered, &sizes));

  TERSE_ASSIGN_OR_RETURN(
      const GatheredSparse ranks,
      DecodeGatheredSparse(s, s.id_kind, gathered, sizes, kStatsTrailer,
                           control, /*stats=*/nullptr));
  const std::vector<int64_t>& starts = ranks.starts;
  const std::vector<int64_t>& counts = ranks.counts;
  const int64_t own_start = starts[rank_];
  const int64_t own_count = counts[rank_];
  // What this rank sent, as its peers decode it, negated: residual = a - sent.
  s.up_negated.resize(own_count);
  for (int64_t i = 0; i < own_count; ++i) {
    s.up_negated[i] = -s.up_values[own_start + i];
  }
  TERSE_RETURN_IF_ERROR(
      Ensure(t, std::max<int64_t>(own_count, 1) * 4, &s.sent_negated));
  uint32_t* recv_indices = s.recv_indices.as<uint32_t>();
  float* recv_values = s.recv_values.as<float>();
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
  if (config_.momentum_correction > 0) {
    // What this rank sent, dense: its entries cleared from the residuals
    // and velocities.
    TERSE_RETURN_IF_ERROR(Ensure(t, n * 4, &s.local));
    float* local = s.local.as<float>();
    TERSE_RETURN_IF_ERROR(t.stream->Memset(local, 0, n * 4));
    TERSE_RETURN_IF_ERROR(ops->ScatterAdd(t.stream, recv_indices + own_start,
                                          recv_values + own_start, own_count,
                                          local));
    TERSE_RETURN_IF_ERROR(MaskSent(s, local));
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

}  // namespace terse

namespace terse {
using namespace device_compression_internal;  // NOLINT: own internals.

absl::StatusOr<DeviceCompression::GatheredSparse>
DeviceCompression::DecodeGatheredSparse(BucketState& s, CompressorId kind,
                                        const std::vector<uint8_t>& gathered,
                                        const std::vector<int64_t>& sizes,
                                        int trailer, Communicator* control,
                                        std::vector<double>* stats) {
  const Target& t = s.target;
  const int64_t n = s.count;
  const int64_t trailer_bytes = trailer * static_cast<int64_t>(sizeof(double));
  GatheredSparse out;
  s.up_indices.clear();
  s.up_values.clear();
  if (stats != nullptr) stats->assign(trailer, 0.0);
  std::vector<double> theirs(trailer);
  size_t at = 0;
  for (int r = 0; r < control->size(); ++r) {
    const int64_t size = sizes[r];
    if (size < trailer_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("bucket ", s.id, ": rank ", r, " sent ", size,
                       " bytes, too short for a payload"));
    }
    absl::StatusOr<SparseEntries> entries = DecodeSparsePayload(
        absl::MakeConstSpan(gathered.data() + at, size - trailer_bytes), kind,
        static_cast<uint64_t>(n));
    if (!entries.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("bucket ", s.id, ": the ", CompressorName(kind),
                       " payload from rank ", r,
                       " does not decode: ", entries.status().message()));
    }
    out.starts.push_back(static_cast<int64_t>(s.up_indices.size()));
    out.counts.push_back(static_cast<int64_t>(entries->indices.size()));
    s.up_indices.insert(s.up_indices.end(), entries->indices.begin(),
                        entries->indices.end());
    s.up_values.insert(s.up_values.end(), entries->values.begin(),
                       entries->values.end());
    if (stats != nullptr) {
      std::memcpy(theirs.data(), gathered.data() + at + size - trailer_bytes,
                  trailer_bytes);
      for (int i = 0; i < trailer; ++i) (*stats)[i] += theirs[i];
    }
    at += static_cast<size_t>(size);
  }
  const int64_t total = static_cast<int64_t>(s.up_indices.size());
  TERSE_RETURN_IF_ERROR(
      Ensure(t, std::max<int64_t>(total, 1) * 4, &s.recv_indices));
  TERSE_RETURN_IF_ERROR(
      Ensure(t, std::max<int64_t>(total, 1) * 4, &s.recv_values));
  TERSE_RETURN_IF_ERROR(
      t.stream->Memcpy(s.recv_indices.data(), s.up_indices.data(), total * 4));
  TERSE_RETURN_IF_ERROR(
      t.stream->Memcpy(s.recv_values.data(), s.up_values.data(), total * 4));
  return out;
}

}  // namespace terse

namespace terse {
using namespace device_compression_internal;  // NOLINT: own internals.

int64_t DeviceCompression::SelectRoom(CompressorId kind, int64_t k) {
  return kind == CompressorId::kRedSync ? std::max<int64_t>(k, 2 * k - 1) : k;
}

absl::StatusOr<int64_t> DeviceCompression::Select(BucketState& s,
                                                  CompressorId kind,
                                                  const float* x, int64_t k,
                                                  int64_t step,
                                                  uint32_t* indices) {
  const Target& t = s.target;
  DeviceOps* ops = s.ops;
  const int64_t n = s.count;
  switch (kind) {
    case CompressorId::kDgc: {
      kernels::SampledTopKOptions opt = s.options.dgc;
      opt.num_threads = s.options.num_threads;
      opt.seed = kernels::MixSeed(config_.seed, static_cast<uint64_t>(step),
                                  s.stream_hash);
      return ops->SampledTopK(t.stream, x, n, k, opt, indices);
    }
    case CompressorId::kRedSync: {
      kernels::ThresholdSearchOptions opt = s.options.redsync;
      opt.num_threads = s.options.num_threads;
      return ops->ThresholdSearch(t.stream, x, n, k, opt, indices);
    }
    case CompressorId::kRandomK: {
      // The shared-seed positions, drawn on the host (RandomKStep's) into
      // a vector of this selection's own, which the stream copies later.
      if (s.randomk_used == s.randomk_positions.size()) {
        s.randomk_positions.emplace_back();
      }
      std::vector<uint32_t>& host = s.randomk_positions[s.randomk_used++];
      kernels::RandomKIndices(
          kernels::MixSeed(config_.seed, static_cast<uint64_t>(step),
                           s.stream_hash),
          n, k, &host);
      TERSE_RETURN_IF_ERROR(t.stream->Memcpy(indices, host.data(), k * 4));
      return k;
    }
    case CompressorId::kThreshold: {
      TERSE_ASSIGN_OR_RETURN(
          const int64_t qualify,
          ops->SelectAtLeast(
              t.stream, x, n,
              kernels::ThresholdKey(static_cast<float>(s.options.threshold)), k,
              indices));
      if (qualify <= k) return qualify;
      break;  // Too many pass: the k largest, as the CPU sparsifier.
    }
    default:
      break;
  }
  TERSE_RETURN_IF_ERROR(ops->TopK(t.stream, x, n, k, indices));
  return k;
}

}  // namespace terse
