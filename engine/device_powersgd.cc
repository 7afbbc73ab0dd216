#include "engine/device_powersgd.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "compressors/powersgd_compressor.h"

namespace terse {
namespace {

// As the CPU compressor: whether a rows x cols matrix at rank r is worth it.
bool WorthCompressing(int64_t rows, int64_t cols, int64_t r, double min_rate) {
  if (rows <= 0 || cols <= 0 || r <= 0) return false;
  const double dense = static_cast<double>(rows) * static_cast<double>(cols);
  const double factors = static_cast<double>(r) * (rows + cols);
  return factors < dense && dense / factors >= min_rate;
}

// As the CPU compressor: rows x cols of a whole tensor of 2+ dimensions.
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

// As the CPU compressor: modified Gram-Schmidt in double of the r columns
// of the rows x r row-major p; a vanishing or non-finite column becomes 0.
void Orthonormalize(int64_t rows, int64_t r, float* p,
                    std::vector<double>* basis) {
  basis->assign(rows * r, 0.0);
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
    const bool keep = std::isfinite(norm) && norm > 1e-30;
    for (int64_t i = 0; i < rows; ++i) v[i] = keep ? v[i] / norm : 0.0;
  }
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t c = 0; c < r; ++c) {
      p[i * r + c] = static_cast<float>((*basis)[c * rows + i]);
    }
  }
}

}  // namespace

DevicePowerSgd::DevicePowerSgd(const CompressorOptions& options, uint64_t seed,
                               std::string state_key,
                               std::vector<Segment> segments, int64_t count)
    : options_(options),
      seed_(seed),
      state_key_(std::move(state_key)),
      segments_(std::move(segments)),
      count_(count) {}

absl::Status DevicePowerSgd::Plan(bool compress) {
  matrices_.clear();
  dense_.clear();
  p_floats_ = q_floats_ = dense_floats_ = padded_floats_ = 0;
  const int64_t rank = std::max<int64_t>(1, options_.powersgd_rank);
  auto add_dense = [this](int64_t offset, int64_t count) {
    if (count <= 0) return;
    if (!dense_.empty() &&
        dense_.back().offset + dense_.back().count == offset) {
      dense_.back().count += count;
    } else {
      dense_.push_back({offset, count});
    }
    dense_floats_ += count;
  };
  std::vector<const Segment*> order;
  for (const Segment& s : segments_) order.push_back(&s);
  std::stable_sort(
      order.begin(), order.end(),
      [](const Segment* a, const Segment* b) { return a->offset < b->offset; });
  int64_t pos = 0;
  for (const Segment* s : order) {
    if (s->offset < pos && s->count > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("powersgd: segment ", s->name, " overlaps another"));
    }
    if (s->count == 0) continue;
    add_dense(pos, s->offset - pos);
    pos = s->offset + s->count;
    Matrix m;
    if (s->shape.empty()) {
      const PowerSgdShape view = PowerSgdShapeFor(s->count, rank);
      m.rows = view.rows;
      m.cols = view.cols;
      m.warm_key = absl::StrCat(state_key_, "\x1f", s->name, "\x1f@",
                                s->tensor_offset, "+", s->count);
    } else {
      std::tie(m.rows, m.cols) = MatrixOf(*s);
      m.warm_key = absl::StrCat(state_key_, "\x1f", s->name, "\x1f",
                                absl::StrJoin(s->shape, "x"));
    }
    m.rank = std::min({rank, m.rows, m.cols});
    if (!compress ||
        !WorthCompressing(m.rows, m.cols, m.rank,
                          options_.powersgd_min_compression_rate)) {
      add_dense(s->offset, s->count);
      continue;
    }
    m.name = s->name;
    m.offset = s->offset;
    m.count = s->count;
    m.p_offset = p_floats_;
    m.q_offset = q_floats_;
    if (m.count != m.rows * m.cols) {
      m.m_offset = padded_floats_;
      padded_floats_ += m.rows * m.cols;
    }
    p_floats_ += m.rows * m.rank;
    q_floats_ += m.cols * m.rank;
    matrices_.push_back(std::move(m));
  }
  add_dense(pos, count_ - pos);
  return absl::OkStatus();
}

