// One step of a device bucket under an adaptive policy (gravac with one
// sparsifier family or its portfolio, accordion): DeviceCompression::
// PolicyStep, the CompressedReducer's ReduceCompressed
// (engine/compressed_reducer.cc) on device buffers; the portfolio's own
// pieces (window gain, gain probes) are in device_portfolio.cc. See
// device_compression.h.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "compressors/compressor.h"
#include "compressors/kernels/randomk.h"
#include "compressors/payload.h"
#include "compressors/qsgd_compressor.h"
#include "engine/device_compression.h"
#include "engine/device_compression_internal.h"
#include "engine/types.h"

namespace terse {
using namespace device_compression_internal;  // NOLINT: own internals.

namespace {

bool IsDeviceSparsifier(CompressorId id) {
  return id == CompressorId::kTopK || id == CompressorId::kDgc ||
         id == CompressorId::kRedSync || id == CompressorId::kThreshold ||
         id == CompressorId::kRandomK;
}

// Slots of DeviceCompression::BucketState::norms.
enum NormSlot { kEf = 0, kLevel1, kLevel2, kSent, kAccumulated, kNumNorms };

DataType HalfTypeOf(CompressorId kind) {
  return kind == CompressorId::kFp16 ? DataType::kFloat16 : DataType::kBFloat16;
}

}  // namespace

double DeviceCompression::PreviousStepSeconds(BucketState& s,
                                              Clock::time_point now) {
  double seconds = 0;
  if (s.has_last_start) {
    const double period = SecondsBetween(s.last_start, now);
    const double own = own_seconds_total_ - s.own_total_at_last_start;
    const double bytes = own_bytes_total_ - s.bytes_total_at_last_start;
    const double rest = std::max(0.0, period - own);
    const double share = bytes > 0 ? s.bytes / bytes : 1.0;
    seconds = s.last_own + rest * share;
  }
  s.has_last_start = true;
  s.last_start = now;
  s.own_total_at_last_start = own_seconds_total_;
  s.bytes_total_at_last_start = own_bytes_total_;
  return seconds;
}

DevicePowerSgd* DeviceCompression::PowerSgdFor(BucketState& s, double cf,
                                               int64_t level) {
  std::unique_ptr<DevicePowerSgd>& slot = s.powersgd_levels[{cf, level}];
  if (slot == nullptr) {
    CompressorOptions options = s.options;
    if (level > 0) options.powersgd_rank = level;
    slot = std::make_unique<DevicePowerSgd>(options, config_.seed,
                                            absl::StrCat("bucket:", s.key),
                                            s.segments, s.count);
    std::map<std::string, std::vector<float>> warm;
    for (const proto::WarmState& w : s.restored_warm) {
      if (w.compressor() == "powersgd" && w.cf() == cf && w.level() == level) {
        warm[w.key()].assign(w.values().begin(), w.values().end());
      }
    }
    if (!warm.empty()) slot->ImportWarm(std::move(warm));
  }
  return slot.get();
}

absl::Status DeviceCompression::SparseLevel(BucketState& s, CompressorId kind,
                                            const float* x, double cf,
                                            int64_t step, int which,
                                            float* level, Payload* payload) {
  const Target& t = s.target;
  DeviceOps* ops = s.ops;
  const int64_t n = s.count;
  const int64_t k = KeepCount(n, cf);
  const int64_t room = std::max<int64_t>(SelectRoom(kind, k), 1) * 4;
  TERSE_RETURN_IF_ERROR(Ensure(t, room, &s.selected_indices[which]));
  TERSE_RETURN_IF_ERROR(Ensure(t, room, &s.selected_values[which]));
  TERSE_RETURN_IF_ERROR(Ensure(t, room, &s.level_indices));
  TERSE_RETURN_IF_ERROR(Ensure(t, room, &s.level_values));
  uint32_t* indices = s.selected_indices[which].as<uint32_t>();
  float* values = s.selected_values[which].as<float>();
  TERSE_ASSIGN_OR_RETURN(const int64_t kept,
                         Select(s, kind, x, k, step, indices));
  TERSE_RETURN_IF_ERROR(ops->Gather(t.stream, x, indices, kept, values));
  s.selected_count[which] = kept;
  if (payload == nullptr || kind == CompressorId::kRandomK) {
    // The values as the wire rounds them, on the device: the level every
    // rank would decode (compressors/payload.h's WriteValues/ReadValues;
    // randomk's are float32, checked by PolicyStep).
    const ValueType type = kind == CompressorId::kRandomK
                               ? ValueType::kFloat32
                               : s.options.value_type;
    float* decoded = values;
    if (type != ValueType::kFloat32) {
      const DataType half = type == ValueType::kFloat16 ? DataType::kFloat16
                                                        : DataType::kBFloat16;
      TERSE_RETURN_IF_ERROR(Ensure(t, std::max<int64_t>(kept, 1) * 2, &s.half));
      decoded = s.level_values.as<float>();
      TERSE_RETURN_IF_ERROR(
          ops->CastToHalf(t.stream, values, s.half.as<uint16_t>(), kept, half));
      TERSE_RETURN_IF_ERROR(t.stream->Memset(decoded, 0, kept * 4));
      TERSE_RETURN_IF_ERROR(ops->AccumulateHalf(t.stream, s.half.as<uint16_t>(),
                                                decoded, kept, half));
    }
    TERSE_RETURN_IF_ERROR(t.stream->Memset(level, 0, n * 4));
    return ops->ScatterAdd(t.stream, indices, decoded, kept, level);
  }
  s.host_indices.resize(kept);
  s.host_values.resize(kept);
  TERSE_RETURN_IF_ERROR(
      t.stream->Memcpy(s.host_indices.data(), indices, kept * 4));
  TERSE_RETURN_IF_ERROR(
      t.stream->Memcpy(s.host_values.data(), values, kept * 4));
  TERSE_RETURN_IF_ERROR(t.stream->Synchronize());
  // The CPU compressor's payload, and its own decoding of it (the values
  // as the wire carries them): the level every rank would decode.
  EncodeSparsePayload(kind, s.options.value_type, s.options.index_coding,
                      static_cast<uint64_t>(n), s.host_indices.data(),
                      s.host_values.data(), kept, payload);
  TERSE_ASSIGN_OR_RETURN(
      SparseEntries entries,
      DecodeSparsePayload(payload->bytes, kind, static_cast<uint64_t>(n)));
  std::vector<uint32_t>& host_indices = s.level_host_indices[which];
  std::vector<float>& host_values = s.level_host_values[which];
  host_indices = std::move(entries.indices);
  host_values = std::move(entries.values);
  const int64_t count = static_cast<int64_t>(host_indices.size());
  TERSE_RETURN_IF_ERROR(
      Ensure(t, std::max<int64_t>(count, 1) * 4, &s.level_indices));
  TERSE_RETURN_IF_ERROR(
      Ensure(t, std::max<int64_t>(count, 1) * 4, &s.level_values));
  TERSE_RETURN_IF_ERROR(
      t.stream->Memcpy(s.level_indices.data(), host_indices.data(), count * 4));
  TERSE_RETURN_IF_ERROR(
      t.stream->Memcpy(s.level_values.data(), host_values.data(), count * 4));
  TERSE_RETURN_IF_ERROR(t.stream->Memset(level, 0, n * 4));
  return ops->ScatterAdd(t.stream, s.level_indices.as<uint32_t>(),
                         s.level_values.as<float>(), count, level);
}

absl::StatusOr<BucketReport> DeviceCompression::PolicyStep(
    BucketState& s, float* a, int64_t step, Communicator* control,
    const DeviceAllreduce& allreduce, const DeviceAllgatherv& allgatherv) {
  const Target& t = s.target;
  DeviceOps* ops = s.ops;
  const int64_t n = s.count;
  const Clock::time_point start = Clock::now();
  const double previous_seconds = PreviousStepSeconds(s, start);
  const gravac::Decision decision = s.policy->Decide();
  // The previous step waited for its stream: RandomK's host positions are
  // free again.
  s.randomk_used = 0;
  CompressorId kind = CompressorId::kNone;
  if (decision.compressor != "none") {
    TERSE_ASSIGN_OR_RETURN(kind, CompressorIdFromName(decision.compressor));
  }
  const bool probes = decision.probe_cf_min > 0;
  const bool rounds = !decision.dense() && kind == CompressorId::kPowerSgd;
  // fp16 / bf16 (the portfolio's lossless candidates): cast on the device,
  // the 16-bit body summed over ranks, nothing left behind.
  const bool cast = !decision.dense() && (kind == CompressorId::kFp16 ||
                                          kind == CompressorId::kBf16);
  // QSGD (the portfolio's qsgd:BITS): encoded on the device, the CPU
  // path's payloads allgathered with the statistics, decoded on the device.
  const bool quantized = !decision.dense() && kind == CompressorId::kQsgd;
  if ((probes || (!decision.dense() && !rounds && !cast && !quantized)) &&
      !IsDeviceSparsifier(kind)) {
    return absl::UnimplementedError(
        absl::StrCat("bucket ", s.id, ": ", s.policy->Describe(), " sends ",
                     decision.compressor,
                     ", which device buckets do not run under a policy"));
  }
  // Dense with nothing to add or measure: reduced where it is (there is no
  // residual to add), as the reducer's in-place step.
  const bool in_place = decision.dense() && !probes &&
                        decision.gain_probes.empty() && !s.accumulates &&
                        s.residual_empty && config_.momentum_correction <= 0;
  // The window gain's sums of g, then a = g + residual (momentum first).
  TERSE_RETURN_IF_ERROR(BeginPolicyStep(s, decision, a, in_place, step));
  TERSE_RETURN_IF_ERROR(Ensure(t, kNumNorms * sizeof(double), &s.norms));
  TERSE_RETURN_IF_ERROR(
      t.stream->Memset(s.norms.data(), 0, kNumNorms * sizeof(double)));
  double* norms = s.norms.as<double>();
  // ||a||^2 and ||sent||^2 only where the policy reads them (the CPU
  // path's step norms): a decision that wants its statistics and keeps no
  // gain window (whose sums replace them); 0 otherwise, on every rank.
  const bool step_norms = decision.wants_stats && !s.window_active;
  if (!in_place && step_norms) {
    TERSE_RETURN_IF_ERROR(ops->SquaredNorm(t.stream, a, n, norms + kEf));
  }

  // Compress: gravac's two levels (level two from level one's output), or
  // what the decision sends. Over the device communicator the payloads are
  // built on the device (ExchangeSparseOnDevice), not here.
  const bool sparse_send = !decision.dense() && !rounds && !cast && !quantized;
  // RandomK's values are summable (shared-seed positions): summed by the
  // device collective, not gathered.
  const bool summable_send = sparse_send && kind == CompressorId::kRandomK;
  if (kind == CompressorId::kRandomK &&
      s.options.randomk_value_type != ValueType::kFloat32) {
    return absl::UnimplementedError(
        absl::StrCat("bucket ", s.id, ": randomk with ",
                     ValueTypeName(s.options.randomk_value_type), " values on ",
                     Device::KindName(t.runtime->kind()), " devices"));
  }
  const bool on_device = allgatherv && !summable_send &&
                         s.options.index_coding == IndexCoding::kU32;
  Payload p1, p2;
  Payload* p1_out = on_device ? nullptr : &p1;
  Payload* p2_out = on_device ? nullptr : &p2;
  const float* local = a;  // This rank's own decoded contribution.
  Payload* sending = nullptr;
  int sent_level = 0;   // Its selection's slot (on the device).
  int qsgd_levels = 0;  // A quantized send's levels s.
  if (probes || sparse_send) {
    TERSE_RETURN_IF_ERROR(Ensure(t, n * 4, &s.level1));
    TERSE_RETURN_IF_ERROR(Ensure(t, n * 4, &s.level2));
  }
  if (probes) {
    float* level1 = s.level1.as<float>();
    float* level2 = s.level2.as<float>();
    TERSE_RETURN_IF_ERROR(SparseLevel(s, kind, a, decision.probe_cf_min, step,
                                      0, level1, p1_out));
    bool two = decision.probe_cf_candidate > decision.probe_cf_min;
    if (two) {
      TERSE_RETURN_IF_ERROR(SparseLevel(s, kind, level1,
                                        decision.probe_cf_candidate, step, 1,
                                        level2, p2_out));
    } else {
      p2 = p1;
      TERSE_RETURN_IF_ERROR(t.stream->Memcpy(level2, level1, n * 4));
    }
    TERSE_RETURN_IF_ERROR(
        ops->SquaredNorm(t.stream, level1, n, norms + kLevel1));
    TERSE_RETURN_IF_ERROR(
        ops->SquaredNorm(t.stream, level2, n, norms + kLevel2));
    if (!decision.dense()) {
      const bool candidate = decision.send_cf == decision.probe_cf_candidate;
      sending = candidate ? &p2 : &p1;
      local = candidate ? level2 : level1;
      sent_level = candidate && two ? 1 : 0;
    }
  } else if (sparse_send) {
    float* level1 = s.level1.as<float>();
    TERSE_RETURN_IF_ERROR(
        SparseLevel(s, kind, a, decision.send_cf, step, 0, level1, p1_out));
    sending = &p1;
    local = level1;
  } else if (cast) {
    // The 16-bit body, and this rank's own decoding of it (0 + the cast
    // back, as the reducer's Decompress).
    TERSE_RETURN_IF_ERROR(Ensure(t, n * 4, &s.level1));
    TERSE_RETURN_IF_ERROR(Ensure(t, n * 2, &s.cast_body));
    float* level1 = s.level1.as<float>();
    TERSE_RETURN_IF_ERROR(ops->CastToHalf(
        t.stream, a, s.cast_body.as<uint16_t>(), n, HalfTypeOf(kind)));
    TERSE_RETURN_IF_ERROR(t.stream->Memset(level1, 0, n * 4));
    TERSE_RETURN_IF_ERROR(ops->AccumulateHalf(
        t.stream, s.cast_body.as<uint16_t>(), level1, n, HalfTypeOf(kind)));
    local = level1;
    if (step_norms) {
      TERSE_RETURN_IF_ERROR(
          ops->SquaredNorm(t.stream, level1, n, norms + kSent));
    }
  } else if (quantized) {
    // The encoding at the decision's levels (as the reducer's compressor
    // maps its CF), its copy to the host when staged (waited for with the
    // norms, below) and this rank's own decoding of it (the reducer's
    // Decompress).
    TERSE_RETURN_IF_ERROR(Ensure(t, n * 4, &s.level1));
    qsgd_levels = QsgdLevels(decision.send_cf, s.options);
    TERSE_RETURN_IF_ERROR(QsgdEncodeLevel(s, a, qsgd_levels, step, &s.values,
                                          &s.sign_bits, s.level1.as<float>()));
    if (!allgatherv) TERSE_RETURN_IF_ERROR(QsgdCopyToHost(s, qsgd_levels));
    local = s.level1.as<float>();
  }
  // The statistics this step sends: the reducer's, then the gain probes'
  // norms, then (on the step that closes a gain window) the window sums or
  // their sketches.
  std::vector<double> stats(s.window_sketch_at + 2 * s.window_sketch_k, 0.0);
  stats[kStatSeconds] = previous_seconds;
  TERSE_RETURN_IF_ERROR(ProbeGains(s, decision, a, step, &stats));
  std::string sent_name = "none";
  double sent_cf = 1;
  if (!decision.dense()) {
    sent_name = decision.level > 0
                    ? absl::StrCat(decision.compressor, ":", decision.level)
                    : decision.compressor;
    sent_cf = decision.send_cf;
  }
  if (sending != nullptr || quantized) {
    // Error feedback before the sum replaces a: residual = a - sent.
    if (step_norms) {
      TERSE_RETURN_IF_ERROR(
          ops->SquaredNorm(t.stream, local, n, norms + kSent));
    }
    for (const Segment& seg : s.segments) {
      Residual& r = residuals_[seg.name];
      TERSE_RETURN_IF_ERROR(ops->Subtract(t.stream, a + seg.offset,
                                          local + seg.offset,
                                          r.buffer.as<float>(), seg.count));
      r.valid = true;
    }
    // Momentum correction masks what a sparsifier sent, not QSGD's dense
    // levels (the reducer's MomentumCorrection::IsSparsifier).
    if (!quantized) TERSE_RETURN_IF_ERROR(MaskSent(s, local));
  }
  // The window gain: what this rank sends joins the window (PowerSGD's
  // share is known only inside its step, below).
  if (s.window_active && !rounds) {
    TERSE_RETURN_IF_ERROR(AddToWindowGain(s, a, local, &stats));
  }
  // Over the device communicator the norms go into the trailer on the
  // device; otherwise they come to the host now (after the level work).
  std::vector<std::pair<int, const double*>> device_stats;
  if (on_device && sparse_send) {
    device_stats = {{kStatNormEf, norms + kEf}, {kStatNormSent, norms + kSent}};
    if (probes) {
      device_stats.push_back({kStatNormMin, norms + kLevel1});
      device_stats.push_back({kStatNormCandidate, norms + kLevel2});
    }
  } else {
    TERSE_RETURN_IF_ERROR(
        t.stream->Memcpy(s.host_norms, norms, kNumNorms * sizeof(double)));
    TERSE_RETURN_IF_ERROR(t.stream->Synchronize());
    stats[kStatNormEf] = in_place ? 0.0 : s.host_norms[kEf];
    if (probes) {
      stats[kStatNormMin] = s.host_norms[kLevel1];
      stats[kStatNormCandidate] = s.host_norms[kLevel2];
    }
    if (decision.dense()) {
      stats[kStatNormSent] = stats[kStatNormEf];
    } else if (sending != nullptr || cast || quantized) {
      stats[kStatNormSent] = s.host_norms[kSent];
    }
  }

  // Communicate: the statistics ride on the sparse payloads; otherwise
  // they are allgathered after the sum when a decision wants them.
  const bool gather_stats = decision.wants_stats ||
                            (s.has_pending && s.pending.wants_stats) ||
                            s.window_sketch_k > 0;
  int64_t bytes = 0;
  bool stats_gathered = false;
  if (decision.dense()) {
    bytes = n * 4;
    TERSE_RETURN_IF_ERROR(allreduce(a, n, DataType::kFloat32));
  } else if (cast) {
    // The 16-bit bodies summed over ranks; dense = 0 + the decoded sum.
    bytes = n * 2;
    TERSE_RETURN_IF_ERROR(allreduce(s.cast_body.data(), n, HalfTypeOf(kind)));
    TERSE_RETURN_IF_ERROR(t.stream->Memset(a, 0, n * 4));
    TERSE_RETURN_IF_ERROR(ops->AccumulateHalf(
        t.stream, s.cast_body.as<uint16_t>(), a, n, HalfTypeOf(kind)));
  } else if (summable_send) {
    // The sent level's values summed over ranks, scattered into 0.
    const int64_t kept = s.selected_count[sent_level];
    float* values = s.selected_values[sent_level].as<float>();
    bytes = kept * 4;
    TERSE_RETURN_IF_ERROR(allreduce(values, kept, DataType::kFloat32));
    TERSE_RETURN_IF_ERROR(t.stream->Memset(a, 0, n * 4));
    TERSE_RETURN_IF_ERROR(
        ops->ScatterAdd(t.stream, s.selected_indices[sent_level].as<uint32_t>(),
                        values, kept, a));
  } else if (quantized) {
    // Every rank's payload with its statistics as the trailer (the CPU
    // path's message), over the device communicator (staged: the control
    // communicator); the sum decoded in rank order (as the CPU path).
    TERSE_ASSIGN_OR_RETURN(const std::vector<QsgdSlot> slots,
                           ExchangeQsgd(s, qsgd_levels, stats, control,
                                        allgatherv, &bytes, &stats));
    stats_gathered = true;
    TERSE_RETURN_IF_ERROR(t.stream->Memset(a, 0, n * 4));
    for (const QsgdSlot& slot : slots) {
      TERSE_RETURN_IF_ERROR(QsgdDecodeSlot(s, slot, a));
    }
  } else if (rounds) {
    TERSE_RETURN_IF_ERROR(Ensure(t, n * 4, &s.local));
    float* own = s.local.as<float>();
    DevicePowerSgd* powersgd = PowerSgdFor(s, decision.send_cf, decision.level);
    TERSE_ASSIGN_OR_RETURN(
        bytes, powersgd->Step(
                   ops, t.runtime, t.ordinal, t.stream, a, own, step,
                   [&](float* data, int64_t count) {
                     return allreduce(data, count, DataType::kFloat32);
                   },
                   [&]() -> absl::Status {
                     // Error feedback: residual = a - this rank's share.
                     for (const Segment& seg : s.segments) {
                       Residual& r = residuals_[seg.name];
                       TERSE_RETURN_IF_ERROR(ops->Subtract(
                           t.stream, a + seg.offset, own + seg.offset,
                           r.buffer.as<float>(), seg.count));
                       r.valid = true;
                     }
                     if (step_norms) {
                       TERSE_RETURN_IF_ERROR(
                           ops->SquaredNorm(t.stream, own, n, norms + kSent));
                     }
                     // a is still this rank's: the window gain now.
                     return s.window_active ? AddToWindowGain(s, a, own, &stats)
                                            : absl::OkStatus();
                   }));
    TERSE_RETURN_IF_ERROR(
        t.stream->Memcpy(&s.host_norms[kSent], norms + kSent, sizeof(double)));
    TERSE_RETURN_IF_ERROR(t.stream->Synchronize());
    stats[kStatNormSent] = s.host_norms[kSent];
  } else if (on_device) {
    TERSE_ASSIGN_OR_RETURN(
        const DeviceEntries entries,
        ExchangeSparseOnDevice(
            s, kind, s.selected_indices[sent_level].as<uint32_t>(),
            s.selected_values[sent_level].as<float>(),
            s.selected_count[sent_level], stats, device_stats, control,
            allgatherv, &bytes, &stats));
    stats_gathered = true;
    // The sum over ranks, in rank order (as the CPU path).
    TERSE_RETURN_IF_ERROR(t.stream->Memset(a, 0, n * 4));
    for (size_t r = 0; r < entries.counts.size(); ++r) {
      TERSE_RETURN_IF_ERROR(ops->ScatterAdd(t.stream, entries.indices[r],
                                            entries.values[r],
                                            entries.counts[r], a));
    }
  } else {
    bytes = static_cast<int64_t>(sending->bytes.size());
    std::vector<uint8_t> gathered;
    std::vector<int64_t> sizes;
    const bool fixed = kind == CompressorId::kTopK &&
                       s.options.index_coding == IndexCoding::kU32;
    TERSE_RETURN_IF_ERROR(GatherWithTrailer(std::move(*sending), stats, fixed,
                                            control, &gathered, &sizes));
    TERSE_ASSIGN_OR_RETURN(
        const GatheredSparse ranks,
        DecodeGatheredSparse(s, kind, gathered, sizes,
                             static_cast<int>(stats.size()), control, &stats));
    stats_gathered = true;
    // The sum over ranks, in rank order (as the CPU path).
    TERSE_RETURN_IF_ERROR(t.stream->Memset(a, 0, n * 4));
    for (size_t r = 0; r < ranks.starts.size(); ++r) {
      TERSE_RETURN_IF_ERROR(ops->ScatterAdd(
          t.stream, s.recv_indices.as<uint32_t>() + ranks.starts[r],
          s.recv_values.as<float>() + ranks.starts[r], ranks.counts[r], a));
    }
  }
  if (!stats_gathered) stats[kStatSentBytes] = static_cast<double>(bytes);
  if (!stats_gathered && !gather_stats) {
    std::fill(stats.begin(), stats.end(), 0.0);  // The same on every rank.
  } else if (!stats_gathered) {
    const size_t count = stats.size();
    std::vector<double> all(count * control->size());
    TERSE_RETURN_IF_ERROR(
        control->Allgather(stats.data(), all.data(), count * sizeof(double)));
    std::vector<double> total(count, 0.0);
    for (int r = 0; r < control->size(); ++r) {  // Rank order.
      for (size_t i = 0; i < count; ++i) total[i] += all[r * count + i];
    }
    stats = std::move(total);
  }

  // Error feedback: a dense or lossless (cast) step leaves nothing behind.
  if (decision.dense() || cast) {
    for (const Segment& seg : s.segments) residuals_[seg.name].valid = false;
    s.residual_empty = true;
  } else {
    s.residual_empty = false;
  }

  // Accordion: the reduced sum accumulated, its norm for the policy.
  double accumulated_norm2 = 0;
  if (s.accumulates) {
    float* accumulator = s.accumulator.as<float>();
    TERSE_RETURN_IF_ERROR(ops->Add(t.stream, a, accumulator, n));
    TERSE_RETURN_IF_ERROR(
        ops->SquaredNorm(t.stream, accumulator, n, norms + kAccumulated));
    TERSE_RETURN_IF_ERROR(t.stream->Memcpy(
        &s.host_norms[kAccumulated], norms + kAccumulated, sizeof(double)));
    TERSE_RETURN_IF_ERROR(t.stream->Synchronize());
    accumulated_norm2 = s.host_norms[kAccumulated];
  }
  // The averages over ranks, fed one step late with the time; a closed
  // window's norms are those of the ranks' summed sums (the reducer's
  // FoldStatistics), which then leave the statistics.
  for (double& v : stats) v /= size_;
  if (s.window_sketch_k > 0) {
    const size_t at = s.window_sketch_at;
    const int64_t k = s.window_sketch_k;
    double dev = 0, grad = 0;
    for (int64_t i = 0; i < k; ++i) {
      dev += stats[at + i] * stats[at + i];
      grad += stats[at + k + i] * stats[at + k + i];
    }
    stats[kStatWindowDev] = dev;
    stats[kStatWindowGrad] = grad;
    stats.resize(at);
  }
  if (s.has_pending) {
    gravac::StepStats observed;
    const std::vector<double>& p = s.pending_norms;
    observed.norm2_ef = p[kStatNormEf];
    observed.norm2_min = p[kStatNormMin];
    observed.norm2_candidate = p[kStatNormCandidate];
    observed.accumulated_norm2 = p[kStatAccumulated];
    observed.norm2_sent = p[kStatNormSent];
    observed.window_dev_norm2 = p[kStatWindowDev];
    observed.window_grad_norm2 = p[kStatWindowGrad];
    observed.window_steps = p[kStatWindowSteps];
    observed.bytes_sent = p[kStatSentBytes];
    observed.probe_norm2.assign(p.begin() + kStatsTrailer, p.end());
    observed.seconds = stats[kStatSeconds];
    s.policy->Observe(s.pending, observed);
  }
  s.pending = decision;
  s.pending_norms = stats;
  s.pending_norms[kStatAccumulated] = accumulated_norm2;
  s.has_pending = true;
  if (decision.reset_accumulator && s.accumulates) {
    TERSE_RETURN_IF_ERROR(t.stream->Memset(s.accumulator.data(), 0, n * 4));
  }
  // PowerSGD's strength is its rank: report the CF its factors achieved.
  if (decision.level > 0 && !decision.dense() && bytes > 0) {
    sent_cf = static_cast<double>(s.bytes) / static_cast<double>(bytes);
  }
  return BucketReport{s.id,      s.tensors, s.bytes, s.policy->Describe(),
                      sent_name, sent_cf,   bytes};
}

}  // namespace terse

