#include "compressors/powersgd_compressor.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "compressors/kernels/randomk.h"
#include "compressors/powersgd_plan.h"

namespace terse {
namespace {

using RowMat =
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatMap = Eigen::Map<RowMat>;
using ConstMatMap = Eigen::Map<const RowMat>;

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

class PowerSgdCompressor;

class PowerSgdState : public RoundState {
 public:
  PowerSgdState(PowerSgdCompressor* owner, PowerSgdPlan plan, int64_t d,
                absl::Span<const float> input, std::vector<float> q);

  int num_rounds() const override { return plan_.matrices.empty() ? 1 : 2; }

  absl::Span<float> RoundBuffer(int round) override {
    if (round == 0) return absl::MakeSpan(round0_);
    if (round == 1 && num_rounds() == 2) return absl::MakeSpan(round1_);
    return {};
  }

  absl::Status EndRound(int round) override;

  absl::Status AccumulateInto(absl::Span<float> dense) const override {
    return Reconstruct(round1_, round0_.data() + plan_.p_floats, dense);
  }
  absl::Status AccumulateLocal(absl::Span<float> dense) const override {
    return Reconstruct(q_local_, own_dense_.data(), dense);
  }

 private:
  // dense += P^_i Q_i^T per matrix (q: all Q's) and the uncompressed values
  // (`values`, in bucket order).
  absl::Status Reconstruct(const std::vector<float>& q, const float* values,
                           absl::Span<float> dense) const;

  PowerSgdCompressor* const owner_;
  const PowerSgdPlan plan_;
  const int64_t d_;
  std::vector<float> mats_;       // The matrices, zero padded (until round 0).
  std::vector<float> round0_;     // P's (then P^'s), uncompressed values.
  std::vector<float> round1_;     // Start Q's, then Q_local's, then Q_sum's.
  std::vector<float> q_local_;    // This rank's Q's.
  std::vector<float> own_dense_;  // This rank's uncompressed values.
  int rounds_done_ = 0;
};

class PowerSgdCompressor : public Compressor {
 public:
  PowerSgdCompressor(double cf, const CompressorOptions& options)
      : cf_(cf), options_(options) {
    options_.powersgd_rank = std::max<int64_t>(1, options.powersgd_rank);
  }

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
    const bool compress = ctx.step >= static_cast<uint64_t>(std::max<int64_t>(
                                          0, options_.powersgd_start_step));
    absl::StatusOr<PowerSgdPlan> plan =
        MakePowerSgdPlan(d, ctx.segments, StateKey(ctx), options_, compress);
    if (!plan.ok()) return plan.status();
    // The start Q's: warm where this key's shape was seen, else drawn.
    std::vector<float> q(plan->q_floats);
    std::vector<bool> warm(plan->matrices.size(), false);
    {
      absl::MutexLock lock(&mu_);
      for (size_t i = 0; i < plan->matrices.size(); ++i) {
        const PowerSgdMatrix& m = plan->matrices[i];
        auto it = warm_.find(m.warm_key);
        if (it != warm_.end() &&
            it->second.size() == static_cast<size_t>(m.cols * m.rank)) {
          std::copy(it->second.begin(), it->second.end(),
                    q.begin() + m.q_offset);
          warm[i] = true;
        }
      }
    }
    for (size_t i = 0; i < plan->matrices.size(); ++i) {
      if (warm[i]) continue;
      const PowerSgdMatrix& m = plan->matrices[i];
      const std::vector<float> start =
          PowerSgdStartQ(ctx.seed, m.name, m.cols, m.rank);
      std::copy(start.begin(), start.end(), q.begin() + m.q_offset);
    }
    return std::unique_ptr<RoundState>(
        new PowerSgdState(this, *std::move(plan), d, input, std::move(q)));
  }

  std::map<std::string, std::vector<float>> ExportWarmState() const override {
    absl::MutexLock lock(&mu_);
    return std::map<std::string, std::vector<float>>(warm_.begin(),
                                                     warm_.end());
  }

  void ImportWarmState(
      std::map<std::string, std::vector<float>> state) override {
    absl::MutexLock lock(&mu_);
    for (auto& [key, q] : state) warm_[key] = std::move(q);
  }

  void StoreWarmStarts(const PowerSgdPlan& plan, const std::vector<float>& q) {
    absl::MutexLock lock(&mu_);
    for (const PowerSgdMatrix& m : plan.matrices) {
      const float* begin = q.data() + m.q_offset;
      warm_[m.warm_key].assign(begin, begin + m.cols * m.rank);
    }
  }

