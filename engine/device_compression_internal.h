// Internals shared by DeviceCompression's .cc files (device_compression.cc:
// state, residuals, checkpoints; device_compression_steps.cc: one step of
// each compressor). Not part of the engine's API; include only there.
#ifndef TERSE_ENGINE_DEVICE_COMPRESSION_INTERNAL_H_
#define TERSE_ENGINE_DEVICE_COMPRESSION_INTERNAL_H_

#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/communicator.h"
#include "common/stable_hash.h"
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
inline constexpr int kStatNormMin = 1;
inline constexpr int kStatNormCandidate = 2;
inline constexpr int kStatSeconds = 3;
// Once folded, the pending norms keep Accordion's accumulated norm in the
// time slot (the reducer's kAccumulatedSlot).
inline constexpr int kStatAccumulated = kStatSeconds;
inline constexpr int kStatNormSent = 4;
inline constexpr int kStatWindowDev = 5;
inline constexpr int kStatWindowGrad = 6;
inline constexpr int kStatWindowSteps = 7;
inline constexpr int kStatSentBytes = 8;
// The window gain's sums travel whole up to this many floats, else as
// their count sketches of this many buckets (the reducer's kWindowSketch,
// compressed_reducer_internal.h).
inline constexpr int64_t kWindowSketch = 1024;

