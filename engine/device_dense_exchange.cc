// DeviceCompression::ExchangeDenseOnDevice and EF-signSGD's step over it:
// the payloads of the dense-coded compressors (EF-signSGD, and QSGD's in
// device_qsgd.cc; see device_compression.h) over the device communicator. Each
// rank's message is the CPU path's, byte for byte: the payload
// (compressors/payload.h: the 40-byte header, 8 bytes of parameters, the body)
// and the statistics trailer; in the gathered buffer every rank's lies in a
// slot of the same size, padded to 8 bytes (zeros), so every body starts 8-byte
// aligned.
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "compressors/payload.h"
#include "engine/device_compression.h"
#include "engine/device_compression_internal.h"

namespace terse {
using namespace device_compression_internal;  // NOLINT: own internals.

namespace {

// The header and the 8 parameter bytes of a payload (payload.h's layout),
// without allocating its body on the host.
constexpr int64_t kHeadBytes = kPayloadHeaderBytes + 8;
constexpr int kBodyBytesField = 32;  // payload.h: body bytes at offset 32.

void WriteHead(const PayloadHeader& header, uint64_t ext, uint8_t* out) {
  PayloadHeader bodiless = header;
  bodiless.body_bytes = 0;
  Payload head;
  PayloadRegions regions = StartPayload(bodiless, &head);
  StoreLe<uint64_t>(regions.ext, ext);
  StoreLe<uint64_t>(head.bytes.data() + kBodyBytesField, header.body_bytes);
  std::memcpy(out, head.bytes.data(), kHeadBytes);
}

}  // namespace

absl::StatusOr<std::vector<const uint8_t*>>
DeviceCompression::ExchangeDenseOnDevice(
    BucketState& s, const PayloadHeader& header, uint64_t ext,
    const std::function<absl::Status(uint8_t* body)>& encode,
    const DeviceBodyCheck& check, std::vector<double> stats,
    Communicator* control, const DeviceAllgatherv& allgatherv, int64_t* bytes,
    std::vector<double>* summed) {
  if (header.ext_bytes != 8 || static_cast<int>(stats.size()) < kStatsTrailer) {
    return absl::InternalError(
        absl::StrCat("bucket ", s.id, ": ", header.ext_bytes,
                     " parameter bytes, ", stats.size(), " statistics"));
  }
  const Target& t = s.target;
  const int size = control->size();
  const size_t num_stats = stats.size();
  const int64_t trailer_bytes =
      static_cast<int64_t>(num_stats * sizeof(double));
  const int64_t payload_bytes =
      kHeadBytes + static_cast<int64_t>(header.body_bytes);
  // The slot holds the body rounded up to whole 4-byte words (QSGD's
  // encoder writes words) before the trailer, written after the encode,
  // overwrites their tail: payload + trailer >= head + body + 3.
  const int64_t slot = (payload_bytes + trailer_bytes + 7) / 8 * 8;
  *bytes = payload_bytes;

  // This rank's message, built on the device: header, parameters and
  // trailer from the host, the body encoded in place.
  stats[kStatSentBytes] = static_cast<double>(payload_bytes);
  s.host_message_ends.resize(kHeadBytes + trailer_bytes);
  WriteHead(header, ext, s.host_message_ends.data());
  std::memcpy(s.host_message_ends.data() + kHeadBytes, stats.data(),
              trailer_bytes);
  TERSE_RETURN_IF_ERROR(Ensure(t, slot, &s.message));
  TERSE_RETURN_IF_ERROR(Ensure(t, slot * size, &s.messages));
  TERSE_RETURN_IF_ERROR(Ensure(t, size * 4, &s.index_flags));
  uint8_t* message = s.message.as<uint8_t>();
  TERSE_RETURN_IF_ERROR(t.stream->Memset(message, 0, slot));
  TERSE_RETURN_IF_ERROR(
      t.stream->Memcpy(message, s.host_message_ends.data(), kHeadBytes));
  TERSE_RETURN_IF_ERROR(encode(message + kHeadBytes));
  TERSE_RETURN_IF_ERROR(
      t.stream->Memcpy(message + payload_bytes,
                       s.host_message_ends.data() + kHeadBytes, trailer_bytes));
  TERSE_RETURN_IF_ERROR(
      allgatherv(message, s.messages.data(), std::vector<int64_t>(size, slot)));

  // Validate every rank's message: its header and parameters on the host
  // (they must be this rank's: every rank has the same options), its body
  // on the device where the compressor has a check. Its header, trailer
  // and check flag come to the host.
  uint8_t* gathered = s.messages.as<uint8_t>();
  uint32_t* flags = s.index_flags.as<uint32_t>();
  const int64_t flag_at = kHeadBytes + trailer_bytes;
  const int64_t each = flag_at + 4;
  s.host_checked.assign(size * each, 0);
  std::vector<const uint8_t*> bodies(size);
  for (int r = 0; r < size; ++r) {
    const uint8_t* theirs = gathered + r * slot;
    bodies[r] = theirs + kHeadBytes;
    uint8_t* host = s.host_checked.data() + r * each;
    TERSE_RETURN_IF_ERROR(t.stream->Memcpy(host, theirs, kHeadBytes));
    if (summed != nullptr) {
      TERSE_RETURN_IF_ERROR(t.stream->Memcpy(
          host + kHeadBytes, theirs + payload_bytes, trailer_bytes));
    }
    if (check.run) {
      TERSE_RETURN_IF_ERROR(check.run(r, bodies[r], flags + r));
      TERSE_RETURN_IF_ERROR(t.stream->Memcpy(host + flag_at, flags + r, 4));
    }
  }
  TERSE_RETURN_IF_ERROR(t.stream->Synchronize());
  if (summed != nullptr) summed->assign(num_stats, 0.0);
  std::vector<double> theirs(num_stats);
  for (int r = 0; r < size; ++r) {
    const uint8_t* host = s.host_checked.data() + r * each;
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bucket ", s.id, ": the ", CompressorName(header.compressor),
          " payload from rank ", r, " does not decode: bad payload: ", why));
    };
    if (std::memcmp(host, s.host_message_ends.data(), kHeadBytes) != 0) {
      return bad(
          LoadLe<uint64_t>(host + kBodyBytesField) != header.body_bytes
              ? absl::StrCat("body of ",
                             LoadLe<uint64_t>(host + kBodyBytesField),
                             " bytes, not ", header.body_bytes)
              : std::string("header or parameters differ from this rank's"));
    }
    if (LoadLe<uint32_t>(host + flag_at) != 0) return bad(check.failure);
    if (summed != nullptr) {  // Rank order: the same sum on every rank.
      std::memcpy(theirs.data(), host + kHeadBytes, trailer_bytes);
      for (size_t i = 0; i < num_stats; ++i) (*summed)[i] += theirs[i];
    }
  }
  return bodies;
}