namespace terse {

absl::Status DeviceCompression::SavePolicyState(const BucketState& s,
                                                Stream* copy,
                                                SavedBucket* out) {
  proto::BucketCompressionState& b = out->header;
  b.set_has_pending(s.has_pending);
  b.set_pending_compressor(s.pending.compressor);
  b.set_pending_quiet(!s.pending.wants_stats);
  b.set_pending_send_cf(s.pending.send_cf);
  b.set_pending_level(s.pending.level);
  for (const gravac::Choice& c : s.pending.gain_probes) {
    proto::PendingProbe* p = b.add_pending_probes();
    p->set_compressor(c.compressor);
    p->set_cf(c.cf);
    p->set_level(c.level);
  }
  b.set_pending_probe_cf_min(s.pending.probe_cf_min);
  b.set_pending_probe_cf_candidate(s.pending.probe_cf_candidate);
  for (double v : s.pending_norms) b.add_pending_norms(v);
  for (const auto& [id, powersgd] : s.powersgd_levels) {
    TERSE_ASSIGN_OR_RETURN(auto warm, powersgd->ExportWarm(copy));
    for (auto& [key, q] : warm) {
      proto::WarmState* w = b.add_warm_states();
      w->set_compressor("powersgd");
      w->set_cf(id.first);
      w->set_level(id.second);
      w->set_key(key);
      out->warm.push_back(std::move(q));
    }
  }
  return absl::OkStatus();
}

absl::Status DeviceCompression::RestorePolicyState(
    const proto::BucketCompressionState& r, BucketState* s) {
  s->has_pending = r.has_pending();
  s->pending.compressor = r.pending_compressor();
  s->pending.send_cf = r.pending_send_cf();
  s->pending.level = r.pending_level();
  s->pending.gain_probes.clear();
  for (const proto::PendingProbe& p : r.pending_probes()) {
    s->pending.gain_probes.push_back(
        gravac::Choice{p.compressor(), p.cf(), p.level()});
  }
  s->pending.probe_cf_min = r.pending_probe_cf_min();
  s->pending.probe_cf_candidate = r.pending_probe_cf_candidate();
  s->pending.wants_stats = !r.pending_quiet();
  s->pending_norms.assign(r.pending_norms().begin(), r.pending_norms().end());
  s->pending_norms.resize(
      std::max<size_t>(s->pending_norms.size(), kStatsTrailer), 0.0);
  s->restored_warm.assign(r.warm_states().begin(), r.warm_states().end());
  if (s->accumulates && r.accumulator_size() == s->count) {
    // The copy reads the message later: upload and wait (first use only).
    const Target& t = s->target;
    TERSE_RETURN_IF_ERROR(t.stream->Memcpy(
        s->accumulator.data(), r.accumulator().data(), s->count * 4));
    TERSE_RETURN_IF_ERROR(t.stream->Synchronize());
  }
  return absl::OkStatus();
}

}  // namespace terse
