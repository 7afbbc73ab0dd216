#include "compressors/error_feedback.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "compressors/kernels/parallel.h"

namespace terse {
namespace {

constexpr size_t kMaxScratch = 4;
constexpr int64_t kMinPerThread = int64_t{1} << 18;

// fn(lo, hi) over near-equal chunks of [0, d), in parallel.
template <typename Fn>
void ForChunks(int64_t d, int num_threads, Fn&& fn) {
  const int threads = kernels::ResolveThreads(num_threads, d, kMinPerThread);
  kernels::ParallelFor(threads, [&](int t) {
    fn(kernels::ChunkBegin(d, threads, t),
       kernels::ChunkBegin(d, threads, t + 1));
  });
}

}  // namespace

// Wraps the inner round state; after the last round stores the residual.
class ErrorFeedback::Rounds : public RoundState {
 public:
  Rounds(ErrorFeedback* owner, std::unique_ptr<RoundState> inner,
         std::vector<Segment> segments, std::vector<float> a)
      : owner_(owner),
        inner_(std::move(inner)),
        segments_(std::move(segments)),
        a_(std::move(a)) {}
  ~Rounds() override { owner_->ReleaseScratch(std::move(a_)); }

  int num_rounds() const override { return inner_->num_rounds(); }
  absl::Span<float> RoundBuffer(int round) override {
    return inner_->RoundBuffer(round);
  }
  absl::Status EndRound(int round) override {
    absl::Status st = inner_->EndRound(round);
    if (!st.ok() || round != inner_->num_rounds() - 1) return st;
    owner_->Negate(&a_);  // -a + own share = -(residual).
    st = inner_->AccumulateLocal(absl::MakeSpan(a_));
    if (!st.ok()) return st;
    owner_->StoreNegatedResidual(segments_, a_);
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
  std::vector<float> a_;
};

ErrorFeedback::ErrorFeedback(std::unique_ptr<Compressor> inner, int num_threads)
    : inner_(std::move(inner)), num_threads_(num_threads) {}

void ErrorFeedback::Negate(std::vector<float>* v) const {
  float* p = v->data();
  ForChunks(static_cast<int64_t>(v->size()), num_threads_,
            [p](int64_t lo, int64_t hi) {
              for (int64_t i = lo; i < hi; ++i) p[i] = -p[i];
            });
}

std::string ErrorFeedback::KeyOf(const Segment& s) {
  return absl::StrCat(s.name, "#", s.tensor_offset, "+", s.count);
}

absl::StatusOr<std::vector<Segment>> ErrorFeedback::SegmentsOf(
    const CompressContext& ctx, int64_t d) {
  return ResidualStore::SegmentsOf(ctx, d);
}

std::vector<float> ErrorFeedback::AcquireScratch(int64_t d) {
  std::vector<float> buffer;
  {
    absl::MutexLock lock(&mu_);
    if (!scratch_.empty()) {
      buffer = std::move(scratch_.back());
      scratch_.pop_back();
    }
  }
  buffer.resize(d);
  return buffer;
}

void ErrorFeedback::ReleaseScratch(std::vector<float> buffer) {
  absl::MutexLock lock(&mu_);
  if (scratch_.size() < kMaxScratch) scratch_.push_back(std::move(buffer));
}

void ErrorFeedback::AddResidual(absl::Span<const float> input,
                                const std::vector<Segment>& segments,
                                std::vector<float>* a) {
  // The residual of every segment (null: none yet), in offset order.
  std::vector<const float*> residual(segments.size(), nullptr);
  absl::MutexLock lock(&mu_);
  for (size_t j = 0; j < segments.size(); ++j) {
    auto it = residuals_.find(KeyOf(segments[j]));
    if (it != residuals_.end()) residual[j] = it->second.data();
  }
  const float* in = input.data();
  float* out = a->data();
  // One fused pass: out = in (+ the residual where a segment has one).
  ForChunks(static_cast<int64_t>(input.size()), num_threads_,
            [&](int64_t lo, int64_t hi) {
              int64_t pos = lo;
              for (size_t j = 0; j < segments.size() && pos < hi; ++j) {
                const Segment& s = segments[j];
                const int64_t b = std::max(pos, s.offset);
                const int64_t e = std::min(hi, s.offset + s.count);
                if (residual[j] == nullptr || b >= e) continue;
                std::copy(in + pos, in + b, out + pos);
                const float* r = residual[j] - s.offset;
                for (int64_t i = b; i < e; ++i) out[i] = in[i] + r[i];
                pos = e;
              }
              if (pos < hi) std::copy(in + pos, in + hi, out + pos);
            });
}

void ErrorFeedback::StoreNegatedResidual(const std::vector<Segment>& segments,
                                         const std::vector<float>& neg) {
  std::vector<float*> residual(segments.size());
  absl::MutexLock lock(&mu_);
  for (size_t j = 0; j < segments.size(); ++j) {
    std::vector<float>& r = residuals_[KeyOf(segments[j])];
    r.resize(segments[j].count);
    residual[j] = r.data();
  }
  const float* in = neg.data();
  ForChunks(static_cast<int64_t>(neg.size()), num_threads_,
            [&](int64_t lo, int64_t hi) {
              for (size_t j = 0; j < segments.size(); ++j) {
                const Segment& s = segments[j];
                const int64_t b = std::max(lo, s.offset);
                const int64_t e = std::min(hi, s.offset + s.count);
                float* r = residual[j] - s.offset;
                for (int64_t i = b; i < e; ++i) r[i] = -in[i];
              }
            });
}

absl::Status ErrorFeedback::Compress(absl::Span<const float> input,
                                     const CompressContext& ctx,
                                     Payload* payload) {
  const int64_t d = static_cast<int64_t>(input.size());
  absl::StatusOr<std::vector<Segment>> segments = SegmentsOf(ctx, d);
  if (!segments.ok()) return segments.status();
  std::vector<float> a = AcquireScratch(d);
  AddResidual(input, *segments, &a);
  absl::Status st = inner_->Compress(a, ctx, payload);
  if (st.ok()) {
    // a -> -a + decode(c) = -(a - decode(c)), without a second buffer.
    Negate(&a);
    st = inner_->AccumulateInto(payload->bytes, absl::MakeSpan(a));
    if (st.ok()) StoreNegatedResidual(*segments, a);
  }
  ReleaseScratch(std::move(a));
  return st;
}

absl::StatusOr<std::unique_ptr<RoundState>> ErrorFeedback::BeginRounds(
    absl::Span<const float> input, const CompressContext& ctx) {
  const int64_t d = static_cast<int64_t>(input.size());
  absl::StatusOr<std::vector<Segment>> segments = SegmentsOf(ctx, d);
  if (!segments.ok()) return segments.status();
  std::vector<float> a = AcquireScratch(d);
  AddResidual(input, *segments, &a);
  absl::StatusOr<std::unique_ptr<RoundState>> inner =
      inner_->BeginRounds(a, ctx);
  if (!inner.ok()) {
    ReleaseScratch(std::move(a));
    return inner.status();
  }
  return std::unique_ptr<RoundState>(
      new Rounds(this, std::move(*inner), std::move(*segments), std::move(a)));
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