absl::Status DevicePowerSgd::Grow(DeviceRuntime* runtime, int ordinal,
                                  Stream* stream, int64_t floats,
                                  DeviceBuffer* buffer) {
  const int64_t bytes = std::max<int64_t>(floats, 1) * 4;
  if (buffer->data() != nullptr && buffer->bytes() >= bytes) {
    return absl::OkStatus();
  }
  TERSE_RETURN_IF_ERROR(stream->Synchronize());  // Pending work may use it.
  TERSE_ASSIGN_OR_RETURN(*buffer,
                         DeviceBuffer::Allocate(runtime, ordinal, bytes));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> DevicePowerSgd::Step(
    DeviceOps* ops, DeviceRuntime* runtime, int ordinal, Stream* stream,
    float* a, float* local, int64_t step, const Allreduce& allreduce,
    const std::function<absl::Status()>& with_local) {
  TERSE_RETURN_IF_ERROR(
      Plan(step >= std::max<int64_t>(0, options_.powersgd_start_step)));
  TERSE_RETURN_IF_ERROR(
      Grow(runtime, ordinal, stream, p_floats_ + dense_floats_, &round0_));
  TERSE_RETURN_IF_ERROR(Grow(runtime, ordinal, stream, q_floats_, &round1_));
  TERSE_RETURN_IF_ERROR(Grow(runtime, ordinal, stream, q_floats_, &q_local_));
  TERSE_RETURN_IF_ERROR(Grow(runtime, ordinal, stream, q_floats_, &q_start_));
  TERSE_RETURN_IF_ERROR(
      Grow(runtime, ordinal, stream, padded_floats_, &padded_));
  int64_t largest = 0;
  for (const Matrix& m : matrices_) {
    if (m.m_offset >= 0) largest = std::max(largest, m.rows * m.cols);
  }
  TERSE_RETURN_IF_ERROR(Grow(runtime, ordinal, stream, largest, &product_));
  float* round0 = round0_.as<float>();
  float* round1 = round1_.as<float>();
  float* q_local = q_local_.as<float>();
  float* padded = padded_.as<float>();
  float* product = product_.as<float>();

  // The start Q's (warm where this tensor's shape was seen), uploaded; the
  // host copy is not touched again before the stream synchronises below.
  host_q_.assign(q_floats_, 0.0f);
  for (const Matrix& m : matrices_) {
    auto it = warm_.find(m.warm_key);
    if (it != warm_.end() &&
        it->second.size() == static_cast<size_t>(m.cols * m.rank)) {
      std::copy(it->second.begin(), it->second.end(),
                host_q_.begin() + m.q_offset);
    } else {
      const std::vector<float> start =
          PowerSgdStartQ(seed_, m.name, m.cols, m.rank);
      std::copy(start.begin(), start.end(), host_q_.begin() + m.q_offset);
    }
  }
  TERSE_RETURN_IF_ERROR(
      stream->Memcpy(q_start_.data(), host_q_.data(), q_floats_ * 4));

  // Round 0: P = M Q per matrix, then the uncompressed values.
  auto matrix_of = [&](const Matrix& m) -> const float* {
    return m.m_offset >= 0 ? padded + m.m_offset : a + m.offset;
  };
  for (const Matrix& m : matrices_) {
    if (m.m_offset >= 0) {  // Zero padded copy of a near-square view.
      TERSE_RETURN_IF_ERROR(
          stream->Memset(padded + m.m_offset, 0, m.rows * m.cols * 4));
      TERSE_RETURN_IF_ERROR(
          stream->Memcpy(padded + m.m_offset, a + m.offset, m.count * 4));
    }
    TERSE_RETURN_IF_ERROR(
        ops->MatMul(stream, matrix_of(m), q_start_.as<float>() + m.q_offset,
                    round0 + m.p_offset, m.rows, m.cols, m.rank));
  }
  int64_t at = p_floats_;
  for (const Range& r : dense_) {
    TERSE_RETURN_IF_ERROR(
        stream->Memcpy(round0 + at, a + r.offset, r.count * 4));
    at += r.count;
  }
  TERSE_RETURN_IF_ERROR(allreduce(round0, p_floats_ + dense_floats_));
  int64_t bytes = (p_floats_ + dense_floats_) * 4;

  if (!matrices_.empty()) {
    // Orthonormalise the summed P's on the host (the compressed size).
    host_p_.resize(p_floats_);
    TERSE_RETURN_IF_ERROR(
        stream->Memcpy(host_p_.data(), round0, p_floats_ * 4));
    TERSE_RETURN_IF_ERROR(stream->Synchronize());
    std::vector<double> scratch;
    for (const Matrix& m : matrices_) {
      Orthonormalize(m.rows, m.rank, host_p_.data() + m.p_offset, &scratch);
    }
    TERSE_RETURN_IF_ERROR(
        stream->Memcpy(round0, host_p_.data(), p_floats_ * 4));
    // Round 1: Q = M^T P^, this rank's kept, then summed.
    for (const Matrix& m : matrices_) {
      TERSE_RETURN_IF_ERROR(
          ops->MatMulTransposed(stream, matrix_of(m), round0 + m.p_offset,
                                round1 + m.q_offset, m.rows, m.cols, m.rank));
    }
    TERSE_RETURN_IF_ERROR(stream->Memcpy(q_local, round1, q_floats_ * 4));
    TERSE_RETURN_IF_ERROR(allreduce(round1, q_floats_));
    bytes += q_floats_ * 4;
    // The summed Q's are next step's warm starts.
    host_q_.resize(q_floats_);
    TERSE_RETURN_IF_ERROR(
        stream->Memcpy(host_q_.data(), round1, q_floats_ * 4));
    TERSE_RETURN_IF_ERROR(stream->Synchronize());
    for (const Matrix& m : matrices_) {
      const float* begin = host_q_.data() + m.q_offset;
      warm_[m.warm_key].assign(begin, begin + m.cols * m.rank);
    }
  }

  // dst += P^ Q^T per matrix (the padded tail dropped), then the values.
  auto reconstruct = [&](float* dst, const float* q,
                         const float* values) -> absl::Status {
    for (const Matrix& m : matrices_) {
      if (m.m_offset < 0) {
        TERSE_RETURN_IF_ERROR(
            ops->AddOuterProduct(stream, round0 + m.p_offset, q + m.q_offset,
                                 dst + m.offset, m.rows, m.cols, m.rank));
      } else {
        TERSE_RETURN_IF_ERROR(stream->Memset(product, 0, m.rows * m.cols * 4));
        TERSE_RETURN_IF_ERROR(ops->AddOuterProduct(stream, round0 + m.p_offset,
                                                   q + m.q_offset, product,
                                                   m.rows, m.cols, m.rank));
        TERSE_RETURN_IF_ERROR(
            ops->Add(stream, product, dst + m.offset, m.count));
      }
    }
    for (const Range& r : dense_) {
      TERSE_RETURN_IF_ERROR(ops->Add(stream, values, dst + r.offset, r.count));
      values += r.count;
    }
    return absl::OkStatus();
  };
  // This rank's share: P^ Q_local^T and its own uncompressed values (still
  // in a).
  TERSE_RETURN_IF_ERROR(stream->Memset(local, 0, count_ * 4));
  for (const Matrix& m : matrices_) {
    if (m.m_offset < 0) {
      TERSE_RETURN_IF_ERROR(ops->AddOuterProduct(
          stream, round0 + m.p_offset, q_local + m.q_offset, local + m.offset,
          m.rows, m.cols, m.rank));
    } else {
      TERSE_RETURN_IF_ERROR(stream->Memset(product, 0, m.rows * m.cols * 4));
      TERSE_RETURN_IF_ERROR(ops->AddOuterProduct(stream, round0 + m.p_offset,
                                                 q_local + m.q_offset, product,
                                                 m.rows, m.cols, m.rank));
      TERSE_RETURN_IF_ERROR(
          ops->Add(stream, product, local + m.offset, m.count));
    }
  }
  for (const Range& r : dense_) {
    TERSE_RETURN_IF_ERROR(
        ops->Add(stream, a + r.offset, local + r.offset, r.count));
  }
  TERSE_RETURN_IF_ERROR(with_local());
  // The sum over ranks.
  TERSE_RETURN_IF_ERROR(stream->Memset(a, 0, count_ * 4));
  TERSE_RETURN_IF_ERROR(reconstruct(a, round1, round0 + p_floats_));
  return bytes;
}

}  // namespace terse
