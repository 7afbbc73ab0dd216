// DeviceCompression::ExchangeSparseOnDevice: a sparse bucket's messages over
// the device communicator (see device_compression.h). Each rank's message is
// the CPU path's, byte for byte: the payload (compressors/payload.h: the
// 40-byte header, kU32 indices, values in TERSE_VALUE_TYPE) and the
// statistics trailer; in the gathered buffer each lies in a slot padded to
// 8 bytes (zeros), so every rank's index section is 4-byte aligned.
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "compressors/payload.h"
#include "engine/device_compression.h"
#include "engine/device_compression_internal.h"

namespace terse {
using namespace device_compression_internal;  // NOLINT: own internals.

namespace {

int64_t PayloadBytes(int64_t kept, int value_bytes) {
  return static_cast<int64_t>(kPayloadHeaderBytes) + kept * (4 + value_bytes);
}

int64_t SlotBytes(int64_t kept, int value_bytes, int64_t trailer_bytes) {
  return (PayloadBytes(kept, value_bytes) + trailer_bytes + 7) / 8 * 8;
}

// The header every rank writes for `kept` entries (all ranks share the
// options: a peer's header is valid when it is exactly this).
std::vector<uint8_t> HeaderFor(CompressorId kind, ValueType type, uint64_t n,
                               int64_t kept) {
  PayloadHeader h;
  h.compressor = kind;
  h.value_type = type;
  h.index_coding = IndexCoding::kU32;
  h.dense_count = n;
  h.entry_count = static_cast<uint64_t>(kept);
  h.ext_bytes = 0;
  h.body_bytes = static_cast<uint64_t>(kept * (4 + ValueTypeBytes(type)));
  Payload payload;
  StartPayload(h, &payload);
  payload.bytes.resize(kPayloadHeaderBytes);
  return std::move(payload.bytes);
}

}  // namespace

absl::StatusOr<DeviceCompression::DeviceEntries>
DeviceCompression::ExchangeSparseOnDevice(
    BucketState& s, CompressorId kind, const uint32_t* indices_in,
    const float* values_in, int64_t kept, std::vector<double> stats,
    const std::vector<std::pair<int, const double*>>& device_stats,
    Communicator* control, const DeviceAllgatherv& allgatherv, int64_t* bytes,
    std::vector<double>* summed) {
  // The reducer's statistics, then (the portfolio) its gain probes' norms
  // and window sums: the same count on every rank (the same decision).
  if (static_cast<int>(stats.size()) < kStatsTrailer) {
    return absl::InternalError(
        absl::StrCat("bucket ", s.id, ": ", stats.size(), " statistics"));
  }
  const size_t num_stats = stats.size();
  const int64_t trailer_bytes =
      static_cast<int64_t>(num_stats * sizeof(double));
  const Target& t = s.target;
  DeviceOps* ops = s.ops;
  const int64_t n = s.count;
  const int size = control->size();
  const ValueType type = s.options.value_type;
  const int vb = ValueTypeBytes(type);

  // Every rank's entry count: fixed for top-k, exchanged for DGC.
  std::vector<int64_t> counts(size, kept);
  if (kind != CompressorId::kTopK) {
    TERSE_RETURN_IF_ERROR(control->Allgather(&kept, counts.data(), 8));
  }
  std::vector<int64_t> slots(size), at(size);
  int64_t total = 0;
  for (int r = 0; r < size; ++r) {
    if (counts[r] < 0 || counts[r] > n) {
      return absl::InvalidArgumentError(
          absl::StrCat("bucket ", s.id, ": rank ", r, " announced ", counts[r],
                       " entries of a bucket of ", n));
    }
    slots[r] = SlotBytes(counts[r], vb, trailer_bytes);
    at[r] = total;
    total += slots[r];
  }
  const int64_t payload_bytes = PayloadBytes(kept, vb);
  *bytes = payload_bytes;

  // This rank's message, built on the device: header and trailer from the
  // host, indices and values device to device (values cast to 16 bits on
  // the device when the wire carries them so), norms from the device.
  stats[kStatSentBytes] = static_cast<double>(payload_bytes);
  s.host_message_ends = HeaderFor(kind, type, static_cast<uint64_t>(n), kept);
  s.host_message_ends.resize(kPayloadHeaderBytes + trailer_bytes);
  std::memcpy(s.host_message_ends.data() + kPayloadHeaderBytes, stats.data(),
              trailer_bytes);
  TERSE_RETURN_IF_ERROR(Ensure(t, slots[rank_], &s.message));
  TERSE_RETURN_IF_ERROR(Ensure(t, std::max<int64_t>(total, 8), &s.messages));
  TERSE_RETURN_IF_ERROR(Ensure(t, size * 4, &s.index_flags));
  uint8_t* message = s.message.as<uint8_t>();
  uint8_t* indices = message + kPayloadHeaderBytes;
  uint8_t* values = indices + 4 * kept;
  uint8_t* trailer = message + payload_bytes;
  TERSE_RETURN_IF_ERROR(t.stream->Memset(message, 0, slots[rank_]));
  TERSE_RETURN_IF_ERROR(t.stream->Memcpy(message, s.host_message_ends.data(),
                                         kPayloadHeaderBytes));
  TERSE_RETURN_IF_ERROR(t.stream->Memcpy(indices, indices_in, 4 * kept));
  if (type == ValueType::kFloat32) {
    TERSE_RETURN_IF_ERROR(t.stream->Memcpy(values, values_in, 4 * kept));
  } else {
    TERSE_RETURN_IF_ERROR(ops->CastToHalf(
        t.stream, values_in, reinterpret_cast<uint16_t*>(values), kept,
        type == ValueType::kFloat16 ? DataType::kFloat16
                                    : DataType::kBFloat16));
  }
  TERSE_RETURN_IF_ERROR(t.stream->Memcpy(
      trailer, s.host_message_ends.data() + kPayloadHeaderBytes,
      trailer_bytes));
  for (const auto& [slot, value] : device_stats) {
    TERSE_RETURN_IF_ERROR(t.stream->Memcpy(trailer + slot * sizeof(double),
                                           value, sizeof(double)));
  }
  TERSE_RETURN_IF_ERROR(allgatherv(message, s.messages.data(), slots));

  // Validate every rank's message: its index section on the device, its
  // header (and trailer, the statistics) on the host.
  uint8_t* gathered = s.messages.as<uint8_t>();
  uint32_t* flags = s.index_flags.as<uint32_t>();
  const int64_t each = kPayloadHeaderBytes + trailer_bytes + 4;
  s.host_checked.assign(size * each, 0);
  for (int r = 0; r < size; ++r) {
    uint8_t* theirs = gathered + at[r];
    TERSE_RETURN_IF_ERROR(ops->CheckSparseIndices(
        t.stream,
        reinterpret_cast<const uint32_t*>(theirs + kPayloadHeaderBytes),
        counts[r], static_cast<uint64_t>(n), flags + r));
    uint8_t* host = s.host_checked.data() + r * each;
    TERSE_RETURN_IF_ERROR(t.stream->Memcpy(host, theirs, kPayloadHeaderBytes));
    TERSE_RETURN_IF_ERROR(t.stream->Memcpy(host + kPayloadHeaderBytes,
                                           theirs + PayloadBytes(counts[r], vb),
                                           trailer_bytes));
    TERSE_RETURN_IF_ERROR(t.stream->Memcpy(
        host + kPayloadHeaderBytes + trailer_bytes, flags + r, 4));
  }
  TERSE_RETURN_IF_ERROR(t.stream->Synchronize());
  if (summed != nullptr) summed->assign(num_stats, 0.0);
  std::vector<double> theirs(num_stats);
  for (int r = 0; r < size; ++r) {
    const uint8_t* host = s.host_checked.data() + r * each;
    if (summed != nullptr) {  // Rank order: the same sum on every rank.
      std::memcpy(theirs.data(), host + kPayloadHeaderBytes, trailer_bytes);
      for (size_t i = 0; i < num_stats; ++i) (*summed)[i] += theirs[i];
    }
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat("bucket ", s.id, ": the ", CompressorName(kind),
                       " payload from rank ", r, " does not decode: ", why));
    };
    const std::vector<uint8_t> want =
        HeaderFor(kind, type, static_cast<uint64_t>(n), counts[r]);
    if (std::memcmp(host, want.data(), kPayloadHeaderBytes) != 0) {
      return bad("bad payload: header");
    }
    if (LoadLe<uint32_t>(host + kPayloadHeaderBytes + trailer_bytes) != 0) {
      return bad(
          "bad payload: indices not strictly ascending below the "
          "dense count");
    }
  }

  // Decode on the device: rank r's values as floats.
  DeviceEntries out;
  int64_t decoded_floats = 0;
  for (int r = 0; r < size; ++r) decoded_floats += counts[r];
  if (type != ValueType::kFloat32) {
    TERSE_RETURN_IF_ERROR(
        Ensure(t, std::max<int64_t>(decoded_floats, 1) * 4, &s.decoded));
    TERSE_RETURN_IF_ERROR(
        t.stream->Memset(s.decoded.data(), 0, decoded_floats * 4));
  }
  int64_t offset = 0;
  for (int r = 0; r < size; ++r) {
    const uint8_t* theirs = gathered + at[r] + kPayloadHeaderBytes;
    out.indices.push_back(reinterpret_cast<const uint32_t*>(theirs));
    out.counts.push_back(counts[r]);
    const uint8_t* body = theirs + 4 * counts[r];
    if (type == ValueType::kFloat32) {
      out.values.push_back(reinterpret_cast<const float*>(body));
      continue;
    }
    float* into = s.decoded.as<float>() + offset;
    TERSE_RETURN_IF_ERROR(ops->AccumulateHalf(
        t.stream, reinterpret_cast<const uint16_t*>(body), into, counts[r],
        type == ValueType::kFloat16 ? DataType::kFloat16
                                    : DataType::kBFloat16));
    out.values.push_back(into);
    offset += counts[r];
  }
  return out;
}

}  // namespace terse
