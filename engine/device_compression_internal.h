// Internals shared by DeviceCompression's .cc files (device_compression.cc:
// state, residuals, checkpoints; device_compression_steps.cc: one step of
// each compressor). Not part of the engine's API; include only there.
#ifndef TERSE_ENGINE_DEVICE_COMPRESSION_INTERNAL_H_
#define TERSE_ENGINE_DEVICE_COMPRESSION_INTERNAL_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/communicator.h"
#include "common/status.h"
#include "compressors/options.h"
#include "compressors/payload.h"
#include "engine/device_compression.h"
#include "engine/device_powersgd.h"
#include "gravac/policy.h"

namespace terse {
namespace device_compression_internal {

// The statistics trailer behind each allgathered payload: the reducer's
// kNumStats doubles (compressed_reducer_internal.h), ||a||^2 first and the
// payload's byte count last, so the message is the CPU path's.
inline constexpr int kStatsTrailer = 9;
inline constexpr int kStatNormEf = 0;
inline constexpr int kStatSentBytes = 8;

// The bucket identity the CPU path seeds DGC's sampling with (FNV-1a of the
// members' names joined by ","; compressed_reducer_internal.h's StableHash
// of KeyOf).
inline uint64_t BucketStream(const Bucket& bucket) {
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
inline absl::Status Ensure(const DeviceCompression::Target& t, int64_t bytes,
                           DeviceBuffer* buffer) {
  if (buffer->data() != nullptr && buffer->bytes() >= bytes) {
    return absl::OkStatus();
  }
  TERSE_RETURN_IF_ERROR(t.stream->Synchronize());
  TERSE_ASSIGN_OR_RETURN(*buffer,
                         DeviceBuffer::Allocate(t.runtime, t.ordinal, bytes));
  return absl::OkStatus();
}

// Sends the CPU path's message, `payload` then the statistics trailer
// (norm_ef = ||a||^2 and the payload's byte count), and gathers every
// rank's: with Allgather when every rank's is `fixed_size`, else with
// AllgathervUnknownSizes. `sizes` gets each rank's message bytes, the
// messages lie back to back in `gathered`. Collective over `control`.
inline absl::Status GatherWithStats(Payload payload, double norm_ef,
                                    bool fixed_size, Communicator* control,
                                    std::vector<uint8_t>* gathered,
                                    std::vector<int64_t>* sizes) {
  const int64_t payload_bytes = static_cast<int64_t>(payload.bytes.size());
  double stats[kStatsTrailer] = {};
  stats[kStatNormEf] = norm_ef;
  stats[kStatSentBytes] = static_cast<double>(payload_bytes);
  std::vector<uint8_t> message = std::move(payload.bytes);
  message.resize(payload_bytes + sizeof(stats));
  std::memcpy(message.data() + payload_bytes, stats, sizeof(stats));
  const int64_t each = static_cast<int64_t>(message.size());
  if (!fixed_size) {
    return control->AllgathervUnknownSizes(message.data(), each, gathered,
                                           sizes);
  }
  gathered->resize(each * control->size());
  TERSE_RETURN_IF_ERROR(
      control->Allgather(message.data(), gathered->data(), each));
  sizes->assign(control->size(), each);
  return absl::OkStatus();
}

}  // namespace device_compression_internal

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
  // qsgd: per norm bucket seeds (device, and their host copy); its codes
  // and bodies reuse the efsignsgd buffers above.
  DeviceBuffer seeds;
  std::vector<uint64_t> host_seeds;
  // powersgd: its state and this rank's own reconstruction (device).
  std::unique_ptr<DevicePowerSgd> powersgd;
  DeviceBuffer local;
};

}  // namespace terse

#endif  // TERSE_ENGINE_DEVICE_COMPRESSION_INTERNAL_H_
