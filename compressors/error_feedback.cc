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
    owner_->residuals_.Store(segments_, a_, decoded);
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

absl::Status ErrorFeedback::Compress(absl::Span<const float> input,
                                     const CompressContext& ctx,
                                     Payload* payload) {
  absl::StatusOr<std::vector<Segment>> segments =
      ResidualStore::SegmentsOf(ctx, static_cast<int64_t>(input.size()));
  if (!segments.ok()) return segments.status();
  std::vector<float> a(input.begin(), input.end());
  residuals_.AddTo(absl::MakeSpan(a), *segments);
  absl::Status st = inner_->Compress(a, ctx, payload);
  if (!st.ok()) return st;
  std::vector<float> decoded(input.size(), 0.0f);
  st = inner_->AccumulateInto(payload->bytes, absl::MakeSpan(decoded));
  if (!st.ok()) return st;
  residuals_.Store(*segments, a, decoded);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RoundState>> ErrorFeedback::BeginRounds(
    absl::Span<const float> input, const CompressContext& ctx) {
  absl::StatusOr<std::vector<Segment>> segments =
      ResidualStore::SegmentsOf(ctx, static_cast<int64_t>(input.size()));
  if (!segments.ok()) return segments.status();
  std::vector<float> a(input.begin(), input.end());
  residuals_.AddTo(absl::MakeSpan(a), *segments);
  absl::StatusOr<std::unique_ptr<RoundState>> inner =
      inner_->BeginRounds(a, ctx);
  if (!inner.ok()) return inner.status();
  return std::unique_ptr<RoundState>(
      new Rounds(this, std::move(*inner), std::move(*segments), std::move(a)));
}

std::vector<float> ErrorFeedback::Residual(const std::string& name,
                                           int64_t tensor_offset,
                                           int64_t count) const {
  return residuals_.Residual(name, tensor_offset, count);
}

int64_t ErrorFeedback::num_residuals() const { return residuals_.size(); }

void ErrorFeedback::Clear() { residuals_.Clear(); }

}  // namespace terse
