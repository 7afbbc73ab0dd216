#include "engine/device_powersgd.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "compressors/powersgd_compressor.h"
#include "compressors/powersgd_plan.h"

namespace terse {

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

void DevicePowerSgd::ImportWarm(
    std::map<std::string, std::vector<float>> warm) {
  for (auto& [key, q] : warm) {
    // The restored Q replaces the device's: the next step uploads it.
    auto it = warm_.find(key);
    if (it != warm_.end()) it->second.valid = false;
    imported_[key] = std::move(q);
  }
}

absl::StatusOr<std::map<std::string, std::vector<float>>>
DevicePowerSgd::ExportWarm(Stream* copy) {
  std::map<std::string, std::vector<float>> out = imported_;
  bool any = false;
  for (const auto& [key, w] : warm_) any = any || w.valid;
  if (!any) return out;
  if (copy == nullptr) {
    return absl::InvalidArgumentError(
        "powersgd: exporting warm starts needs a stream of their device");
  }
  // The steps' copies into the warm Q's are done once the last step's work
  // is; the engine's stream is not this thread's to synchronise.
  TERSE_RETURN_IF_ERROR(stepped_->HostWait());
  for (const auto& [key, w] : warm_) {
    if (!w.valid) continue;
    std::vector<float>& q = out[key];
    q.resize(w.q.bytes() / 4);
    TERSE_RETURN_IF_ERROR(copy->Memcpy(q.data(), w.q.data(), w.q.bytes()));
  }
  TERSE_RETURN_IF_ERROR(copy->Synchronize());
  return out;
}

absl::Status DevicePowerSgd::UploadStarts(DeviceRuntime* runtime, int ordinal,
                                          Stream* stream) {
  std::vector<std::pair<Warm*, const Matrix*>> starts;
  int64_t floats = 0;
  for (const Matrix& m : matrices_) {
    Warm& w = warm_[m.warm_key];
    const int64_t bytes = m.cols * m.rank * 4;
    if (w.q.data() != nullptr && w.q.bytes() != bytes) {
      // A key's size is fixed by its shape and this instance's rank, so
      // this does not happen; should it, the old Q may still be read.
      TERSE_RETURN_IF_ERROR(stream->Synchronize());
      w = Warm();
    }
    if (w.q.data() == nullptr) {
      TERSE_ASSIGN_OR_RETURN(w.q,
                             DeviceBuffer::Allocate(runtime, ordinal, bytes));
      w.valid = false;
    }
    if (w.valid) continue;
    starts.emplace_back(&w, &m);
    floats += m.cols * m.rank;
  }
  if (starts.empty()) return absl::OkStatus();
  // The previous uploads read staged_ until the stream ran them.
  if (uploaded_ == nullptr) {
    TERSE_ASSIGN_OR_RETURN(uploaded_, runtime->CreateEvent(ordinal));
  }
  TERSE_RETURN_IF_ERROR(uploaded_->HostWait());
  staged_.resize(floats);
  int64_t at = 0;
  for (const auto& [w, m] : starts) {
    const int64_t n = m->cols * m->rank;
    auto it = imported_.find(m->warm_key);
    if (it != imported_.end() && it->second.size() == static_cast<size_t>(n)) {
      std::copy(it->second.begin(), it->second.end(), staged_.begin() + at);
    } else {
      const std::vector<float> start =
          PowerSgdStartQ(seed_, m->name, m->cols, m->rank);
      std::copy(start.begin(), start.end(), staged_.begin() + at);
    }
    TERSE_RETURN_IF_ERROR(
        stream->Memcpy(w->q.data(), staged_.data() + at, n * 4));
    at += n;
  }
  return stream->Record(uploaded_.get());
}

absl::StatusOr<int64_t> DevicePowerSgd::Step(
    DeviceOps* ops, DeviceRuntime* runtime, int ordinal, Stream* stream,
    float* a, float* local, int64_t step, const Allreduce& allreduce,
    const std::function<absl::Status()>& with_local) {
  if (runtime_ == nullptr) {
    TERSE_ASSIGN_OR_RETURN(stepped_, runtime->CreateEvent(ordinal));
    runtime_ = runtime;
    ordinal_ = ordinal;
  } else if (runtime != runtime_ || ordinal != ordinal_) {
    return absl::FailedPreconditionError(
        absl::StrCat("powersgd ", state_key_,
                     ": a step on another device than the first"
                     " (its warm starts and buffers live there)"));
  }
  TERSE_RETURN_IF_ERROR(
      Plan(step >= std::max<int64_t>(0, options_.powersgd_start_step)));
  TERSE_RETURN_IF_ERROR(
      Grow(runtime, ordinal, stream, p_floats_ + dense_floats_, &round0_));
  TERSE_RETURN_IF_ERROR(Grow(runtime, ordinal, stream, q_floats_, &round1_));
  TERSE_RETURN_IF_ERROR(Grow(runtime, ordinal, stream, q_floats_, &q_local_));
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

  // The start Q's: each key's warm Q on the device (last step's summed Q),
  // or the start uploaded into it.
  TERSE_RETURN_IF_ERROR(UploadStarts(runtime, ordinal, stream));

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
        ops->MatMul(stream, matrix_of(m), warm_[m.warm_key].q.as<float>(),
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
    // Orthonormalise the summed P's, in stream order on the device.
    for (const Matrix& m : matrices_) {
      TERSE_RETURN_IF_ERROR(ops->OrthonormalizeColumns(
          stream, round0 + m.p_offset, m.rows, m.rank));
    }
    // Round 1: Q = M^T P^, this rank's kept, then summed.
    for (const Matrix& m : matrices_) {
      TERSE_RETURN_IF_ERROR(
          ops->MatMulTransposed(stream, matrix_of(m), round0 + m.p_offset,
                                round1 + m.q_offset, m.rows, m.cols, m.rank));
    }
    TERSE_RETURN_IF_ERROR(stream->Memcpy(q_local, round1, q_floats_ * 4));
    TERSE_RETURN_IF_ERROR(allreduce(round1, q_floats_));
    bytes += q_floats_ * 4;
    // The summed Q's are next step's warm starts, kept on the device.
    for (const Matrix& m : matrices_) {
      Warm& w = warm_[m.warm_key];
      TERSE_RETURN_IF_ERROR(
          stream->Memcpy(w.q.data(), round1 + m.q_offset, m.cols * m.rank * 4));
      w.valid = true;
      imported_.erase(m.warm_key);
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
  TERSE_RETURN_IF_ERROR(stream->Record(stepped_.get()));
  return bytes;
}

}  // namespace terse
