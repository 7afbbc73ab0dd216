#include "compressors/error_feedback.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace terse {
// Wraps the inner round state; after the last round stores the residual.
class ErrorFeedback::Rounds : public RoundState {
 public:
  Rounds(ErrorFeedback* owner, std::unique_ptr<RoundState> inner,
         std::vector<Segment> segments, std::vector<float> a)
      : owner_(owner),
        inner_(std::move(inner)),
        segments_(std::move(segments)),
        a_(std::move(a)) {}

  int num_rounds() const override { return inner_->num_rounds(); }
  absl::Span<float> RoundBuffer(int round) override {
    return inner_->RoundBuffer(round);
  }
  absl::Status EndRound(int round) override {
    absl::Status st = inner_->EndRound(round);
    if (!st.ok() || round != inner_->num_rounds() - 1) return st;
    std::vector<float> decoded(a_.size(), 0.0f);
    st = inner_->AccumulateLocal(absl::MakeSpan(decoded));
    if (!st.ok()) return st;
    owner_->StoreResidual(segments_, a_, decoded);
    return absl::OkStatus();
  }
  absl::Status AccumulateInto(absl::Span<float> dense) const override {
    return inner_->AccumulateInto(dense);
  }
  absl::Status AccumulateLocal(absl::Span<float> dense) const override {
    return inner_->AccumulateLocal(dense);
  }

 private:
  ErrorFeedback* const owner_;
  const std::unique_ptr<RoundState> inner_;
  const std::vector<Segment> segments_;
  const std::vector<float> a_;
};

ErrorFeedback::ErrorFeedback(std::unique_ptr<Compressor> inner)
    : inner_(std::move(inner)) {}

std::string ErrorFeedback::KeyOf(const Segment& s) {
  return absl::StrCat(s.name, "#", s.tensor_offset, "+", s.count);
}

absl::StatusOr<std::vector<Segment>> ErrorFeedback::SegmentsOf(
    const CompressContext& ctx, int64_t d) {
  std::vector<Segment> segments;
  if (ctx.segments.empty()) {
    Segment whole;
    whole.name = StateKey(ctx);
    whole.count = d;
    segments.push_back(std::move(whole));
    return segments;
  }
  segments.assign(ctx.segments.begin(), ctx.segments.end());
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (const Segment& s : segments) {
    if (s.offset < 0 || s.count < 0 || s.offset > d || s.count > d - s.offset ||
        s.tensor_offset < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("segment '", s.name, "' [", s.offset, ", +", s.count,
                       ") is outside the bucket of ", d, " elements"));
    }
    ranges.emplace_back(s.offset, s.offset + s.count);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) {
      return absl::InvalidArgumentError("segments overlap");
    }
  }
  return segments;
}

absl::StatusOr<std::vector<float>> ErrorFeedback::AddResidual(
    absl::Span<const float> input, const std::vector<Segment>& segments) {
  std::vector<float> a(input.begin(), input.end());
  absl::MutexLock lock(&mu_);
  for (const Segment& s : segments) {
    auto it = residuals_.find(KeyOf(s));
    if (it == residuals_.end()) continue;
    const float* r = it->second.data();
    float* out = a.data() + s.offset;
    for (int64_t i = 0; i < s.count; ++i) out[i] += r[i];
  }
  return a;
}

void ErrorFeedback::StoreResidual(const std::vector<Segment>& segments,
                                  const std::vector<float>& a,
                                  const std::vector<float>& decoded) {
  absl::MutexLock lock(&mu_);
  for (const Segment& s : segments) {
    std::vector<float>& r = residuals_[KeyOf(s)];
    r.resize(s.count);
    for (int64_t i = 0; i < s.count; ++i) {
      r[i] = a[s.offset + i] - decoded[s.offset + i];
    }
  }
}

absl::Status ErrorFeedback::Compress(absl::Span<const float> input,
                                     const CompressContext& ctx,
                                     Payload* payload) {
  absl::StatusOr<std::vector<Segment>> segments =
      SegmentsOf(ctx, static_cast<int64_t>(input.size()));
  if (!segments.ok()) return segments.status();
  absl::StatusOr<std::vector<float>> a = AddResidual(input, *segments);
  if (!a.ok()) return a.status();
  absl::Status st = inner_->Compress(*a, ctx, payload);
  if (!st.ok()) return st;
  std::vector<float> decoded(input.size(), 0.0f);
  st = inner_->AccumulateInto(payload->bytes, absl::MakeSpan(decoded));
  if (!st.ok()) return st;
  StoreResidual(*segments, *a, decoded);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RoundState>> ErrorFeedback::BeginRounds(
    absl::Span<const float> input, const CompressContext& ctx) {
  absl::StatusOr<std::vector<Segment>> segments =
      SegmentsOf(ctx, static_cast<int64_t>(input.size()));
  if (!segments.ok()) return segments.status();
  absl::StatusOr<std::vector<float>> a = AddResidual(input, *segments);
  if (!a.ok()) return a.status();
  absl::StatusOr<std::unique_ptr<RoundState>> inner =
      inner_->BeginRounds(*a, ctx);
  if (!inner.ok()) return inner.status();
  return std::unique_ptr<RoundState>(
      new Rounds(this, std::move(*inner), std::move(*segments), std::move(*a)));
}

std::vector<float> ErrorFeedback::Residual(const std::string& name,
                                           int64_t tensor_offset,
                                           int64_t count) const {
  Segment s;
  s.name = name;
  s.tensor_offset = tensor_offset;
  s.count = count;
  absl::MutexLock lock(&mu_);
  auto it = residuals_.find(KeyOf(s));
  if (it == residuals_.end()) return std::vector<float>(count, 0.0f);
  return it->second;
}

int64_t ErrorFeedback::num_residuals() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(residuals_.size());
}

void ErrorFeedback::Clear() {
  absl::MutexLock lock(&mu_);
  residuals_.clear();
}

}  // namespace terse
