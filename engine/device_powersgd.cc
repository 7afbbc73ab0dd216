#include "engine/device_powersgd.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "compressors/powersgd_compressor.h"
#include "compressors/powersgd_plan.h"

namespace terse {
namespace {}  // namespace

DevicePowerSgd::DevicePowerSgd(const CompressorOptions& options, uint64_t seed,
                               std::string state_key,
                               std::vector<Segment> segments, int64_t count)
    : options_(options),
      seed_(seed),
      state_key_(std::move(state_key)),
      segments_(std::move(segments)),
      count_(count) {}

absl::Status DevicePowerSgd::Plan(bool compress) {
  // The CPU compressor's plan, so both paths compress the same matrices
  // with the same warm-start keys; padded copies only for the near-square
  // views whose elements do not fill the matrix.
  TERSE_ASSIGN_OR_RETURN(
      PowerSgdPlan plan,
      MakePowerSgdPlan(count_, segments_, state_key_, options_, compress));
  matrices_.clear();
  dense_ = std::move(plan.dense);
  p_floats_ = plan.p_floats;
  q_floats_ = plan.q_floats;
  dense_floats_ = plan.dense_floats;
  padded_floats_ = 0;
  for (const PowerSgdMatrix& pm : plan.matrices) {
    Matrix m;
    m.name = pm.name;
    m.warm_key = pm.warm_key;
    m.offset = pm.offset;
    m.count = pm.count;
    m.rows = pm.rows;
    m.cols = pm.cols;
    m.rank = pm.rank;
    m.p_offset = pm.p_offset;
    m.q_offset = pm.q_offset;
    if (m.count != m.rows * m.cols) {
      m.m_offset = padded_floats_;
      padded_floats_ += m.rows * m.cols;
    }
    matrices_.push_back(std::move(m));
  }
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
  for (const PowerSgdRange& r : dense_) {
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
      OrthonormalizeColumns(m.rows, m.rank, host_p_.data() + m.p_offset,
                            &scratch);
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
    for (const PowerSgdRange& r : dense_) {
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
  for (const PowerSgdRange& r : dense_) {
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
