#include "compressors/sparsifier.h"

#include <cassert>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compressors/kernels/randomk.h"
#include "compressors/kernels/select.h"
#include "compressors/kernels/sparse_ops.h"
#include "compressors/kernels/topk.h"

namespace terse {
namespace {

class Sparsifier : public Compressor {
 public:
  Sparsifier(CompressorId id, double cf, const CompressorOptions& options)
      : id_(id), cf_(cf), options_(options) {}

  CompressorId id() const override { return id_; }
  double cf() const override { return cf_; }
  bool lossy() const override { return true; }
  bool summable() const override { return false; }
  bool fixed_size() const override {
    return id_ == CompressorId::kTopK &&
           options_.index_coding == IndexCoding::kU32;
  }

  absl::Status Compress(absl::Span<const float> input,
                        const CompressContext& ctx, Payload* payload) override {
    const int64_t d = static_cast<int64_t>(input.size());
    if (d >= (int64_t{1} << 32)) {
      return absl::InvalidArgumentError(absl::StrCat(
          name(), ": a bucket of ", d, " elements needs 64-bit indices"));
    }
    if (options_.index_coding == IndexCoding::kImplicit) {
      return absl::InvalidArgumentError(
          absl::StrCat(name(), ": needs an explicit index coding"));
    }
    const int64_t k = KeepCount(d, cf_);
    std::vector<uint32_t> indices;
    Select(input.data(), d, k, ctx, &indices);
    const int64_t n = static_cast<int64_t>(indices.size());
    std::vector<float> values(n);
    kernels::Gather(input.data(), indices.data(), n, values.data());
    EncodeSparsePayload(id_, options_.value_type, options_.index_coding,
                        static_cast<uint64_t>(d), indices.data(), values.data(),
                        n, payload);
    return absl::OkStatus();
  }

  absl::Status AccumulateInto(absl::Span<const uint8_t> payload,
                              absl::Span<float> dense) const override {
    absl::StatusOr<SparseEntries> entries =
        DecodeSparsePayload(payload, id_, dense.size());
    if (!entries.ok()) return entries.status();
    kernels::ScatterAdd(entries->indices.data(), entries->values.data(),
                        entries->indices.size(), dense.data());
    return absl::OkStatus();
  }

  int64_t MaxPayloadBytes(int64_t d) const override {
    int64_t k = KeepCount(d, cf_);
    if (id_ == CompressorId::kRedSync) k = std::min(d, 2 * k);
    return kPayloadHeaderBytes +
           MaxIndexSectionBytes(options_.index_coding, k, d) +
           k * ValueTypeBytes(options_.value_type);
  }

 private:
  void Select(const float* x, int64_t d, int64_t k, const CompressContext& ctx,
              std::vector<uint32_t>* indices) const {
    switch (id_) {
      case CompressorId::kDgc: {
        kernels::SampledTopKOptions opt = options_.dgc;
        opt.num_threads = options_.num_threads;
        opt.seed = kernels::MixSeed(ctx.seed, ctx.step, ctx.stream);
        kernels::SampledTopK(x, d, k, opt, indices);
        return;
      }
      case CompressorId::kRedSync: {
        kernels::ThresholdSearchOptions opt = options_.redsync;
        opt.num_threads = options_.num_threads;
        kernels::ThresholdSearch(x, d, k, opt, indices);
        return;
      }
      case CompressorId::kThreshold: {
        const int64_t n = kernels::SelectAtLeast(
            x, d, kernels::ThresholdKey(static_cast<float>(options_.threshold)),
            k, indices, options_.num_threads);
        if (n <= k) return;
        break;  // Too many pass: the k largest.
      }
      default:
        break;
    }
    indices->resize(k);
    kernels::TopK(x, d, k, indices->data(), options_.num_threads);
  }

  const CompressorId id_;
  const double cf_;
  const CompressorOptions options_;
};

}  // namespace

std::unique_ptr<Compressor> MakeSparsifier(CompressorId id, double cf,
                                           const CompressorOptions& options) {
  assert(id == CompressorId::kTopK || id == CompressorId::kDgc ||
         id == CompressorId::kRedSync || id == CompressorId::kThreshold);
  return std::make_unique<Sparsifier>(id, cf, options);
}

}  // namespace terse
