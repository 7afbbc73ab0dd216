#include "compressors/randomk_compressor.h"

#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "compressors/kernels/randomk.h"
#include "compressors/kernels/sparse_ops.h"

namespace terse {
namespace {

constexpr uint32_t kExtBytes = 8;  // The mixed seed.

class RandomKCompressor : public Compressor {
 public:
  RandomKCompressor(double cf, const CompressorOptions& options)
      : cf_(cf), value_type_(options.randomk_value_type) {}

  CompressorId id() const override { return CompressorId::kRandomK; }
  double cf() const override { return cf_; }
  bool lossy() const override { return true; }
  bool summable() const override { return true; }
  bool fixed_size() const override { return true; }

  absl::Status Compress(absl::Span<const float> input,
                        const CompressContext& ctx, Payload* payload) override {
    const int64_t d = static_cast<int64_t>(input.size());
    if (d >= (int64_t{1} << 32)) {
      return absl::InvalidArgumentError(
          absl::StrCat("randomk: a bucket of ", d, " elements is too large"));
    }
    const int64_t k = KeepCount(d, cf_);
    const uint64_t seed = kernels::MixSeed(ctx.seed, ctx.step, ctx.stream);
    std::shared_ptr<const std::vector<uint32_t>> indices = Indices(seed, d, k);
    std::vector<float> values(k);
    kernels::Gather(input.data(), indices->data(), k, values.data());
    PayloadHeader h;
    h.compressor = id();
    h.value_type = value_type_;
    h.index_coding = IndexCoding::kImplicit;
    h.dense_count = d;
    h.entry_count = k;
    h.ext_bytes = kExtBytes;
    h.body_bytes = k * ValueTypeBytes(value_type_);
    PayloadRegions r = StartPayload(h, payload);
    StoreLe<uint64_t>(r.ext, seed);
    WriteValues(value_type_, values.data(), k, r.body);
    return absl::OkStatus();
  }

  absl::Status AccumulateInto(absl::Span<const uint8_t> payload,
                              absl::Span<float> dense) const override {
    absl::StatusOr<PayloadView> view = Check(payload, dense.size());
    if (!view.ok()) return view.status();
    const int64_t k = static_cast<int64_t>(view->header.entry_count);
    const uint64_t seed = LoadLe<uint64_t>(view->ext.data());
    std::shared_ptr<const std::vector<uint32_t>> indices =
        Indices(seed, dense.size(), k);
    std::vector<float> values(k);
    ReadValues(view->header.value_type, view->body.data(), k, values.data());
    kernels::ScatterAdd(indices->data(), values.data(), k, dense.data());
    return absl::OkStatus();
  }

  absl::StatusOr<SummableRegion> SummableBody(Payload* payload) const override {
    if (payload->bytes.size() < kPayloadHeaderBytes) {
      return absl::InvalidArgumentError("bad payload: too short");
    }
    absl::StatusOr<PayloadView> view =
        Check(payload->bytes, LoadLe<uint64_t>(payload->bytes.data() + 8));
    if (!view.ok()) return view.status();
    SummableRegion region;
    region.data = payload->bytes.data() + kPayloadHeaderBytes + kExtBytes;
    region.count = static_cast<int64_t>(view->header.entry_count);
    region.dtype = value_type_ == ValueType::kFloat32   ? DataType::kFloat32
                   : value_type_ == ValueType::kFloat16 ? DataType::kFloat16
                                                        : DataType::kBFloat16;
    return region;
  }

  int64_t MaxPayloadBytes(int64_t d) const override {
    return kPayloadHeaderBytes + kExtBytes +
           KeepCount(d, cf_) * ValueTypeBytes(value_type_);
  }

 private:
  absl::StatusOr<PayloadView> Check(absl::Span<const uint8_t> payload,
                                    uint64_t d) const {
    absl::StatusOr<PayloadView> view = ParsePayload(payload, id(), d);
    if (!view.ok()) return view.status();
    const PayloadHeader& h = view->header;
    const uint64_t size = ValueTypeBytes(h.value_type);
    if (h.value_type != value_type_ || h.ext_bytes != kExtBytes ||
        h.index_coding != IndexCoding::kImplicit || h.entry_count > d ||
        d >= (uint64_t{1} << 32) || h.body_bytes % size != 0 ||
        h.body_bytes / size != h.entry_count) {
      return absl::InvalidArgumentError("bad payload: randomk layout");
    }
    return view;
  }

  // The positions for (seed, d, k); the last set is cached because a step
  // needs it up to three times (compress, own decode, summed decode).
  std::shared_ptr<const std::vector<uint32_t>> Indices(uint64_t seed, int64_t d,
                                                       int64_t k) const {
    {
      absl::MutexLock lock(&mu_);
      if (cached_ != nullptr && seed == cached_seed_ && d == cached_d_ &&
          k == static_cast<int64_t>(cached_->size())) {
        return cached_;
      }
    }
    auto fresh = std::make_shared<std::vector<uint32_t>>();
    kernels::RandomKIndices(seed, d, k, fresh.get());
    absl::MutexLock lock(&mu_);
    cached_ = fresh;
    cached_seed_ = seed;
    cached_d_ = d;
    return fresh;
  }

  const double cf_;
  const ValueType value_type_;
  mutable absl::Mutex mu_;
  mutable std::shared_ptr<const std::vector<uint32_t>> cached_
      ABSL_GUARDED_BY(mu_);
  mutable uint64_t cached_seed_ ABSL_GUARDED_BY(mu_) = 0;
  mutable int64_t cached_d_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace

std::unique_ptr<Compressor> MakeRandomKCompressor(
    double cf, const CompressorOptions& options) {
  return std::make_unique<RandomKCompressor>(cf, options);
}

}  // namespace terse
