// The wire format of compressed buckets.
//
// Every payload is one byte string:
//
//   offset size  field
//   0      4     magic 0x50535254 ("TRSP" little-endian)
//   4      1     version (1)
//   5      1     compressor id (CompressorId)
//   6      1     value type (ValueType)
//   7      1     index coding (IndexCoding)
//   8      8     dense count d (the bucket's float count)
//   16     8     entry count (kept entries / encoded elements)
//   24     4     ext bytes: compressor parameters after the header
//   28     4     reserved, 0
//   32     8     body bytes
//   40     ext   parameters (never summed by an allreduce)
//   40+ext body  the data; for summable compressors the only part summed
//
// All integers are little-endian. A payload's total size must be exactly
// 40 + ext + body. The sparse body (top-k family) is the index section
// followed by the value section:
//   kU32:     entry count * u32 absolute indices, strictly ascending.
//   kDelta16: per entry a u16 gap g = index - previous - 1 (previous = -1
//             before the first); a gap >= 0xffff is written as 0xffff
//             followed by the absolute index as two u16 (low, high).
//   kVarint:  per entry the gap as LEB128 (1 to 5 bytes).
//   values:   entry count * (fp32 | fp16 | bf16).
// Delta coding keeps indices strictly ascending by construction. Bytes per
// kept entry (the 40-byte header aside): u32 4 + value; delta16 2 + value
// plus 4 per gap >= 65535 (at most (d - k) / 65535 of them), so <= 4 with a
// 16-bit value whenever the kept entries are not sparser than ~1 in 30000;
// varint 1-5 (about 1.3 at 1% density).
//
// Payloads from other ranks are untrusted: every parser here checks sizes,
// enum ranges, index ranges and ordering, and returns InvalidArgument (never
// reads or writes out of bounds, never asserts). Thread-safe (no state).
#ifndef TERSE_COMPRESSORS_PAYLOAD_H_
#define TERSE_COMPRESSORS_PAYLOAD_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace terse {

enum class CompressorId : uint8_t {
  kNone = 0,
  kFp16 = 1,
  kBf16 = 2,
  kTopK = 3,
  kRandomK = 4,
  kDgc = 5,
  kRedSync = 6,
  kThreshold = 7,
  kPowerSgd = 8,
  kQsgd = 9,
  kEfSignSgd = 10,
};
constexpr int kNumCompressorIds = 11;

// The TERSE_COMPRESSION word of an id ("none", "topk", ...).
const char* CompressorName(CompressorId id);

enum class ValueType : uint8_t { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };
int ValueTypeBytes(ValueType type);
const char* ValueTypeName(ValueType type);

enum class IndexCoding : uint8_t {
  kU32 = 0,
  kDelta16 = 1,
  kVarint = 2,
  kImplicit = 3,  // No index section (dense, or indices from a shared seed).
};
const char* IndexCodingName(IndexCoding coding);

// A compressed bucket (owned bytes).
struct Payload {
  std::vector<uint8_t> bytes;
};

constexpr uint32_t kPayloadMagic = 0x50535254u;
constexpr uint8_t kPayloadVersion = 1;
constexpr size_t kPayloadHeaderBytes = 40;

struct PayloadHeader {
  CompressorId compressor = CompressorId::kNone;
  ValueType value_type = ValueType::kFloat32;
  IndexCoding index_coding = IndexCoding::kImplicit;
  uint64_t dense_count = 0;
  uint64_t entry_count = 0;
  uint32_t ext_bytes = 0;
  uint64_t body_bytes = 0;
};

// A parsed payload: the header and views of its ext and body (borrowed from
// the byte string it was parsed from).
struct PayloadView {
  PayloadHeader header;
  absl::Span<const uint8_t> ext;
  absl::Span<const uint8_t> body;
};

// Resizes *payload to header + ext + body bytes, writes the header and
// returns pointers to the (uninitialised) ext and body regions.
struct PayloadRegions {
  uint8_t* ext = nullptr;
  uint8_t* body = nullptr;
};
PayloadRegions StartPayload(const PayloadHeader& header, Payload* payload);

// Checks magic, version, enum ranges, reserved bits and that the size is
// exactly 40 + ext + body; then that the compressor is `expected` and the
// dense count is `dense_count`.
absl::StatusOr<PayloadView> ParsePayload(absl::Span<const uint8_t> bytes,
                                         CompressorId expected,
                                         uint64_t dense_count);

// Little-endian scalar access (memcpy; the build targets little-endian).
template <typename T>
inline void StoreLe(uint8_t* p, T v) {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "little-endian");
  __builtin_memcpy(p, &v, sizeof(T));
}
template <typename T>
inline T LoadLe(const uint8_t* p) {
  T v;
  __builtin_memcpy(&v, p, sizeof(T));
  return v;
}

// --- Sparse sections -------------------------------------------------------

// Exact size of the index section for ascending `indices`.
int64_t IndexSectionBytes(IndexCoding coding, const uint32_t* indices,
                          int64_t k);
// Upper bound of IndexSectionBytes over every ascending k-subset of [0, d).
int64_t MaxIndexSectionBytes(IndexCoding coding, int64_t k, int64_t d);

// Writes the index section (exactly IndexSectionBytes bytes) to `out`.
void WriteIndexSection(IndexCoding coding, const uint32_t* indices, int64_t k,
                       uint8_t* out);

// Decodes exactly k indices from `section` (which must be consumed exactly)
// into *indices, checking that they are strictly ascending and < d.
absl::Status ReadIndexSection(IndexCoding coding,
                              absl::Span<const uint8_t> section, int64_t k,
                              uint64_t d, std::vector<uint32_t>* indices);

// Writes k values converted to `type` (round to nearest even).
void WriteValues(ValueType type, const float* values, int64_t k, uint8_t* out);
// Reads k values of `type` from `in` (which holds k * size bytes).
void ReadValues(ValueType type, const uint8_t* in, int64_t k, float* values);

// A whole sparse payload: header, no ext, index section, value section.
void EncodeSparsePayload(CompressorId id, ValueType value_type,
                         IndexCoding coding, uint64_t d,
                         const uint32_t* indices, const float* values,
                         int64_t k, Payload* payload);

struct SparseEntries {
  std::vector<uint32_t> indices;
  std::vector<float> values;
};
// Parses and fully validates a sparse payload of compressor `expected` for a
// bucket of d floats.
absl::StatusOr<SparseEntries> DecodeSparsePayload(
    absl::Span<const uint8_t> bytes, CompressorId expected, uint64_t d);

}  // namespace terse

#endif  // TERSE_COMPRESSORS_PAYLOAD_H_
