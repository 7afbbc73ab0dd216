#include "compressors/qsgd_compressor.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "compressors/kernels/fixed_order_sum.h"
#include "compressors/kernels/randomk.h"

namespace terse {
namespace {

constexpr uint32_t kExtBytes = 8;
constexpr int kMaxLevels = 32767;  // 16 bits per element.

int CodeBits(int levels) {
  int bits = 0;
  while ((1 << bits) <= levels) ++bits;  // ceil(log2(levels + 1))
  return 1 + bits;
}

uint64_t PackedBytes(uint64_t d, int bits) { return (d * bits + 7) / 8; }

class QsgdCompressor : public Compressor {
 public:
  QsgdCompressor(double cf, const CompressorOptions& options)
      : cf_(cf),
        levels_(QsgdLevels(cf, options)),
        bucket_(std::max<int64_t>(
            1, std::min<int64_t>(options.qsgd_bucket_size, UINT32_MAX))) {}

  CompressorId id() const override { return CompressorId::kQsgd; }
  double cf() const override { return cf_; }
  bool lossy() const override { return true; }
  bool summable() const override { return false; }
  bool fixed_size() const override { return true; }

  absl::Status Compress(absl::Span<const float> input,
                        const CompressContext& ctx, Payload* payload) override {
    const uint64_t d = input.size();
    const int bits = CodeBits(levels_);
    const uint64_t buckets = (d + bucket_ - 1) / bucket_;
    PayloadHeader h;
    h.compressor = id();
    h.value_type = ValueType::kFloat32;
    h.index_coding = IndexCoding::kImplicit;
    h.dense_count = d;
    h.entry_count = d;
    h.ext_bytes = kExtBytes;
    h.body_bytes = 4 * buckets + PackedBytes(d, bits);
    PayloadRegions r = StartPayload(h, payload);
    StoreLe<uint32_t>(r.ext, static_cast<uint32_t>(levels_));
    StoreLe<uint32_t>(r.ext + 4, static_cast<uint32_t>(bucket_));
    uint8_t* codes = r.body + 4 * buckets;
    std::fill(codes, codes + PackedBytes(d, bits), 0);
    const uint64_t base =
        kernels::MixSeed(kernels::MixSeed(ctx.seed, ctx.step, ctx.stream),
                         static_cast<uint64_t>(ctx.rank));
    uint64_t bit_pos = 0;
    for (uint64_t b = 0; b < buckets; ++b) {
      const uint64_t begin = b * bucket_;
      const uint64_t end = std::min<uint64_t>(d, begin + bucket_);
      // The order the CUDA kernel reproduces (kernels/fixed_order_sum.h).
      const double sq = kernels::FixedOrderSum(
          static_cast<int64_t>(end - begin), [&](int64_t i) {
            const double v = input[begin + i];
            return v * v;
          });
      const float norm = static_cast<float>(std::sqrt(sq));
      StoreLe<float>(r.body + 4 * b, norm);
      const bool usable = std::isfinite(norm) && norm > 0;
      const double scale = usable ? levels_ / static_cast<double>(norm) : 0;
      uint64_t state = kernels::MixSeed(base, b);
      uint64_t random = 0;
      for (uint64_t i = begin; i < end; ++i, bit_pos += bits) {
        if (((i - begin) & 1) == 0) random = kernels::SplitMix64(&state);
        const uint32_t draw =
            static_cast<uint32_t>(((i - begin) & 1) ? random >> 32 : random);
        uint32_t level = 0;
        const double a = std::fabs(static_cast<double>(input[i])) * scale;
        if (usable && a > 0) {  // a is NaN for NaN inputs: level 0.
          const double floor_a = std::floor(a);
          level = static_cast<uint32_t>(std::min<double>(floor_a, levels_));
          if (draw * (1.0 / 4294967296.0) < a - floor_a) ++level;
          level = std::min<uint32_t>(level, levels_);
        }
        const uint32_t code = (level << 1) | (std::signbit(input[i]) ? 1u : 0u);
        WriteBits(codes, bit_pos, bits, code);
      }
    }
    return absl::OkStatus();
  }

