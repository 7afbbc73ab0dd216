#include "compressors/payload.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/half.h"

namespace terse {
namespace {

constexpr uint16_t kEscape16 = 0xffffu;

absl::Status Invalid(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("bad payload: ", what));
}

int VarintBytes(uint32_t v) {
  int n = 1;
  while (v >= 0x80u) {
    v >>= 7;
    ++n;
  }
  return n;
}

}  // namespace

const char* CompressorName(CompressorId id) {
  switch (id) {
    case CompressorId::kNone:
      return "none";
    case CompressorId::kFp16:
      return "fp16";
    case CompressorId::kBf16:
      return "bf16";
    case CompressorId::kTopK:
      return "topk";
    case CompressorId::kRandomK:
      return "randomk";
    case CompressorId::kDgc:
      return "dgc";
    case CompressorId::kRedSync:
      return "redsync";
    case CompressorId::kThreshold:
      return "threshold";
    case CompressorId::kPowerSgd:
      return "powersgd";
    case CompressorId::kQsgd:
      return "qsgd";
    case CompressorId::kEfSignSgd:
      return "efsignsgd";
  }
  return "unknown";
}

int ValueTypeBytes(ValueType type) {
  return type == ValueType::kFloat32 ? 4 : 2;
}

const char* ValueTypeName(ValueType type) {
  switch (type) {
    case ValueType::kFloat32:
      return "fp32";
    case ValueType::kFloat16:
      return "fp16";
    case ValueType::kBFloat16:
      return "bf16";
  }
  return "unknown";
}

const char* IndexCodingName(IndexCoding coding) {
  switch (coding) {
    case IndexCoding::kU32:
      return "u32";
    case IndexCoding::kDelta16:
      return "delta16";
    case IndexCoding::kVarint:
      return "varint";
    case IndexCoding::kImplicit:
      return "implicit";
  }
  return "unknown";
}

PayloadRegions StartPayload(const PayloadHeader& h, Payload* payload) {
  payload->bytes.resize(kPayloadHeaderBytes + h.ext_bytes + h.body_bytes);
  uint8_t* p = payload->bytes.data();
  StoreLe<uint32_t>(p, kPayloadMagic);
  p[4] = kPayloadVersion;
  p[5] = static_cast<uint8_t>(h.compressor);
  p[6] = static_cast<uint8_t>(h.value_type);
  p[7] = static_cast<uint8_t>(h.index_coding);
  StoreLe<uint64_t>(p + 8, h.dense_count);
  StoreLe<uint64_t>(p + 16, h.entry_count);
  StoreLe<uint32_t>(p + 24, h.ext_bytes);
  StoreLe<uint32_t>(p + 28, 0);
  StoreLe<uint64_t>(p + 32, h.body_bytes);
  PayloadRegions r;
  r.ext = p + kPayloadHeaderBytes;
  r.body = r.ext + h.ext_bytes;
  return r;
}

absl::StatusOr<PayloadView> ParsePayload(absl::Span<const uint8_t> bytes,
                                         CompressorId expected,
                                         uint64_t dense_count) {
  if (bytes.size() < kPayloadHeaderBytes) {
    return Invalid(absl::StrCat(bytes.size(), " bytes, shorter than the ",
                                kPayloadHeaderBytes, "-byte header"));
  }
  const uint8_t* p = bytes.data();
  if (LoadLe<uint32_t>(p) != kPayloadMagic) return Invalid("wrong magic");
  if (p[4] != kPayloadVersion) {
    return Invalid(
        absl::StrCat("version ", p[4], ", expected ", kPayloadVersion));
  }
  if (p[5] >= kNumCompressorIds) return Invalid("unknown compressor id");
  if (p[6] > static_cast<uint8_t>(ValueType::kBFloat16)) {
    return Invalid("unknown value type");
  }
  if (p[7] > static_cast<uint8_t>(IndexCoding::kImplicit)) {
    return Invalid("unknown index coding");
  }
  if (LoadLe<uint32_t>(p + 28) != 0) return Invalid("reserved bits set");
  PayloadView view;
  PayloadHeader& h = view.header;
  h.compressor = static_cast<CompressorId>(p[5]);
  h.value_type = static_cast<ValueType>(p[6]);
  h.index_coding = static_cast<IndexCoding>(p[7]);
  h.dense_count = LoadLe<uint64_t>(p + 8);
  h.entry_count = LoadLe<uint64_t>(p + 16);
  h.ext_bytes = LoadLe<uint32_t>(p + 24);
  h.body_bytes = LoadLe<uint64_t>(p + 32);
  const uint64_t rest = bytes.size() - kPayloadHeaderBytes;
  if (h.ext_bytes > rest || h.body_bytes != rest - h.ext_bytes) {
    return Invalid(absl::StrCat("size ", bytes.size(), " != 40 + ext ",
                                h.ext_bytes, " + body ", h.body_bytes));
  }
  if (h.compressor != expected) {
    return Invalid(absl::StrCat("compressor ", CompressorName(h.compressor),
                                ", expected ", CompressorName(expected)));
  }
  if (h.dense_count != dense_count) {
    return Invalid(absl::StrCat("dense count ", h.dense_count,
                                ", the buffer holds ", dense_count));
  }
  view.ext = bytes.subspan(kPayloadHeaderBytes, h.ext_bytes);
  view.body = bytes.subspan(kPayloadHeaderBytes + h.ext_bytes);
  return view;
}

