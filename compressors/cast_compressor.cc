#include "compressors/cast_compressor.h"

#include <cassert>
#include <vector>

#include "compressors/payload.h"

namespace terse {
namespace {

class CastCompressor : public Compressor {
 public:
  explicit CastCompressor(CompressorId id) : id_(id) {
    value_type_ = id == CompressorId::kNone   ? ValueType::kFloat32
                  : id == CompressorId::kFp16 ? ValueType::kFloat16
                                              : ValueType::kBFloat16;
  }

  CompressorId id() const override { return id_; }
  double cf() const override { return 4.0 / ValueTypeBytes(value_type_); }
  bool lossy() const override { return false; }
  bool summable() const override { return true; }
  bool fixed_size() const override { return true; }

  absl::Status Compress(absl::Span<const float> input,
                        const CompressContext& ctx, Payload* payload) override {
    PayloadHeader h;
    h.compressor = id_;
    h.value_type = value_type_;
    h.index_coding = IndexCoding::kImplicit;
    h.dense_count = input.size();
    h.entry_count = input.size();
    h.body_bytes = input.size() * ValueTypeBytes(value_type_);
    PayloadRegions r = StartPayload(h, payload);
    WriteValues(value_type_, input.data(), input.size(), r.body);
    return absl::OkStatus();
  }

  absl::Status AccumulateInto(absl::Span<const uint8_t> payload,
                              absl::Span<float> dense) const override {
    absl::StatusOr<PayloadView> view = Check(payload, dense.size());
    if (!view.ok()) return view.status();
    const uint8_t* body = view->body.data();
    const size_t n = dense.size();
    if (value_type_ == ValueType::kFloat32) {
      for (size_t i = 0; i < n; ++i) dense[i] += LoadLe<float>(body + 4 * i);
      return absl::OkStatus();
    }
    float tmp[1024];
    for (size_t i = 0; i < n; i += 1024) {
      const size_t m = std::min<size_t>(1024, n - i);
      ReadValues(value_type_, body + 2 * i, m, tmp);
      for (size_t j = 0; j < m; ++j) dense[i + j] += tmp[j];
    }
    return absl::OkStatus();
  }

  absl::StatusOr<SummableRegion> SummableBody(Payload* payload) const override {
    if (payload->bytes.size() < kPayloadHeaderBytes) {
      return absl::InvalidArgumentError("bad payload: too short");
    }
    const uint64_t d = LoadLe<uint64_t>(payload->bytes.data() + 8);
    absl::StatusOr<PayloadView> view = Check(payload->bytes, d);
    if (!view.ok()) return view.status();
    SummableRegion region;
    region.data = payload->bytes.data() + kPayloadHeaderBytes;
    region.count = static_cast<int64_t>(d);
    region.dtype = value_type_ == ValueType::kFloat32   ? DataType::kFloat32
                   : value_type_ == ValueType::kFloat16 ? DataType::kFloat16
                                                        : DataType::kBFloat16;
    return region;
  }

  int64_t MaxPayloadBytes(int64_t d) const override {
    return kPayloadHeaderBytes + d * ValueTypeBytes(value_type_);
  }

 private:
  absl::StatusOr<PayloadView> Check(absl::Span<const uint8_t> payload,
                                    uint64_t d) const {
    absl::StatusOr<PayloadView> view = ParsePayload(payload, id_, d);
    if (!view.ok()) return view.status();
    const PayloadHeader& h = view->header;
    const uint64_t size = ValueTypeBytes(value_type_);
    if (h.value_type != value_type_ || h.ext_bytes != 0 || h.entry_count != d ||
        h.body_bytes % size != 0 || h.body_bytes / size != d) {
      return absl::InvalidArgumentError("bad payload: dense body layout");
    }
    return view;
  }

  CompressorId id_;
  ValueType value_type_;
};

}  // namespace

std::unique_ptr<Compressor> MakeCastCompressor(CompressorId id) {
  assert(id == CompressorId::kNone || id == CompressorId::kFp16 ||
         id == CompressorId::kBf16);
  return std::make_unique<CastCompressor>(id);
}

}  // namespace terse