  absl::Status AccumulateInto(absl::Span<const uint8_t> payload,
                              absl::Span<float> dense) const override {
    absl::StatusOr<PayloadView> view =
        ParsePayload(payload, id(), dense.size());
    if (!view.ok()) return view.status();
    const PayloadHeader& h = view->header;
    if (h.ext_bytes != kExtBytes || h.entry_count != dense.size()) {
      return absl::InvalidArgumentError("bad payload: qsgd layout");
    }
    const uint32_t levels = LoadLe<uint32_t>(view->ext.data());
    const uint32_t bucket = LoadLe<uint32_t>(view->ext.data() + 4);
    if (levels < 1 || levels > kMaxLevels || bucket < 1) {
      return absl::InvalidArgumentError("bad payload: qsgd parameters");
    }
    const uint64_t d = dense.size();
    const int bits = CodeBits(static_cast<int>(levels));
    const uint64_t buckets = (d + bucket - 1) / bucket;
    if (h.body_bytes != 4 * buckets + PackedBytes(d, bits)) {
      return absl::InvalidArgumentError("bad payload: qsgd body size");
    }
    const uint8_t* codes = view->body.data() + 4 * buckets;
    std::vector<float> decoded(d);
    uint64_t bit_pos = 0;
    for (uint64_t b = 0; b < buckets; ++b) {
      const float norm = LoadLe<float>(view->body.data() + 4 * b);
      const float unit = norm / static_cast<float>(levels);
      const uint64_t end = std::min<uint64_t>(d, (b + 1) * bucket);
      for (uint64_t i = b * bucket; i < end; ++i, bit_pos += bits) {
        const uint32_t code = ReadBits(codes, bit_pos, bits);
        const uint32_t level = code >> 1;
        if (level > levels) {
          return absl::InvalidArgumentError("bad payload: qsgd level > s");
        }
        const float v = unit * static_cast<float>(level);
        decoded[i] = (code & 1u) ? -v : v;
      }
    }
    for (uint64_t i = 0; i < d; ++i) dense[i] += decoded[i];
    return absl::OkStatus();
  }

  int64_t MaxPayloadBytes(int64_t d) const override {
    const int64_t buckets = (d + bucket_ - 1) / bucket_;
    return kPayloadHeaderBytes + kExtBytes + 4 * buckets +
           PackedBytes(d, CodeBits(levels_));
  }

 private:
  // Bits [pos, pos + n) of a little-endian bit stream, n <= 17.
  static void WriteBits(uint8_t* out, uint64_t pos, int n, uint32_t v) {
    for (int done = 0; done < n;) {
      const int bit = static_cast<int>((pos + done) & 7);
      const int take = std::min(8 - bit, n - done);
      out[(pos + done) >> 3] |=
          static_cast<uint8_t>(((v >> done) & ((1u << take) - 1)) << bit);
      done += take;
    }
  }
  static uint32_t ReadBits(const uint8_t* in, uint64_t pos, int n) {
    uint32_t v = 0;
    for (int done = 0; done < n;) {
      const int bit = static_cast<int>((pos + done) & 7);
      const int take = std::min(8 - bit, n - done);
      v |= ((static_cast<uint32_t>(in[(pos + done) >> 3]) >> bit) &
            ((1u << take) - 1))
           << done;
      done += take;
    }
    return v;
  }

  const double cf_;
  const int levels_;
  const int64_t bucket_;
};

}  // namespace

int QsgdLevels(double cf, const CompressorOptions& options) {
  if (options.qsgd_levels > 0) {
    return std::min(options.qsgd_levels, kMaxLevels);
  }
  int bits = cf >= 1 ? static_cast<int>(std::floor(32.0 / cf)) : 16;
  bits = std::max(2, std::min(16, bits));
  return (1 << (bits - 1)) - 1;
}

std::unique_ptr<Compressor> MakeQsgdCompressor(
    double cf, const CompressorOptions& options) {
  return std::make_unique<QsgdCompressor>(cf, options);
}

}  // namespace terse