 private:
  const double cf_;
  CompressorOptions options_;
  mutable absl::Mutex mu_;
  // Warm-start key -> Q_sum (cols x rank) of the last step.
  absl::flat_hash_map<std::string, std::vector<float>> warm_
      ABSL_GUARDED_BY(mu_);
};

PowerSgdState::PowerSgdState(PowerSgdCompressor* owner, PowerSgdPlan plan,
                             int64_t d, absl::Span<const float> input,
                             std::vector<float> q)
    : owner_(owner),
      plan_(std::move(plan)),
      d_(d),
      mats_(plan_.m_floats, 0.0f),
      round0_(plan_.p_floats + plan_.dense_floats),
      round1_(std::move(q)) {
  for (const PowerSgdMatrix& m : plan_.matrices) {
    float* mat = mats_.data() + m.m_offset;
    std::copy(input.begin() + m.offset, input.begin() + m.offset + m.count,
              mat);
    // P = M Q.
    MatMap(round0_.data() + m.p_offset, m.rows, m.rank).noalias() =
        ConstMatMap(mat, m.rows, m.cols) *
        ConstMatMap(round1_.data() + m.q_offset, m.cols, m.rank);
  }
  float* out = round0_.data() + plan_.p_floats;
  for (const PowerSgdRange& r : plan_.dense) {
    out = std::copy(input.begin() + r.offset,
                    input.begin() + r.offset + r.count, out);
  }
  own_dense_.assign(round0_.begin() + plan_.p_floats, round0_.end());
}

absl::Status PowerSgdState::EndRound(int round) {
  if (round != rounds_done_ || round >= num_rounds()) {
    return absl::FailedPreconditionError(
        absl::StrCat("powersgd: EndRound(", round, ") after ", rounds_done_,
                     " of ", num_rounds(), " rounds"));
  }
  if (round == 0 && !plan_.matrices.empty()) {
    std::vector<double> scratch;
    for (const PowerSgdMatrix& m : plan_.matrices) {
      float* p = round0_.data() + m.p_offset;
      OrthonormalizeColumns(m.rows, m.rank, p, &scratch);
      // Q_local = M^T P^.
      MatMap(round1_.data() + m.q_offset, m.cols, m.rank).noalias() =
          ConstMatMap(mats_.data() + m.m_offset, m.rows, m.cols).transpose() *
          ConstMatMap(p, m.rows, m.rank);
    }
    q_local_ = round1_;
    mats_.clear();
    mats_.shrink_to_fit();
  } else if (round == 1) {
    owner_->StoreWarmStarts(plan_, round1_);
  }
  ++rounds_done_;
  return absl::OkStatus();
}

absl::Status PowerSgdState::Reconstruct(const std::vector<float>& q,
                                        const float* values,
                                        absl::Span<float> dense) const {
  if (rounds_done_ != num_rounds()) {
    return absl::FailedPreconditionError(
        "powersgd: reconstruct before the last round ended");
  }
  if (static_cast<int64_t>(dense.size()) != d_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "powersgd: dense has ", dense.size(), " elements, the bucket ", d_));
  }
  RowMat padded;
  for (const PowerSgdMatrix& m : plan_.matrices) {
    const ConstMatMap p(round0_.data() + m.p_offset, m.rows, m.rank);
    const ConstMatMap qm(q.data() + m.q_offset, m.cols, m.rank);
    if (m.count == m.rows * m.cols) {
      MatMap(dense.data() + m.offset, m.rows, m.cols).noalias() +=
          p * qm.transpose();
    } else {  // Near-square view with padding: drop the padded tail.
      padded.noalias() = p * qm.transpose();
      const float* src = padded.data();
      float* dst = dense.data() + m.offset;
      for (int64_t i = 0; i < m.count; ++i) dst[i] += src[i];
    }
  }
  for (const PowerSgdRange& r : plan_.dense) {
    float* dst = dense.data() + r.offset;
    for (int64_t i = 0; i < r.count; ++i) dst[i] += values[i];
    values += r.count;
  }
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

std::vector<float> PowerSgdStartQ(uint64_t seed, const std::string& name,
                                  int64_t cols, int64_t rank) {
  std::vector<float> q(std::max<int64_t>(0, cols * rank));
  FillNormal(kernels::MixSeed(seed, Fnv1a(name)), &q);
  return q;
}

absl::StatusOr<PowerSgdRoundSizes> PowerSgdRoundSizesFor(
    int64_t d, absl::Span<const Segment> segments,
    const CompressorOptions& options, uint64_t step) {
  const bool compress = step >= static_cast<uint64_t>(std::max<int64_t>(
                                    0, options.powersgd_start_step));
  absl::StatusOr<PowerSgdPlan> plan =
      MakePowerSgdPlan(d, segments, "", options, compress);
  if (!plan.ok()) return plan.status();
  PowerSgdRoundSizes sizes;
  sizes.num_rounds = plan->matrices.empty() ? 1 : 2;
  sizes.round0 = plan->p_floats + plan->dense_floats;
  sizes.round1 = plan->q_floats;
  sizes.uncompressed = plan->dense_floats;
  sizes.matrices = static_cast<int64_t>(plan->matrices.size());
  return sizes;
}

std::unique_ptr<Compressor> MakePowerSgdCompressor(
    double cf, const CompressorOptions& options) {
  return std::make_unique<PowerSgdCompressor>(cf, options);
}

}  // namespace terse
