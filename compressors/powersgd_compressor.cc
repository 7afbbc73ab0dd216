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

// Orthonormalises the r columns of the rows x r row-major matrix p in place
// (modified Gram-Schmidt in double; `basis` is scratch).
void Orthonormalize(int64_t rows, int64_t r, float* p,
                    std::vector<double>* basis) {
  basis->assign(rows * r, 0.0);  // Column-major: column c at c * rows.
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t c = 0; c < r; ++c) (*basis)[c * rows + i] = p[i * r + c];
  }
  for (int64_t c = 0; c < r; ++c) {
    double* v = basis->data() + c * rows;
    for (int64_t prev = 0; prev < c; ++prev) {
      const double* b = basis->data() + prev * rows;
      double dot = 0;
      for (int64_t i = 0; i < rows; ++i) dot += v[i] * b[i];
      for (int64_t i = 0; i < rows; ++i) v[i] -= dot * b[i];
    }
    double norm = 0;
    for (int64_t i = 0; i < rows; ++i) norm += v[i] * v[i];
    norm = std::sqrt(norm);
    // A column that vanished (rank-deficient sum) or is not finite: zero.
    const bool keep = std::isfinite(norm) && norm > 1e-30;
    for (int64_t i = 0; i < rows; ++i) v[i] = keep ? v[i] / norm : 0.0;
  }
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t c = 0; c < r; ++c) {
      p[i * r + c] = static_cast<float>((*basis)[c * rows + i]);
    }
  }
}

// One compressed matrix of a bucket.
struct MatrixPlan {
  std::string name;      // Segment name (seeds the start Q).
  std::string warm_key;  // Warm-start key.
  int64_t offset = 0;    // In the bucket.
  int64_t count = 0;     // Bucket elements (< rows * cols: zero padded).
  int64_t rows = 0, cols = 0, rank = 0;
  int64_t m_offset = 0;  // In the copy of the matrices (rows * cols each).
  int64_t p_offset = 0;  // In round 0 (rows * rank each).
  int64_t q_offset = 0;  // In round 1 (cols * rank each).
};

struct Range {
  int64_t offset = 0;
  int64_t count = 0;
};

struct Plan {
  std::vector<MatrixPlan> matrices;
  std::vector<Range> dense;  // Uncompressed, ascending, merged.
  int64_t m_floats = 0, p_floats = 0, q_floats = 0, dense_floats = 0;
};

// Whether a rows x cols matrix at rank r is worth compressing.
bool WorthCompressing(int64_t rows, int64_t cols, int64_t r, double min_rate) {
  if (rows <= 0 || cols <= 0 || r <= 0) return false;
  const double dense = static_cast<double>(rows) * static_cast<double>(cols);
  const double factors = static_cast<double>(r) * (rows + cols);
  return factors < dense && dense / factors >= min_rate;
}

// The matrix view of a known shape: rows x cols when the segment is the
// whole tensor of 2+ dimensions, else 0 x 0.
std::pair<int64_t, int64_t> MatrixOf(const Segment& s) {
  if (s.shape.size() < 2 || s.tensor_offset != 0) return {0, 0};
  int64_t product = 1;
  for (int64_t dim : s.shape) {
    if (dim <= 0 || product > s.count / dim) return {0, 0};
    product *= dim;
  }
  if (product != s.count) return {0, 0};
  return {s.shape[0], s.count / s.shape[0]};
}

