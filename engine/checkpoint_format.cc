#include "engine/checkpoint_format.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/base/config.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#ifndef ABSL_IS_LITTLE_ENDIAN
#error "the checkpoint format stores float32 little-endian; add byte swapping"
#endif

namespace terse {
namespace checkpoint {
namespace {

uint32_t Crc32(const char* data, size_t n) {
  return static_cast<uint32_t>(
      crc32_z(0L, reinterpret_cast<const Bytef*>(data), n));
}

void PutU32(uint32_t v, std::string* out) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) {
    v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  }
  return v;
}

int64_t NumChunks(int64_t bytes, int64_t chunk_bytes) {
  return (bytes + chunk_bytes - 1) / chunk_bytes;
}

absl::Status CheckChunkBytes(int64_t chunk_bytes) {
  if (chunk_bytes < 4 || chunk_bytes > kMaxChunkBytes || chunk_bytes % 4 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint chunk size ", chunk_bytes,
                     " is not a multiple of 4 in [4, ", kMaxChunkBytes, "]"));
  }
  return absl::OkStatus();
}

std::string Describe(const proto::CheckpointTensor& t) {
  return absl::StrCat("tensor '", t.name(), "' (", KindName(t.kind()),
                      ", offset ", t.tensor_offset(), ", ", t.count(),
                      " floats)");
}

std::string ChunkName(const proto::CheckpointTensor& t, int64_t chunk) {
  return absl::StrCat(Describe(t), " chunk ", chunk, " of ",
                      t.chunk_crc32_size(), " (counting from 0)");
}

// Reads exactly n bytes or says what is missing.
absl::Status ReadExactly(ByteSource* source, char* dst, size_t n,
                         absl::string_view what) {
  absl::StatusOr<size_t> got = source->Read(dst, n);
  if (!got.ok()) return got.status();
  if (*got != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint truncated while reading ", what, ": expected ",
                     n, " bytes, found ", *got));
  }
  return absl::OkStatus();
}

absl::Status ValidateTensor(const proto::CheckpointTensor& t,
                            int64_t chunk_bytes) {
  if (t.kind() != proto::CheckpointTensor::RESIDUAL &&
      t.kind() != proto::CheckpointTensor::VELOCITY &&
      t.kind() != proto::CheckpointTensor::ACCUMULATOR &&
      t.kind() != proto::CheckpointTensor::WARM_STATE) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint ", Describe(t), " has unknown kind ", t.kind()));
  }
  if (t.dtype() != proto::CheckpointTensor::FLOAT32) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", Describe(t),
                                                   " has dtype ", t.dtype(),
                                                   ", expected FLOAT32 (1)"));
  }
  if (t.count() < 0 || t.count() > std::numeric_limits<int64_t>::max() / 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint ", Describe(t), " has an invalid count"));
  }
  const int64_t chunks = NumChunks(t.count() * 4, chunk_bytes);
  if (t.chunk_crc32_size() != chunks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint ", Describe(t), " lists ", t.chunk_crc32_size(),
        " chunk checksums, its size needs ", chunks));
  }
  return absl::OkStatus();
}

}  // namespace

bool HasMagic(absl::string_view bytes) {
  return bytes.substr(0, kMagic.size()) == kMagic;
}

std::string KindName(proto::CheckpointTensor::Kind kind) {
  switch (kind) {
    case proto::CheckpointTensor::RESIDUAL:
      return "residual";
    case proto::CheckpointTensor::VELOCITY:
      return "velocity";
    case proto::CheckpointTensor::ACCUMULATOR:
      return "accumulator";
    case proto::CheckpointTensor::WARM_STATE:
      return "warm state";
    default:
      return absl::StrCat("kind ", static_cast<int>(kind));
  }
}

