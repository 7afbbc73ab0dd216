#include "compressors/powersgd_compressor.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "compressors/kernels/randomk.h"

namespace terse {
namespace {

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// Standard normal draws (Box-Muller over SplitMix64), platform independent
// up to libm's log/cos/sin.
void FillNormal(uint64_t seed, std::vector<float>* out) {
  uint64_t state = seed;
  for (size_t i = 0; i < out->size(); i += 2) {
    const double u1 =
        (static_cast<double>(kernels::SplitMix64(&state) >> 11) + 0.5) /
        9007199254740992.0;
    const double u2 = static_cast<double>(kernels::SplitMix64(&state) >> 11) /
                      9007199254740992.0;
    const double radius = std::sqrt(-2.0 * std::log(u1));
    (*out)[i] = static_cast<float>(radius * std::cos(2 * M_PI * u2));
    if (i + 1 < out->size()) {
      (*out)[i + 1] = static_cast<float>(radius * std::sin(2 * M_PI * u2));
    }
  }
}

// Orthonormalises the r columns of the rows x r row-major matrix p.
void Orthonormalize(int64_t rows, int64_t r, std::vector<float>* p) {
  std::vector<double> basis(rows * r, 0.0);
  std::vector<double> v(rows);
  for (int64_t c = 0; c < r; ++c) {
    for (int64_t i = 0; i < rows; ++i) v[i] = (*p)[i * r + c];
    for (int64_t prev = 0; prev < c; ++prev) {
      double dot = 0;
      for (int64_t i = 0; i < rows; ++i) dot += v[i] * basis[i * r + prev];
      for (int64_t i = 0; i < rows; ++i) v[i] -= dot * basis[i * r + prev];
    }
    double norm = 0;
    for (int64_t i = 0; i < rows; ++i) norm += v[i] * v[i];
    norm = std::sqrt(norm);
    // A column that vanished (rank-deficient sum) or is not finite: zero.
    const bool keep = std::isfinite(norm) && norm > 1e-30;
    for (int64_t i = 0; i < rows; ++i) {
      basis[i * r + c] = keep ? v[i] / norm : 0.0;
    }
  }
  for (int64_t i = 0; i < rows * r; ++i) (*p)[i] = static_cast<float>(basis[i]);
}

class PowerSgdCompressor;

class PowerSgdState : public RoundState {
 public:
  PowerSgdState(PowerSgdCompressor* owner, std::string key, PowerSgdShape shape,
                int64_t d, std::vector<float> m, std::vector<float> q)
      : owner_(owner),
        key_(std::move(key)),
        shape_(shape),
        d_(d),
        m_(std::move(m)),
        q_(std::move(q)) {
    // P = M Q.
    const int64_t rows = shape_.rows, cols = shape_.cols, r = shape_.rank;
    p_.assign(rows * r, 0.0f);
    std::vector<double> acc(r);
    for (int64_t i = 0; i < rows; ++i) {
      std::fill(acc.begin(), acc.end(), 0.0);
      const float* row = m_.data() + i * cols;
      for (int64_t j = 0; j < cols; ++j) {
        const double mij = row[j];
        if (mij == 0) continue;
        for (int64_t c = 0; c < r; ++c) acc[c] += mij * q_[j * r + c];
      }
      for (int64_t c = 0; c < r; ++c)
        p_[i * r + c] = static_cast<float>(acc[c]);
    }
  }

  int num_rounds() const override { return 2; }

  absl::Span<float> RoundBuffer(int round) override {
    if (round == 0) return absl::MakeSpan(p_);
    if (round == 1) return absl::MakeSpan(q_);
    return {};
  }

  absl::Status EndRound(int round) override;

  absl::Status AccumulateInto(absl::Span<float> dense) const override {
    return Reconstruct(q_, dense);
  }
  absl::Status AccumulateLocal(absl::Span<float> dense) const override {
    return Reconstruct(q_local_, dense);
  }

 private:
  absl::Status Reconstruct(const std::vector<float>& q,
                           absl::Span<float> dense) const {
    if (rounds_done_ != 2) {
      return absl::FailedPreconditionError(
          "powersgd: reconstruct before both rounds ended");
    }
    if (static_cast<int64_t>(dense.size()) != d_) {
      return absl::InvalidArgumentError(absl::StrCat("powersgd: dense has ",
                                                     dense.size(),
                                                     " elements, the "
                                                     "bucket ",
                                                     d_));
    }
    const int64_t cols = shape_.cols, r = shape_.rank;
    for (int64_t i = 0; i < shape_.rows; ++i) {
      const float* pi = p_.data() + i * r;
      const int64_t end = std::min(cols, d_ - i * cols);
      for (int64_t j = 0; j < end; ++j) {
        double sum = 0;
        for (int64_t c = 0; c < r; ++c) {
          sum += static_cast<double>(pi[c]) * q[j * r + c];
        }
        dense[i * cols + j] += static_cast<float>(sum);
      }
    }
    return absl::OkStatus();
  }