absl::StatusOr<Plan> MakePlan(int64_t d, absl::Span<const Segment> segments,
                              const std::string& state_key,
                              const CompressorOptions& options, bool compress) {
  const int64_t rank = std::max<int64_t>(1, options.powersgd_rank);
  std::vector<Segment> whole;
  if (segments.empty()) {
    whole.push_back(Segment{state_key, 0, d, 0, {}});
    segments = whole;
  }
  std::vector<const Segment*> order;
  for (const Segment& s : segments) {
    if (s.offset < 0 || s.count < 0 || s.tensor_offset < 0 ||
        s.offset > d - s.count) {
      return absl::InvalidArgumentError(
          absl::StrCat("powersgd: segment ", s.name, " [", s.offset, ", +",
                       s.count, ") outside the bucket of ", d));
    }
    order.push_back(&s);
  }
  std::stable_sort(
      order.begin(), order.end(),
      [](const Segment* a, const Segment* b) { return a->offset < b->offset; });
  Plan plan;
  auto add_dense = [&plan](int64_t offset, int64_t count) {
    if (count <= 0) return;
    if (!plan.dense.empty() &&
        plan.dense.back().offset + plan.dense.back().count == offset) {
      plan.dense.back().count += count;
    } else {
      plan.dense.push_back({offset, count});
    }
    plan.dense_floats += count;
  };
  int64_t pos = 0;  // Bucket elements before pos are planned.
  for (const Segment* s : order) {
    if (s->offset < pos && s->count > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("powersgd: segment ", s->name, " overlaps another"));
    }
    if (s->count == 0) continue;
    add_dense(pos, s->offset - pos);
    pos = s->offset + s->count;
    MatrixPlan m;
    if (s->shape.empty()) {
      const PowerSgdShape view = PowerSgdShapeFor(s->count, rank);
      m.rows = view.rows;
      m.cols = view.cols;
      m.warm_key = absl::StrCat(state_key, "\x1f", s->name, "\x1f@",
                                s->tensor_offset, "+", s->count);
    } else {
      std::tie(m.rows, m.cols) = MatrixOf(*s);
      m.warm_key = absl::StrCat(state_key, "\x1f", s->name, "\x1f",
                                absl::StrJoin(s->shape, "x"));
    }
    m.rank = std::min({rank, m.rows, m.cols});
    if (!compress || !WorthCompressing(m.rows, m.cols, m.rank,
                                       options.powersgd_min_compression_rate)) {
      add_dense(s->offset, s->count);
      continue;
    }
    m.name = s->name;
    m.offset = s->offset;
    m.count = s->count;
    m.m_offset = plan.m_floats;
    m.p_offset = plan.p_floats;
    m.q_offset = plan.q_floats;
    plan.m_floats += m.rows * m.cols;
    plan.p_floats += m.rows * m.rank;
    plan.q_floats += m.cols * m.rank;
    plan.matrices.push_back(std::move(m));
  }
  add_dense(pos, d - pos);
  return plan;
}

class PowerSgdCompressor;

class PowerSgdState : public RoundState {
 public:
  PowerSgdState(PowerSgdCompressor* owner, Plan plan, int64_t d,
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
  const Plan plan_;
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
    absl::StatusOr<Plan> plan =
        MakePlan(d, ctx.segments, StateKey(ctx), options_, compress);
    if (!plan.ok()) return plan.status();
    // The start Q's: warm where this key's shape was seen, else drawn.
    std::vector<float> q(plan->q_floats);
    std::vector<bool> warm(plan->matrices.size(), false);
    {
      absl::MutexLock lock(&mu_);
      for (size_t i = 0; i < plan->matrices.size(); ++i) {
        const MatrixPlan& m = plan->matrices[i];
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
      const MatrixPlan& m = plan->matrices[i];
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

  void StoreWarmStarts(const Plan& plan, const std::vector<float>& q) {
    absl::MutexLock lock(&mu_);
    for (const MatrixPlan& m : plan.matrices) {
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

PowerSgdState::PowerSgdState(PowerSgdCompressor* owner, Plan plan, int64_t d,
                             absl::Span<const float> input,
                             std::vector<float> q)
    : owner_(owner),
      plan_(std::move(plan)),
      d_(d),
      mats_(plan_.m_floats, 0.0f),
      round0_(plan_.p_floats + plan_.dense_floats),
      round1_(std::move(q)) {
  for (const MatrixPlan& m : plan_.matrices) {
    float* mat = mats_.data() + m.m_offset;
    std::copy(input.begin() + m.offset, input.begin() + m.offset + m.count,
              mat);
    // P = M Q.
    MatMap(round0_.data() + m.p_offset, m.rows, m.rank).noalias() =
        ConstMatMap(mat, m.rows, m.cols) *
        ConstMatMap(round1_.data() + m.q_offset, m.cols, m.rank);
  }
  float* out = round0_.data() + plan_.p_floats;
  for (const Range& r : plan_.dense) {
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
    for (const MatrixPlan& m : plan_.matrices) {
      float* p = round0_.data() + m.p_offset;
      Orthonormalize(m.rows, m.rank, p, &scratch);
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
  for (const MatrixPlan& m : plan_.matrices) {
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
  for (const Range& r : plan_.dense) {
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
  absl::StatusOr<Plan> plan = MakePlan(d, segments, "", options, compress);
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