absl::Status WriteCheckpoint(const proto::CheckpointHeader& meta,
                             const std::vector<TensorToWrite>& tensors,
                             ByteSink* sink, int64_t chunk_bytes) {
  absl::Status status = CheckChunkBytes(chunk_bytes);
  if (!status.ok()) return status;
  proto::CheckpointHeader header = meta;
  header.clear_tensors();
  header.set_chunk_bytes(chunk_bytes);
  for (const TensorToWrite& in : tensors) {
    proto::CheckpointTensor* t = header.add_tensors();
    t->set_name(in.name);
    t->set_tensor_offset(in.tensor_offset);
    t->set_kind(in.kind);
    t->set_dtype(proto::CheckpointTensor::FLOAT32);
    t->set_count(static_cast<int64_t>(in.values.size()));
    const char* bytes = reinterpret_cast<const char*>(in.values.data());
    const int64_t total = static_cast<int64_t>(in.values.size()) * 4;
    for (int64_t at = 0; at < total; at += chunk_bytes) {
      t->add_chunk_crc32(Crc32(
          bytes + at, static_cast<size_t>(std::min(chunk_bytes, total - at))));
    }
  }
  const size_t header_size = header.ByteSizeLong();
  if (header_size > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "checkpoint header of ", header_size,
        " bytes is over protobuf's 2 GiB limit (too many buckets?)"));
  }
  std::string head;
  if (!header.SerializeToString(&head)) {
    return absl::InternalError("checkpoint header does not serialise");
  }
  std::string prefix(kMagic);
  PutU32(kVersion, &prefix);
  PutU32(static_cast<uint32_t>(head.size()), &prefix);
  PutU32(Crc32(head.data(), head.size()), &prefix);
  status = sink->Write(prefix);
  if (status.ok()) status = sink->Write(head);
  if (!status.ok()) return status;
  for (const TensorToWrite& in : tensors) {
    const char* bytes = reinterpret_cast<const char*>(in.values.data());
    const int64_t total = static_cast<int64_t>(in.values.size()) * 4;
    for (int64_t at = 0; at < total; at += chunk_bytes) {
      status = sink->Write(absl::string_view(
          bytes + at, static_cast<size_t>(std::min(chunk_bytes, total - at))));
      if (!status.ok()) return status;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Checkpoint> ReadCheckpoint(ByteSource* source) {
  const int64_t total = source->size();
  char prefix[kPrefixBytes];
  absl::StatusOr<size_t> got = source->Read(prefix, kPrefixBytes);
  if (!got.ok()) return got.status();
  const absl::string_view have(prefix, *got);
  if (!HasMagic(have) && have != kMagic.substr(0, have.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a chunked terse checkpoint: it does not start with '",
                     kMagic, "'"));
  }
  if (*got < static_cast<size_t>(kPrefixBytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint truncated inside its ", kPrefixBytes,
                     "-byte prefix: ", *got, " bytes"));
  }
  const uint32_t version = GetU32(prefix + 8);
  if (version != kVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint format version ", version,
                     " is not supported (this build reads ", kVersion, ")"));
  }
  const int64_t header_size = GetU32(prefix + 12);
  const uint32_t header_crc = GetU32(prefix + 16);
  if (kPrefixBytes + header_size > total) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint truncated inside its header: the header needs bytes [",
        kPrefixBytes, ", ", kPrefixBytes + header_size,
        "), the checkpoint has ", total, " bytes"));
  }
  std::string head(static_cast<size_t>(header_size), '\0');
  absl::Status status = ReadExactly(source, head.data(), head.size(), "header");
  if (!status.ok()) return status;
  const uint32_t found_crc = Crc32(head.data(), head.size());
  if (found_crc != header_crc) {
    return absl::DataLossError(absl::StrFormat(
        "checkpoint header (%d bytes) is corrupt: CRC-32 expected %08x, "
        "found %08x",
        header_size, header_crc, found_crc));
  }
  Checkpoint out;
  if (!out.header.ParseFromString(head)) {
    return absl::InvalidArgumentError(
        "checkpoint header does not parse (its checksum matches: written by "
        "an incompatible build?)");
  }
  const int64_t chunk_bytes = out.header.chunk_bytes();
  status = CheckChunkBytes(chunk_bytes);
  if (!status.ok()) return status;
  // Every chunk must be there before anything is allocated.
  int64_t at = kPrefixBytes + header_size;
  for (const proto::CheckpointTensor& t : out.header.tensors()) {
    status = ValidateTensor(t, chunk_bytes);
    if (!status.ok()) return status;
    const int64_t bytes = t.count() * 4;
    for (int64_t c = 0; c < t.chunk_crc32_size(); ++c) {
      const int64_t len = std::min(chunk_bytes, bytes - c * chunk_bytes);
      if (len > total - at) {
        return absl::InvalidArgumentError(absl::StrCat(
            "checkpoint truncated: ", ChunkName(t, c), " needs bytes [", at,
            ", ", at + len, "), the checkpoint has ", total, " bytes"));
      }
      at += len;
    }
  }
  if (at != total) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint has ", total - at,
                     " bytes after its last chunk (the header describes ", at,
                     " bytes, found ", total, ")"));
  }
  out.values.reserve(out.header.tensors_size());
  at = kPrefixBytes + header_size;
  for (const proto::CheckpointTensor& t : out.header.tensors()) {
    std::vector<float>& values = out.values.emplace_back();
    values.resize(static_cast<size_t>(t.count()));
    char* bytes = reinterpret_cast<char*>(values.data());
    const int64_t total_bytes = t.count() * 4;
    for (int64_t c = 0; c < t.chunk_crc32_size(); ++c) {
      const int64_t off = c * chunk_bytes;
      const int64_t len = std::min(chunk_bytes, total_bytes - off);
      status = ReadExactly(source, bytes + off, static_cast<size_t>(len),
                           ChunkName(t, c));
      if (!status.ok()) return status;
      const uint32_t crc = Crc32(bytes + off, static_cast<size_t>(len));
      if (crc != t.chunk_crc32(c)) {
        return absl::DataLossError(absl::StrFormat(
            "checkpoint %s at bytes [%d, %d) is corrupt: CRC-32 expected "
            "%08x, found %08x",
            ChunkName(t, c), at, at + len, t.chunk_crc32(c), crc));
      }
      at += len;
    }
  }
  return out;
}

}  // namespace checkpoint
}  // namespace terse
