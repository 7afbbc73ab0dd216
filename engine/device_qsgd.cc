// QSGD on device buckets (see device_compression.h): a vector encoded on
// the device with the CPU compressor's draws (compressors/qsgd_compressor.h),
// every rank's payload exchanged as the CPU path's with the statistics
// trailer (over the device communicator: built, gathered and its codes
// checked on the device, ExchangeDenseOnDevice; staged: built on the host
// from the encoded body, allgathered over the control communicator,
// validated on the host) and decoded on the device; the static step
// (QsgdStep). PolicyStep (device_policy_step.cc) and ProbeGains
// (device_portfolio.cc) use the same pieces for gravac's portfolio.
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "compressors/device/qsgd_bits.h"
#include "compressors/kernels/randomk.h"
#include "compressors/payload.h"
#include "compressors/qsgd_compressor.h"
#include "engine/device_compression.h"
#include "engine/device_compression_internal.h"

namespace terse {
using namespace device_compression_internal;  // NOLINT: own internals.

namespace {

// The CPU decoder's bound on the levels (16 bits an element).
constexpr uint32_t kMaxLevels = 32767;

// Elements per norm bucket, as the CPU compressor clamps the option.
int64_t NormBucket(const CompressorOptions& options) {
  return std::max<int64_t>(
      1, std::min<int64_t>(options.qsgd_bucket_size, UINT32_MAX));
}

// Level of element i's code in a packed QSGD code stream (the CPU
// decoder's bit order).
uint32_t QsgdLevelAt(const uint8_t* codes, uint64_t i, int bits) {
  return qsgd_bits::CodeAt(codes, i, bits) >> 1;
}

}  // namespace

absl::Status DeviceCompression::QsgdEncodeLevel(BucketState& s, const float* x,
                                                int levels, int64_t step,
                                                DeviceBuffer* norms,
                                                DeviceBuffer* codes,
                                                float* level) {
  const Target& t = s.target;
  DeviceOps* ops = s.ops;
  const int64_t n = s.count;
  const int64_t bucket = NormBucket(s.options);
  const int64_t buckets = (n + bucket - 1) / bucket;
  const int64_t words = qsgd_bits::PackedWords(n, qsgd_bits::CodeBits(levels));
  if (s.seeds_step != step) {
    // The per-bucket seeds the CPU compressor draws from for this rank:
    // the step's context only, so one upload serves every encoding of the
    // step (its gain probes and its send). The host copy is rewritten on a
    // later step, after this one waited for its stream.
    const uint64_t base = kernels::MixSeed(
        kernels::MixSeed(config_.seed, static_cast<uint64_t>(step),
                         s.stream_hash),
        static_cast<uint64_t>(rank_));
    s.host_seeds.resize(buckets);
    for (int64_t b = 0; b < buckets; ++b) {
      s.host_seeds[b] = kernels::MixSeed(base, static_cast<uint64_t>(b));
    }
    TERSE_RETURN_IF_ERROR(
        Ensure(t, std::max<int64_t>(buckets, 1) * 8, &s.seeds));
    TERSE_RETURN_IF_ERROR(
        t.stream->Memcpy(s.seeds.data(), s.host_seeds.data(), buckets * 8));
    s.seeds_step = step;
  }
  TERSE_RETURN_IF_ERROR(Ensure(t, std::max<int64_t>(buckets, 1) * 4, norms));
  TERSE_RETURN_IF_ERROR(Ensure(t, std::max<int64_t>(words, 1) * 4, codes));
  TERSE_RETURN_IF_ERROR(t.stream->Memset(codes->data(), 0, words * 4));
  TERSE_RETURN_IF_ERROR(
      ops->QsgdEncode(t.stream, x, n, bucket, levels, s.seeds.as<uint64_t>(),
                      norms->as<float>(), codes->as<uint8_t>()));
  if (level == nullptr) return absl::OkStatus();
  // 0 + the decoding, as the CPU compressor's Decompress.
  TERSE_RETURN_IF_ERROR(t.stream->Memset(level, 0, n * 4));
  return ops->QsgdDecodeAdd(t.stream, norms->as<float>(), codes->as<uint8_t>(),
                            n, bucket, levels, level);
}

absl::Status DeviceCompression::QsgdCopyToHost(BucketState& s, int levels) {
  const Target& t = s.target;
  const int64_t n = s.count;
  const int64_t bucket = NormBucket(s.options);
  const int64_t buckets = (n + bucket - 1) / bucket;
  const int64_t packed = qsgd_bits::PackedBytes(n, qsgd_bits::CodeBits(levels));
  s.host_values.resize(buckets);
  s.host_bits.resize(packed);
  TERSE_RETURN_IF_ERROR(
      t.stream->Memcpy(s.host_values.data(), s.values.data(), buckets * 4));
  return t.stream->Memcpy(s.host_bits.data(), s.sign_bits.data(), packed);
}

absl::StatusOr<std::vector<DeviceCompression::QsgdSlot>>
DeviceCompression::ExchangeQsgd(BucketState& s, int levels,
                                std::vector<double> stats,
                                Communicator* control,
                                const DeviceAllgatherv& allgatherv,
                                int64_t* payload_bytes,
                                std::vector<double>* summed) {
  const Target& t = s.target;
  const int64_t n = s.count;
  const int64_t bucket = NormBucket(s.options);
  const int64_t buckets = (n + bucket - 1) / bucket;
  const int64_t packed = qsgd_bits::PackedBytes(n, qsgd_bits::CodeBits(levels));
  // The CPU compressor's payload: levels and bucket size as parameters,
  // the norms then the codes as the body; the statistics trailer behind.
  const PayloadHeader h =
      DenseCodedHeader(CompressorId::kQsgd, n, 4 * buckets + packed);
  if (allgatherv) {
    // Built on the device from the encoding; every rank's parameters are
    // this rank's (ExchangeDenseOnDevice checks), its codes checked on the
    // device as the CPU decoder checks them (levels s = 2^b - 1, the
    // engine's, fill b-bit codes: the check guards other levels).
    DeviceBodyCheck check;
    check.run = [&](int, const uint8_t* body, uint32_t* bad) {
      return s.ops->CheckQsgdCodes(t.stream, body + 4 * buckets, n, levels,
                                   bad);
    };
    check.failure = "qsgd level > s";
    // The parameters: the levels, then the bucket size (two u32).
    const uint64_t ext =
        static_cast<uint64_t>(levels) | static_cast<uint64_t>(bucket) << 32;
    // The body: the norms, then the codes, device to device.
    auto encode = [&](uint8_t* body) -> absl::Status {
      TERSE_RETURN_IF_ERROR(
          t.stream->Memcpy(body, s.values.data(), 4 * buckets));
      return t.stream->Memcpy(body + 4 * buckets, s.sign_bits.data(), packed);
    };
    TERSE_ASSIGN_OR_RETURN(
        const std::vector<const uint8_t*> bodies,
        ExchangeDenseOnDevice(s, h, ext, encode, check, std::move(stats),
                              control, allgatherv, payload_bytes, summed));
    std::vector<QsgdSlot> slots(bodies.size());
    for (size_t r = 0; r < bodies.size(); ++r) {
      slots[r].body = bodies[r];
      slots[r].bucket = bucket;
      slots[r].buckets = buckets;
      slots[r].levels = levels;
    }
    return slots;
  }
  Payload payload;
  PayloadRegions regions = StartPayload(h, &payload);
  StoreLe<uint32_t>(regions.ext, static_cast<uint32_t>(levels));
  StoreLe<uint32_t>(regions.ext + 4, static_cast<uint32_t>(bucket));
  std::memcpy(regions.body, s.host_values.data(), buckets * 4);
  std::memcpy(regions.body + 4 * buckets, s.host_bits.data(), packed);
  const int64_t own = static_cast<int64_t>(payload.bytes.size());
  *payload_bytes = own;
  const size_t trailer = stats.size();
  std::vector<uint8_t> gathered;
  std::vector<int64_t> sizes;
  TERSE_RETURN_IF_ERROR(GatherWithTrailer(std::move(payload), std::move(stats),
                                          /*fixed_size=*/true, control,
                                          &gathered, &sizes));
  const int64_t each = sizes[0];

  // Validate every rank's payload on the host, as the CPU decoder does
  // (levels above s refused), then upload the bodies in aligned slots.
  std::vector<QsgdSlot> slots(control->size());
  std::vector<int64_t> at(control->size());
  if (summed != nullptr) summed->assign(trailer, 0.0);
  s.up_bytes.clear();
  for (int r = 0; r < control->size(); ++r) {
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat("bucket ", s.id, ": the qsgd payload from rank ", r,
                       " does not decode: ", why));
    };
    const uint8_t* message = gathered.data() + r * each;
    absl::StatusOr<PayloadView> view =
        ParsePayload(absl::MakeConstSpan(message, own), CompressorId::kQsgd,
                     static_cast<uint64_t>(n));
    if (!view.ok()) return bad(view.status().message());
    if (view->header.ext_bytes != 8 ||
        view->header.entry_count != static_cast<uint64_t>(n)) {
      return bad("bad payload: qsgd layout");
    }
    const uint32_t their_levels = LoadLe<uint32_t>(view->ext.data());
    const uint32_t their_bucket = LoadLe<uint32_t>(view->ext.data() + 4);
    if (their_levels < 1 || their_levels > kMaxLevels || their_bucket < 1) {
      return bad("bad payload: qsgd parameters");
    }
    QsgdSlot& slot = slots[r];
    slot.levels = static_cast<int>(their_levels);
    slot.bucket = their_bucket;
    slot.buckets = (n + slot.bucket - 1) / slot.bucket;
    const int their_bits = qsgd_bits::CodeBits(slot.levels);
    if (view->header.body_bytes != static_cast<uint64_t>(4 * slot.buckets) +
                                       qsgd_bits::PackedBytes(n, their_bits)) {
      return bad("bad payload: qsgd body size");
    }
    const uint8_t* their_codes = view->body.data() + 4 * slot.buckets;
    for (int64_t i = 0; i < n; ++i) {
      if (QsgdLevelAt(their_codes, i, their_bits) > their_levels) {
        return bad("bad payload: qsgd level > s");
      }
    }
    if (summed != nullptr) {  // The trailers, summed in rank order.
      std::vector<double> theirs(trailer);
      std::memcpy(theirs.data(), message + own, trailer * sizeof(double));
      for (size_t i = 0; i < trailer; ++i) (*summed)[i] += theirs[i];
    }
    at[r] = static_cast<int64_t>(s.up_bytes.size());
    s.up_bytes.insert(s.up_bytes.end(), view->body.begin(), view->body.end());
    s.up_bytes.resize((s.up_bytes.size() + 7) / 8 * 8, 0);
  }
  const int64_t total = static_cast<int64_t>(s.up_bytes.size());
  TERSE_RETURN_IF_ERROR(
      Ensure(t, std::max<int64_t>(total, 8), &s.sign_received));
  TERSE_RETURN_IF_ERROR(
      t.stream->Memcpy(s.sign_received.data(), s.up_bytes.data(), total));
  for (int r = 0; r < control->size(); ++r) {
    slots[r].body = s.sign_received.as<uint8_t>() + at[r];
  }
  return slots;
}

