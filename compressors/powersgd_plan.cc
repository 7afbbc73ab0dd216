#include "compressors/powersgd_plan.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compressors/powersgd_compressor.h"

namespace terse {
namespace {

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

}  // namespace

absl::StatusOr<PowerSgdPlan> MakePowerSgdPlan(
    int64_t d, absl::Span<const Segment> segments, const std::string& state_key,
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
  PowerSgdPlan plan;
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
    PowerSgdMatrix m;
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

void OrthonormalizeColumns(int64_t rows, int64_t r, float* p,
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

}  // namespace terse
