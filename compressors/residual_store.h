// ResidualStore: the error-feedback residuals of tensor segments.
//
// Error feedback keeps, per tensor, what compression has not sent yet:
// a = g + residual before compressing, residual = a - sent after. Residuals
// are keyed by (tensor name, tensor_offset, count) of a Segment, so a tensor
// keeps its residual whatever bucket or bucket offset it lands in. Used by
// the ErrorFeedback decorator and by the engine's compressing reducer (which
// picks what is "sent" itself, e.g. GraVAC's multi-level choice).
//
// Thread-safe (one mutex); one segment must not be in two calls at once.
#ifndef TERSE_COMPRESSORS_RESIDUAL_STORE_H_
#define TERSE_COMPRESSORS_RESIDUAL_STORE_H_

#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "compressors/compressor.h"

namespace terse {

class ResidualStore {
 public:
  // ctx.segments checked against a bucket of d elements (inside, not
  // overlapping) and sorted by offset, or the whole bucket as one segment
  // named StateKey(ctx). ErrorFeedback validates its segments with this too.
  static absl::StatusOr<std::vector<Segment>> SegmentsOf(
      const CompressContext& ctx, int64_t d);

  // a[s.offset + i] += residual of s, for every segment that has one.
  void AddTo(absl::Span<float> a, const std::vector<Segment>& segments) const;
  // residual of s = a - sent over the segment's range.
  void Store(const std::vector<Segment>& segments, absl::Span<const float> a,
             absl::Span<const float> sent);
  // Leaky accumulation: r = decay * r + a over each segment's range (r = a
  // where the segment has none yet), then a = r. Momentum correction keeps
  // its velocities this way (engine/momentum_correction.h).
  void Accumulate(absl::Span<float> a, const std::vector<Segment>& segments,
                  float decay);
  // r[i] = 0 wherever sent[s.offset + i] != 0, for segments that have one
  // (DGC's masking of the entries a sparsifier sent).
  void ClearSent(const std::vector<Segment>& segments,
                 absl::Span<const float> sent);
  // Drops the residuals of `segments` (GraVAC's dense fallback).
  void Erase(const std::vector<Segment>& segments);
  // Drops every residual of the tensors `names` (any offset and count), e.g.
  // of names the engine stopped tracking (engine/bucket_assigner.h); one
  // that comes back starts from a zero residual. Returns how many residuals
  // were dropped.
  int64_t EraseNames(const std::vector<std::string>& names);

  // The residual of one segment (zeros if it has none yet).
  std::vector<float> Residual(const std::string& name, int64_t tensor_offset,
                              int64_t count) const;
  int64_t size() const;
  void Clear();

  // Checkpointing: every residual with its key.
  struct Entry {
    std::string name;
    int64_t tensor_offset = 0;
    std::vector<float> values;
  };
  std::vector<Entry> Export() const;
  // Replaces every residual (entries are moved in; pass an rvalue to avoid
  // a copy).
  void Import(std::vector<Entry> entries);
  // Calls fn with every residual, in Export's order, without copying them;
  // the store's lock is held while fn runs, so fn must not call back into
  // this store, and the pointers are valid only inside fn. Returns fn's
  // status.
  absl::Status WithEntries(
      absl::FunctionRef<absl::Status(const std::vector<const Entry*>&)> fn)
      const;

 private:
  static std::string KeyOf(const std::string& name, int64_t tensor_offset,
                           int64_t count);

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> residuals_ ABSL_GUARDED_BY(mu_);
};

}  // namespace terse

#endif  // TERSE_COMPRESSORS_RESIDUAL_STORE_H_