int64_t IndexSectionBytes(IndexCoding coding, const uint32_t* indices,
                          int64_t k) {
  switch (coding) {
    case IndexCoding::kU32:
      return 4 * k;
    case IndexCoding::kImplicit:
      return 0;
    case IndexCoding::kDelta16: {
      int64_t bytes = 0;
      int64_t prev = -1;
      for (int64_t j = 0; j < k; ++j) {
        bytes += (indices[j] - prev - 1 >= kEscape16) ? 6 : 2;
        prev = indices[j];
      }
      return bytes;
    }
    case IndexCoding::kVarint: {
      int64_t bytes = 0;
      int64_t prev = -1;
      for (int64_t j = 0; j < k; ++j) {
        bytes += VarintBytes(static_cast<uint32_t>(indices[j] - prev - 1));
        prev = indices[j];
      }
      return bytes;
    }
  }
  return 0;
}

int64_t MaxIndexSectionBytes(IndexCoding coding, int64_t k, int64_t d) {
  switch (coding) {
    case IndexCoding::kU32:
      return 4 * k;
    case IndexCoding::kImplicit:
      return 0;
    // Gaps sum to at most d - k, so at most (d - k) / 0xffff escapes.
    case IndexCoding::kDelta16:
      return 2 * k + 4 * std::min<int64_t>(k, (d - k) / kEscape16 + 1);
    case IndexCoding::kVarint:
      return 5 * k;
  }
  return 0;
}

void WriteIndexSection(IndexCoding coding, const uint32_t* indices, int64_t k,
                       uint8_t* out) {
  switch (coding) {
    case IndexCoding::kImplicit:
      return;
    case IndexCoding::kU32:
      std::memcpy(out, indices, 4 * static_cast<size_t>(k));
      return;
    case IndexCoding::kDelta16: {
      int64_t prev = -1;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t gap = indices[j] - prev - 1;
        if (gap >= kEscape16) {
          StoreLe<uint16_t>(out, kEscape16);
          StoreLe<uint16_t>(out + 2, static_cast<uint16_t>(indices[j]));
          StoreLe<uint16_t>(out + 4, static_cast<uint16_t>(indices[j] >> 16));
          out += 6;
        } else {
          StoreLe<uint16_t>(out, static_cast<uint16_t>(gap));
          out += 2;
        }
        prev = indices[j];
      }
      return;
    }
    case IndexCoding::kVarint: {
      int64_t prev = -1;
      for (int64_t j = 0; j < k; ++j) {
        uint32_t gap = static_cast<uint32_t>(indices[j] - prev - 1);
        while (gap >= 0x80u) {
          *out++ = static_cast<uint8_t>(gap | 0x80u);
          gap >>= 7;
        }
        *out++ = static_cast<uint8_t>(gap);
        prev = indices[j];
      }
      return;
    }
  }
}

absl::Status ReadIndexSection(IndexCoding coding,
                              absl::Span<const uint8_t> section, int64_t k,
                              uint64_t d, std::vector<uint32_t>* indices) {
  indices->resize(k);
  uint32_t* out = indices->data();
  const uint8_t* p = section.data();
  const uint8_t* const end = p + section.size();
  switch (coding) {
    case IndexCoding::kImplicit:
      return Invalid("sparse payload without indices");
    case IndexCoding::kU32: {
      if (section.size() != 4 * static_cast<uint64_t>(k)) {
        return Invalid("index section size");
      }
      int64_t prev = -1;
      for (int64_t j = 0; j < k; ++j) {
        const uint32_t idx = LoadLe<uint32_t>(p + 4 * j);
        if (static_cast<int64_t>(idx) <= prev) {
          return Invalid(absl::StrCat("index ", idx, " at entry ", j,
                                      " is not above its predecessor"));
        }
        if (idx >= d) {
          return Invalid(absl::StrCat("index ", idx, " >= dense count ", d));
        }
        out[j] = idx;
        prev = idx;
      }
      return absl::OkStatus();
    }
    case IndexCoding::kDelta16: {
      int64_t prev = -1;
      for (int64_t j = 0; j < k; ++j) {
        if (end - p < 2) return Invalid("index section truncated");
        const uint16_t gap = LoadLe<uint16_t>(p);
        p += 2;
        int64_t idx;
        if (gap == kEscape16) {
          if (end - p < 4) return Invalid("index section truncated");
          idx = LoadLe<uint16_t>(p) |
                (static_cast<int64_t>(LoadLe<uint16_t>(p + 2)) << 16);
          p += 4;
          if (idx <= prev) return Invalid("escaped index not ascending");
        } else {
          idx = prev + 1 + gap;
        }
        if (static_cast<uint64_t>(idx) >= d) {
          return Invalid(absl::StrCat("index ", idx, " >= dense count ", d));
        }
        out[j] = static_cast<uint32_t>(idx);
        prev = idx;
      }
      if (p != end) return Invalid("index section has trailing bytes");
      return absl::OkStatus();
    }
    case IndexCoding::kVarint: {
      int64_t prev = -1;
      for (int64_t j = 0; j < k; ++j) {
        uint64_t gap = 0;
        int shift = 0;
        while (true) {
          if (p == end) return Invalid("index section truncated");
          const uint8_t byte = *p++;
          gap |= static_cast<uint64_t>(byte & 0x7fu) << shift;
          if ((byte & 0x80u) == 0) break;
          shift += 7;
          if (shift > 28) return Invalid("varint longer than 5 bytes");
        }
        const uint64_t idx = static_cast<uint64_t>(prev + 1) + gap;
        if (idx >= d) {
          return Invalid(absl::StrCat("index ", idx, " >= dense count ", d));
        }
        out[j] = static_cast<uint32_t>(idx);
        prev = static_cast<int64_t>(idx);
      }
      if (p != end) return Invalid("index section has trailing bytes");
      return absl::OkStatus();
    }
  }
  return Invalid("unknown index coding");
}