// The bucket identity the CPU path seeds DGC's sampling with (the stable
// hash of the members' names joined by ","; compressed_reducer.cc's
// StableHashOfBytes of KeyOf).
inline uint64_t BucketStream(const Bucket& bucket) {
  const std::string key = absl::StrJoin(
      bucket.members, ",", [](std::string* out, const BucketMember& m) {
        absl::StrAppend(out, m.name);
      });
  return StableHashOfBytes(key);
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

// The header of a dense-coded payload (EF-signSGD's, QSGD's): float32,
// implicit indices, all `n` elements encoded, 8 parameter bytes, `body`
// bytes of body.
inline PayloadHeader DenseCodedHeader(CompressorId id, int64_t n,
                                      int64_t body) {
  PayloadHeader h;
  h.compressor = id;
  h.value_type = ValueType::kFloat32;
  h.index_coding = IndexCoding::kImplicit;
  h.dense_count = static_cast<uint64_t>(n);
  h.entry_count = static_cast<uint64_t>(n);
  h.ext_bytes = 8;
  h.body_bytes = static_cast<uint64_t>(body);
  return h;
}

// Sends the CPU path's message, `payload` then the statistics trailer
// (norm_ef = ||a||^2, 0 where no policy reads it, and the payload's byte
// count), and gathers every
// rank's: with Allgather when every rank's is `fixed_size`, else with
// AllgathervUnknownSizes. `sizes` gets each rank's message bytes, the
// messages lie back to back in `gathered`. Collective over `control`.
// GatherWithStats with the whole statistics vector `stats` as the trailer
// (its kStatSentBytes slot is set to the payload's byte count).
inline absl::Status GatherWithTrailer(Payload payload,
                                      std::vector<double> stats,
                                      bool fixed_size, Communicator* control,
                                      std::vector<uint8_t>* gathered,
                                      std::vector<int64_t>* sizes) {
  const int64_t payload_bytes = static_cast<int64_t>(payload.bytes.size());
  stats[kStatSentBytes] = static_cast<double>(payload_bytes);
  const size_t stats_bytes = stats.size() * sizeof(double);
  std::vector<uint8_t> message = std::move(payload.bytes);
  message.resize(payload_bytes + stats_bytes);
  std::memcpy(message.data() + payload_bytes, stats.data(), stats_bytes);
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

inline absl::Status GatherWithStats(Payload payload, double norm_ef,
                                    bool fixed_size, Communicator* control,
                                    std::vector<uint8_t>* gathered,
                                    std::vector<int64_t>* sizes) {
  std::vector<double> stats(kStatsTrailer, 0.0);
  stats[kStatNormEf] = norm_ef;
  return GatherWithTrailer(std::move(payload), std::move(stats), fixed_size,
                           control, gathered, sizes);
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
  DeviceBuffer half, a, indices, values, recv_indices, recv_values,
      sent_negated;
  // Host copies; each is reused only after the stream ran the work that
  // reads or writes it (the step's Synchronize comes first).
  std::vector<uint32_t> host_indices;
  std::vector<float> host_values;
  std::vector<uint32_t> up_indices;
  std::vector<float> up_values, up_negated;
  // efsignsgd: the encoded body (device), every rank's (device, and its
  // host copy), each rank's slot 8-byte aligned.
  DeviceBuffer sign_bits, sign_received;
  std::vector<uint8_t> host_bits, up_bytes;
  // qsgd: per norm bucket seeds (device, and their host copy) of step
  // seeds_step; its norms, codes and bodies reuse `values` and the
  // efsignsgd buffers above (also under a policy: the sent encoding).
  DeviceBuffer seeds;
  std::vector<uint64_t> host_seeds;
  int64_t seeds_step = -1;
  // powersgd: its state and this rank's own reconstruction (device).
  std::unique_ptr<DevicePowerSgd> powersgd;
  DeviceBuffer local;

  // Adaptive policies (gravac single-family, accordion; PolicyStep in
  // device_policy_step.cc), mirroring CompressedReducer::BucketState.
  bool adaptive = false;     // gravac or accordion: statistics exchanged.
  bool accumulates = false;  // accordion: the reduced sum accumulated.
  // This bucket's residuals were dropped (a dense step) and none stored
  // since: a dense step without probes is reduced in place.
  bool residual_empty = false;
  bool has_pending = false;
  gravac::Decision pending;
  std::vector<double> pending_norms;
  // Probe levels and the accordion accumulator (device); the decoded
  // entries of each level (host, read by the stream's uploads).
  DeviceBuffer level1, level2, accumulator, level_indices, level_values;
  std::vector<uint32_t> level_host_indices[2];
  std::vector<float> level_host_values[2];
  // Each level's selection (device): indices, values as selected, count.
  DeviceBuffer selected_indices[2], selected_values[2];
  int64_t selected_count[2] = {0, 0};
  // RandomK's positions (host, read by the stream's uploads): one vector
  // for each selection of a step (its levels, its gain probes), so none is
  // rewritten before the stream copied it. randomk_used of them are taken;
  // PolicyStep starts each step at the first (the previous step waited for
  // its stream).
  std::deque<std::vector<uint32_t>> randomk_positions;
  size_t randomk_used = 0;
  // Messages gathered on the device (ExchangeSparseOnDevice): this rank's,
  // every rank's (8-byte aligned slots), the index checks' flags, the
  // decoded 16-bit values, and the host copies of the headers, trailers
  // and flags.
  DeviceBuffer message, messages, index_flags, decoded;
  std::vector<uint8_t> host_message_ends, host_checked;
  // Norms reduced on the device: ||a||^2, ||level1||^2, ||level2||^2,
  // ||sent||^2, ||accumulator||^2 (device), and their host copy.
  DeviceBuffer norms;
  double host_norms[5] = {};
  // PowerSGD instances by (cf, level) (accordion switches ranks).
  std::map<std::pair<double, int64_t>, std::unique_ptr<DevicePowerSgd>>
      powersgd_levels;
  // Restored warm states, for PowerSGD instances made later.
  std::vector<proto::WarmState> restored_warm;

  // gravac's portfolio (device_portfolio.cc), mirroring the reducer's
  // BucketState: the gain probes' PowerSGD instances (their own warm
  // starts, never checkpointed), their scratch and norms (device; the
  // norms' host copy), and the window gain's state: window_grad = the sum
  // of g over the window, window_dev = e_0 (then e_T - e_0 when a window
  // closes: `deviation`), or under momentum correction the sum of g - sent
  // with g kept in raw_g (window_keeps_g); the closing step's sums or
  // their sketches (device, and their host copy).
  std::map<std::pair<double, int64_t>, std::unique_ptr<DevicePowerSgd>>
      powersgd_probes;
  DeviceBuffer probe_a, probe_out, probe_half, probe_norms;
  // A qsgd gain probe's norms and codes (the sent encoding's stay in
  // `values` and `sign_bits` until their copy to the host).
  DeviceBuffer probe_scales, probe_codes;
  // The 16-bit body an fp16 / bf16 decision sends (SparseLevel's rounding
  // of the probes' values uses `half`).
  DeviceBuffer cast_body;
  std::vector<double> host_probe_norms;
  bool window_active = false;
  bool window_keeps_g = false;
  DeviceBuffer window_grad, window_dev, raw_g, deviation, sketch;
  std::vector<float> host_window;
  std::vector<double> host_sketch;
  int64_t window_steps = 0;
  size_t window_sketch_at = device_compression_internal::kStatsTrailer;
  int64_t window_sketch_k = 0;
  uint64_t window_sketch_seed = 0;
  gravac::Choice window_choice;
  // The previous step's time, as CompressedReducer::PreviousStepSeconds.
  bool has_last_start = false;
  std::chrono::steady_clock::time_point last_start;
  double last_own = 0;
  double own_total_at_last_start = 0;
  double bytes_total_at_last_start = 0;
};

}  // namespace terse

#endif  // TERSE_ENGINE_DEVICE_COMPRESSION_INTERNAL_H_