absl::StatusOr<BucketReport> DeviceCompression::EfSignSgdOnDevice(
    BucketState& s, float* a, const gravac::Decision& decision, int64_t block,
    Communicator* control, const DeviceAllgatherv& allgatherv) {
  const Target& t = s.target;
  DeviceOps* ops = s.ops;
  const int64_t n = s.count;
  const int64_t blocks = n == 0 ? 0 : (n + block - 1) / block;
  const int64_t bit_bytes = (n + 7) / 8;
  TERSE_RETURN_IF_ERROR(Ensure(t, n * 4, &s.local));
  int64_t payload_bytes = 0;
  // The scales then the bits, encoded into the message.
  TERSE_ASSIGN_OR_RETURN(
      const std::vector<const uint8_t*> bodies,
      ExchangeDenseOnDevice(
          s,
          DenseCodedHeader(CompressorId::kEfSignSgd, n, 4 * blocks + bit_bytes),
          static_cast<uint64_t>(block),
          [&](uint8_t* body) {
            return ops->SignEncode(t.stream, a, n, block,
                                   reinterpret_cast<float*>(body),
                                   body + 4 * blocks);
          },
          /*check=*/{}, std::vector<double>(kStatsTrailer, 0.0), control,
          allgatherv, &payload_bytes, /*summed=*/nullptr));
  auto decode_into = [&](int r, float* dense) {
    return ops->SignDecodeAdd(t.stream,
                              reinterpret_cast<const float*>(bodies[r]),
                              bodies[r] + 4 * blocks, n, block, dense);
  };
  return FinishGathered(s, a, decision, payload_bytes, control, decode_into);
}

}  // namespace terse