void WriteValues(ValueType type, const float* values, int64_t k, uint8_t* out) {
  const size_t n = static_cast<size_t>(k);
  if (n == 0) return;  // Empty buffers may be null, even for memcpy of 0.
  switch (type) {
    case ValueType::kFloat32:
      std::memcpy(out, values, 4 * n);
      return;
    case ValueType::kFloat16:
    case ValueType::kBFloat16: {
      // Convert through an aligned buffer in chunks (out may be unaligned).
      uint16_t tmp[1024];
      for (size_t j = 0; j < n; j += 1024) {
        const size_t m = std::min<size_t>(1024, n - j);
        if (type == ValueType::kFloat16) {
          FloatToHalf(values + j, tmp, m);
        } else {
          FloatToBFloat16(values + j, tmp, m);
        }
        std::memcpy(out + 2 * j, tmp, 2 * m);
      }
      return;
    }
  }
}

void ReadValues(ValueType type, const uint8_t* in, int64_t k, float* values) {
  const size_t n = static_cast<size_t>(k);
  if (n == 0) return;  // Empty buffers may be null, even for memcpy of 0.
  switch (type) {
    case ValueType::kFloat32:
      std::memcpy(values, in, 4 * n);
      return;
    case ValueType::kFloat16:
    case ValueType::kBFloat16: {
      uint16_t tmp[1024];
      for (size_t j = 0; j < n; j += 1024) {
        const size_t m = std::min<size_t>(1024, n - j);
        std::memcpy(tmp, in + 2 * j, 2 * m);
        if (type == ValueType::kFloat16) {
          HalfToFloat(tmp, values + j, m);
        } else {
          BFloat16ToFloat(tmp, values + j, m);
        }
      }
      return;
    }
  }
}

void EncodeSparsePayload(CompressorId id, ValueType value_type,
                         IndexCoding coding, uint64_t d,
                         const uint32_t* indices, const float* values,
                         int64_t k, Payload* payload) {
  const int64_t index_bytes = IndexSectionBytes(coding, indices, k);
  PayloadHeader h;
  h.compressor = id;
  h.value_type = value_type;
  h.index_coding = coding;
  h.dense_count = d;
  h.entry_count = static_cast<uint64_t>(k);
  h.body_bytes = index_bytes + k * ValueTypeBytes(value_type);
  PayloadRegions r = StartPayload(h, payload);
  WriteIndexSection(coding, indices, k, r.body);
  WriteValues(value_type, values, k, r.body + index_bytes);
}

absl::StatusOr<SparseEntries> DecodeSparsePayload(
    absl::Span<const uint8_t> bytes, CompressorId expected, uint64_t d) {
  PayloadView view;
  {
    auto parsed = ParsePayload(bytes, expected, d);
    if (!parsed.ok()) return parsed.status();
    view = *parsed;
  }
  const PayloadHeader& h = view.header;
  if (h.ext_bytes != 0) return Invalid("sparse payload with parameters");
  if (h.entry_count > d) {
    return Invalid(
        absl::StrCat(h.entry_count, " entries for ", d, " dense elements"));
  }
  const int64_t k = static_cast<int64_t>(h.entry_count);
  const uint64_t value_bytes =
      static_cast<uint64_t>(k) * ValueTypeBytes(h.value_type);
  if (value_bytes > h.body_bytes) return Invalid("value section truncated");
  const size_t index_bytes = h.body_bytes - value_bytes;
  SparseEntries entries;
  absl::Status st =
      ReadIndexSection(h.index_coding, view.body.subspan(0, index_bytes), k, d,
                       &entries.indices);
  if (!st.ok()) return st;
  entries.values.resize(k);
  ReadValues(h.value_type, view.body.data() + index_bytes, k,
             entries.values.data());
  return entries;
}

}  // namespace terse
