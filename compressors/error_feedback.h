// Error feedback as a decorator around any Compressor (Seide et al. 2014;
// Karimireddy et al. 2019):
//
//   a = g + residual;   c = C(a);   residual = a - decode(c)
//
// where decode(c) is this rank's own contribution: the decoded payload for
// Protocol A (decoded right after Compress, before any allreduce), or
// RoundState::AccumulateLocal after the last round for Protocol B. So on
// every rank, after each step, residual + decode(c) == a up to the rounding
// of one float subtraction (exactly where decode(c) is a or 0 elementwise,
// as for top-k and random-k with fp32 values).
//
// Residuals are kept per tensor segment, keyed by (name, tensor_offset,
// count) of CompressContext::segments, so a tensor keeps its residual
// whatever bucket or bucket offset it lands in. Without segments the whole
// bucket is one segment named StateKey(ctx). Bucket elements outside every
// segment get no residual (their error is dropped). Segments must lie
// inside the bucket and not overlap (InvalidArgument otherwise).
//
// Traits, payload decoding and summable regions are the inner compressor's.
// Thread-safety: the residual table is guarded by a mutex; one segment must
// not be in two calls at once (the engine compresses a tensor once a step).
#ifndef TERSE_COMPRESSORS_ERROR_FEEDBACK_H_
#define TERSE_COMPRESSORS_ERROR_FEEDBACK_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "compressors/compressor.h"
#include "compressors/residual_store.h"

namespace terse {

class ErrorFeedback : public Compressor {
 public:
  // num_threads: for the elementwise passes (0 = kernels::DefaultThreads()).
  explicit ErrorFeedback(std::unique_ptr<Compressor> inner,
                         int num_threads = 0);

  CompressorId id() const override { return inner_->id(); }
  double cf() const override { return inner_->cf(); }
  bool lossy() const override { return inner_->lossy(); }
  bool summable() const override { return inner_->summable(); }
  bool fixed_size() const override { return inner_->fixed_size(); }
  int num_rounds() const override { return inner_->num_rounds(); }
  int64_t MaxPayloadBytes(int64_t d) const override {
    return inner_->MaxPayloadBytes(d);
  }

  absl::Status Compress(absl::Span<const float> input,
                        const CompressContext& ctx, Payload* payload) override;
  absl::Status AccumulateInto(absl::Span<const uint8_t> payload,
                              absl::Span<float> dense) const override {
    return inner_->AccumulateInto(payload, dense);
  }
  absl::StatusOr<SummableRegion> SummableBody(Payload* payload) const override {
    return inner_->SummableBody(payload);
  }
  absl::StatusOr<std::unique_ptr<RoundState>> BeginRounds(
      absl::Span<const float> input, const CompressContext& ctx) override;

  const Compressor& inner() const { return *inner_; }

  // The residual of one segment (zeros if it has none yet).
  std::vector<float> Residual(const std::string& name, int64_t tensor_offset,
                              int64_t count) const;
  // Number of segments holding a residual.
  int64_t num_residuals() const;
  // Forgets every residual.
  void Clear();

 private:
  class Rounds;  // The Protocol-B wrapper.

  // *a = input + residuals of the segments (bucket layout).
  void AddResidual(absl::Span<const float> input,
                   const std::vector<Segment>& segments, std::vector<float>* a);
  // Residual of each segment = a - decoded, given neg = decoded - a
  // (= -(a - decoded) exactly: float rounding is symmetric).
  void StoreNegatedResidual(const std::vector<Segment>& segments,
                            const std::vector<float>& neg);
  // v = -v, in parallel.
  void Negate(std::vector<float>* v) const;
  // ctx.segments (sorted by offset), or the whole bucket as one segment.
  static absl::StatusOr<std::vector<Segment>> SegmentsOf(
      const CompressContext& ctx, int64_t d);
  // Bucket-sized scratch buffers, reused so that a step does not page-fault
  // fresh memory (contents unspecified).
  std::vector<float> AcquireScratch(int64_t d);
  void ReleaseScratch(std::vector<float> buffer);

  static std::string KeyOf(const Segment& s);

  const std::unique_ptr<Compressor> inner_;
  const int num_threads_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::vector<float>> residuals_
      ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<float>> scratch_ ABSL_GUARDED_BY(mu_);
};

}  // namespace terse

#endif  // TERSE_COMPRESSORS_ERROR_FEEDBACK_H_
