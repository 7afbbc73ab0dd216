#include "compressors/efsignsgd_compressor.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "compressors/kernels/fixed_order_sum.h"

namespace terse {
namespace {

constexpr uint32_t kExtBytes = 8;

class EfSignSgdCompressor : public Compressor {
 public:
  EfSignSgdCompressor(double cf, const CompressorOptions& options)
      : cf_(cf), block_(std::max<int64_t>(0, options.sign_block_size)) {}

  CompressorId id() const override { return CompressorId::kEfSignSgd; }
  double cf() const override { return cf_; }
  bool lossy() const override { return true; }
  bool summable() const override { return false; }
  bool fixed_size() const override { return true; }

  absl::Status Compress(absl::Span<const float> input,
                        const CompressContext& ctx, Payload* payload) override {
    const uint64_t d = input.size();
    const uint64_t block = BlockFor(d);
    const uint64_t blocks = d == 0 ? 0 : (d + block - 1) / block;
    PayloadHeader h;
    h.compressor = id();
    h.value_type = ValueType::kFloat32;
    h.index_coding = IndexCoding::kImplicit;
    h.dense_count = d;
    h.entry_count = d;
    h.ext_bytes = kExtBytes;
    h.body_bytes = 4 * blocks + (d + 7) / 8;
    PayloadRegions r = StartPayload(h, payload);
    StoreLe<uint64_t>(r.ext, block);
    uint8_t* bits = r.body + 4 * blocks;
    std::fill(bits, bits + (d + 7) / 8, 0);
    for (uint64_t i = 0; i < d; ++i) {
      if (std::signbit(input[i])) bits[i >> 3] |= uint8_t{1} << (i & 7);
    }
    for (uint64_t b = 0; b < blocks; ++b) {
      const uint64_t begin = b * block;
      const uint64_t end = std::min(d, begin + block);
      // The order the CUDA kernel reproduces (kernels/fixed_order_sum.h).
      const double sum = kernels::FixedOrderSum(
          static_cast<int64_t>(end - begin), [&](int64_t i) {
            return std::fabs(static_cast<double>(input[begin + i]));
          });
      StoreLe<float>(
          r.body + 4 * b,
          static_cast<float>(sum / static_cast<double>(end - begin)));
    }
    return absl::OkStatus();
  }

  absl::Status AccumulateInto(absl::Span<const uint8_t> payload,
                              absl::Span<float> dense) const override {
    absl::StatusOr<PayloadView> view =
        ParsePayload(payload, id(), dense.size());
    if (!view.ok()) return view.status();
    const PayloadHeader& h = view->header;
    const uint64_t d = dense.size();
    if (h.ext_bytes != kExtBytes || h.entry_count != d) {
      return absl::InvalidArgumentError("bad payload: efsignsgd layout");
    }
    const uint64_t block = LoadLe<uint64_t>(view->ext.data());
    if (block < 1 || (d > 0 && block > d)) {
      return absl::InvalidArgumentError("bad payload: efsignsgd block size");
    }
    const uint64_t blocks = d == 0 ? 0 : (d + block - 1) / block;
    if (h.body_bytes != 4 * blocks + (d + 7) / 8) {
      return absl::InvalidArgumentError("bad payload: efsignsgd body size");
    }
    const uint8_t* bits = view->body.data() + 4 * blocks;
    for (uint64_t b = 0; b < blocks; ++b) {
      const float scale = LoadLe<float>(view->body.data() + 4 * b);
      const uint64_t end = std::min(d, (b + 1) * block);
      for (uint64_t i = b * block; i < end; ++i) {
        dense[i] += ((bits[i >> 3] >> (i & 7)) & 1) ? -scale : scale;
      }
    }
    return absl::OkStatus();
  }

  int64_t MaxPayloadBytes(int64_t d) const override {
    const int64_t block = static_cast<int64_t>(BlockFor(d));
    const int64_t blocks = d == 0 ? 0 : (d + block - 1) / block;
    return kPayloadHeaderBytes + kExtBytes + 4 * blocks + (d + 7) / 8;
  }

 private:
  uint64_t BlockFor(uint64_t d) const {
    if (block_ == 0 || static_cast<uint64_t>(block_) > d) {
      return std::max<uint64_t>(d, 1);
    }
    return static_cast<uint64_t>(block_);
  }

  const double cf_;
  const int64_t block_;
};

}  // namespace

std::unique_ptr<Compressor> MakeEfSignSgdCompressor(
    double cf, const CompressorOptions& options) {
  return std::make_unique<EfSignSgdCompressor>(cf, options);
}

}  // namespace terse