  PowerSgdCompressor* const owner_;
  const std::string key_;
  const PowerSgdShape shape_;
  const int64_t d_;
  std::vector<float> m_;  // rows x cols, zero padded.
  std::vector<float> p_;  // rows x r: P, then P^ after round 0.
  std::vector<float> q_;  // cols x r: start Q, then Q_local, then Q_sum.
  std::vector<float> q_local_;
  int rounds_done_ = 0;
};

class PowerSgdCompressor : public Compressor {
 public:
  PowerSgdCompressor(double cf, const CompressorOptions& options)
      : cf_(cf), rank_(std::max<int64_t>(1, options.powersgd_rank)) {}

  CompressorId id() const override { return CompressorId::kPowerSgd; }
  double cf() const override { return cf_; }
  bool lossy() const override { return true; }
  bool summable() const override { return true; }
  bool fixed_size() const override { return true; }
  int num_rounds() const override { return 2; }
  int64_t MaxPayloadBytes(int64_t d) const override { return 0; }

  absl::StatusOr<std::unique_ptr<RoundState>> BeginRounds(
      absl::Span<const float> input, const CompressContext& ctx) override {
    const int64_t d = static_cast<int64_t>(input.size());
    const PowerSgdShape shape = PowerSgdShapeFor(d, rank_);
    const std::string key = StateKey(ctx);
    std::vector<float> m(shape.rows * shape.cols, 0.0f);
    std::copy(input.begin(), input.end(), m.begin());
    std::vector<float> q;
    {
      absl::MutexLock lock(&mu_);
      auto it = warm_.find(key);
      if (it != warm_.end() && it->second.first == d) q = it->second.second;
    }
    if (q.size() != static_cast<size_t>(shape.cols * shape.rank)) {
      q.assign(shape.cols * shape.rank, 0.0f);
      FillNormal(kernels::MixSeed(ctx.seed, Fnv1a(key), d), &q);
    }
    return std::unique_ptr<RoundState>(
        new PowerSgdState(this, key, shape, d, std::move(m), std::move(q)));
  }

  void StoreWarmStart(const std::string& key, int64_t d,
                      const std::vector<float>& q) {
    absl::MutexLock lock(&mu_);
    warm_[key] = {d, q};
  }

 private:
  const double cf_;
  const int64_t rank_;
  absl::Mutex mu_;
  // State key -> (d, Q_sum of the last step).
  absl::flat_hash_map<std::string, std::pair<int64_t, std::vector<float>>> warm_
      ABSL_GUARDED_BY(mu_);
};

absl::Status PowerSgdState::EndRound(int round) {
  if (round != rounds_done_ || round > 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "powersgd: EndRound(", round, ") after ", rounds_done_, " rounds"));
  }
  const int64_t rows = shape_.rows, cols = shape_.cols, r = shape_.rank;
  if (round == 0) {
    Orthonormalize(rows, r, &p_);
    // Q_local = M^T P^.
    std::vector<double> acc(cols * r, 0.0);
    for (int64_t i = 0; i < rows; ++i) {
      const float* row = m_.data() + i * cols;
      const float* pi = p_.data() + i * r;
      for (int64_t j = 0; j < cols; ++j) {
        const double mij = row[j];
        if (mij == 0) continue;
        for (int64_t c = 0; c < r; ++c) acc[j * r + c] += mij * pi[c];
      }
    }
    q_local_.resize(cols * r);
    for (int64_t i = 0; i < cols * r; ++i) {
      q_local_[i] = static_cast<float>(acc[i]);
    }
    q_ = q_local_;
    m_.clear();
    m_.shrink_to_fit();
  } else {
    owner_->StoreWarmStart(key_, d_, q_);
  }
  ++rounds_done_;
  return absl::OkStatus();
}

}  // namespace

PowerSgdShape PowerSgdShapeFor(int64_t d, int64_t rank) {
  PowerSgdShape s;
  if (d <= 0) return s;
  s.cols = static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(d))));
  while (s.cols * s.cols < d) ++s.cols;
  while (s.cols > 1 && (s.cols - 1) * (s.cols - 1) >= d) --s.cols;
  s.rows = (d + s.cols - 1) / s.cols;
  s.rank = std::max<int64_t>(1, std::min({rank, s.rows, s.cols}));
  return s;
}

std::unique_ptr<Compressor> MakePowerSgdCompressor(
    double cf, const CompressorOptions& options) {
  return std::make_unique<PowerSgdCompressor>(cf, options);
}

}  // namespace terse