absl::Status DeviceCompression::QsgdDecodeSlot(BucketState& s,
                                               const QsgdSlot& slot,
                                               float* dense) {
  return s.ops->QsgdDecodeAdd(
      s.target.stream, reinterpret_cast<const float*>(slot.body),
      slot.body + 4 * slot.buckets, s.count, slot.bucket, slot.levels, dense);
}

absl::StatusOr<BucketReport> DeviceCompression::QsgdStep(
    BucketState& s, float* a, int64_t step, Communicator* control,
    const DeviceAllgatherv& allgatherv) {
  const gravac::Decision decision = s.policy->Decide();
  const Target& t = s.target;
  // The CPU compressor's levels; its payload's statistics trailer carries
  // nothing but the byte count (no policy reads it).
  const int levels = QsgdLevels(decision.send_cf, s.options);
  TERSE_RETURN_IF_ERROR(Ensure(t, s.count * 4, &s.local));
  TERSE_RETURN_IF_ERROR(
      QsgdEncodeLevel(s, a, levels, step, &s.values, &s.sign_bits, nullptr));
  if (!allgatherv) {  // Staged: the payload is built on the host.
    TERSE_RETURN_IF_ERROR(QsgdCopyToHost(s, levels));
    TERSE_RETURN_IF_ERROR(t.stream->Synchronize());
  }
  int64_t payload_bytes = 0;
  TERSE_ASSIGN_OR_RETURN(
      const std::vector<QsgdSlot> slots,
      ExchangeQsgd(s, levels, std::vector<double>(kStatsTrailer, 0.0), control,
                   allgatherv, &payload_bytes, nullptr));
  auto decode_into = [&](int r, float* dense) {
    return QsgdDecodeSlot(s, slots[r], dense);
  };
  return FinishGathered(s, a, decision, payload_bytes, control, decode_into);
}

}  // namespace terse
