// The chunked checkpoint format of the compression state, for states of any
// size (protobuf messages stop at 2 GiB).
//
// Layout (all integers little-endian):
//   [0, 8)    magic "TERSECKP" (a serialised proto::CompressionState never
//             starts with it: 'T' would be field 10 with wire type 4)
//   [8, 12)   uint32 format version (kVersion)
//   [12, 16)  uint32 header length H
//   [16, 20)  uint32 CRC-32 of the header bytes
//   [20, 20+H) proto::CheckpointHeader (engine/checkpoint_header.proto):
//             chunk size, bucket policy states, bytes_sent, and per tensor
//             its name, offset, kind, dtype, count and chunk checksums
//   then every tensor's values as raw float32 bytes, tensors in header
//   order, each split into chunks of chunk_bytes (its last chunk shorter);
//   nothing after the last chunk.
// CRC-32 is zlib's (polynomial 0xEDB88320).
//
// Errors: ReadCheckpoint fails with InvalidArgument (DataLoss for a checksum
// mismatch) naming what is wrong: truncation inside the prefix or header,
// or at which tensor and chunk (with the bytes expected and the size
// found), a checksum mismatch (which tensor/chunk, expected vs found),
// trailing bytes, an unknown version, kind or dtype. It validates the
// length of the whole source against the header before allocating the
// tensors. WriteCheckpoint fails when the sink fails or the header cannot be
// serialised.
//
// Ownership: WriteCheckpoint only reads the spans of `tensors` (the caller
// keeps them alive and unchanged during the call) and streams them to the
// sink chunk by chunk, without copying them. ReadCheckpoint returns owned
// values. Thread-safety: both are reentrant; a sink or source is used by one
// call at a time.
#ifndef TERSE_ENGINE_CHECKPOINT_FORMAT_H_
#define TERSE_ENGINE_CHECKPOINT_FORMAT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/checkpoint_header.pb.h"
#include "engine/checkpoint_io.h"

namespace terse {
namespace checkpoint {

inline constexpr absl::string_view kMagic = "TERSECKP";
inline constexpr uint32_t kVersion = 1;
inline constexpr int64_t kPrefixBytes = 20;
inline constexpr int64_t kDefaultChunkBytes = int64_t{64} << 20;
// chunk_bytes must be a multiple of 4 in [4, kMaxChunkBytes].
inline constexpr int64_t kMaxChunkBytes = int64_t{1} << 30;

// Whether `bytes` starts with kMagic (i.e. is this format, not the older
// serialised proto::CompressionState).
bool HasMagic(absl::string_view bytes);

// A tensor to write; the values are borrowed.
struct TensorToWrite {
  std::string name;
  int64_t tensor_offset = 0;
  proto::CheckpointTensor::Kind kind = proto::CheckpointTensor::RESIDUAL;
  absl::Span<const float> values;
};

// Writes `meta` (its buckets and bytes_sent; its tensors and chunk_bytes are
// ignored and filled here) and the tensors to the sink.
absl::Status WriteCheckpoint(const proto::CheckpointHeader& meta,
                             const std::vector<TensorToWrite>& tensors,
                             ByteSink* sink,
                             int64_t chunk_bytes = kDefaultChunkBytes);

struct Checkpoint {
  proto::CheckpointHeader header;
  std::vector<std::vector<float>> values;  // values[i]: header.tensors(i).
};

// Reads and validates a whole checkpoint (see the header comment).
absl::StatusOr<Checkpoint> ReadCheckpoint(ByteSource* source);

// "residual", "velocity", "accumulator", "warm state".
std::string KindName(proto::CheckpointTensor::Kind kind);

}  // namespace checkpoint
}  // namespace terse

#endif  // TERSE_ENGINE_CHECKPOINT_FORMAT_H_
