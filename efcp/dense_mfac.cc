#include "efcp/dense_mfac.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "efcp/state_blob.h"
#include "efcp/validate.h"

namespace terse {
namespace efcp {

absl::StatusOr<std::unique_ptr<DenseMfac>> DenseMfac::Create(
    const DenseMfacOptions& options) {
  TERSE_RETURN_IF_ERROR(CheckShape(options.dim, options.window));
  TERSE_RETURN_IF_ERROR(CheckPositive(options.damp, "damp (lambda)"));
  if (options.refresh_interval < -1) {
    return absl::InvalidArgumentError(
        "efcp: refresh_interval must be -1 (= window), 0 (never) or > 0");
  }
  return std::unique_ptr<DenseMfac>(new DenseMfac(options));
}

DenseMfac::DenseMfac(const DenseMfacOptions& options)
    : options_(options),
      window_(options.window, options.dim, options.num_threads),
      system_(options.window, options.damp,
              options.refresh_interval < 0 ? options.window
                                           : options.refresh_interval) {}

absl::Status DenseMfac::Step(absl::Span<const float> grad,
                             absl::Span<float> update) {
  TERSE_RETURN_IF_ERROR(CheckFiniteVector(grad, dim(), "gradient"));
  TERSE_RETURN_IF_ERROR(CheckOutputVector(update, dim(), "update"));
  const int64_t slot = steps_ % options_.window;
  window_.SetRow(slot, grad.data());
  std::vector<double> dots(options_.window);
  window_.Dots(grad.data(), dots.data());
  system_.ReplaceRow(slot, dots.data());
  system_.ApplyInverseToRow(window_, slot, update.data());
  ++steps_;
  return absl::OkStatus();
}

absl::Status DenseMfac::Apply(absl::Span<const float> x,
                              absl::Span<float> out) const {
  TERSE_RETURN_IF_ERROR(CheckFiniteVector(x, dim(), "x"));
  TERSE_RETURN_IF_ERROR(CheckOutputVector(out, dim(), "out"));
  std::vector<double> dots(options_.window);
  window_.Dots(x.data(), dots.data());
  std::memcpy(out.data(), x.data(), sizeof(float) * dim());
  system_.ApplyInverse(window_, dots.data(), out.data());
  return absl::OkStatus();
}

MemoryUsage DenseMfac::memory() const {
  MemoryUsage usage;
  usage.window = window_.memory_bytes();
  usage.small = system_.memory_bytes();
  return usage;
}

// Blob: dim, window, steps, filled rows (min(steps, m)) as floats, then the
// m x m Gram matrix (column-major doubles).
std::string DenseMfac::SaveState() const {
  BlobWriter writer(name());
  const int64_t m = options_.window;
  const int64_t filled = std::min(steps_, m);
  writer.PutI64(dim());
  writer.PutI64(m);
  writer.PutI64(steps_);
  for (int64_t i = 0; i < filled; ++i) writer.PutArray(window_.row(i), dim());
  writer.PutArray(system_.gram().data(), m * m);
  return writer.Release();
}

absl::Status DenseMfac::RestoreState(absl::string_view blob) {
  TERSE_ASSIGN_OR_RETURN(BlobReader reader, BlobReader::Open(blob, name()));
  const int64_t m = options_.window;
  const int64_t d = dim();
  TERSE_ASSIGN_OR_RETURN(int64_t blob_dim, reader.GetI64());
  TERSE_ASSIGN_OR_RETURN(int64_t blob_m, reader.GetI64());
  TERSE_ASSIGN_OR_RETURN(int64_t steps, reader.GetI64());
  if (blob_dim != d || blob_m != m) {
    return absl::InvalidArgumentError(absl::StrCat(
        "efcp: dense_mfac state is for dim ", blob_dim, ", window ", blob_m,
        "; this one has dim ", d, ", window ", m));
  }
  if (steps < 0) {
    return absl::InvalidArgumentError("efcp: negative step count in state");
  }
  const int64_t filled = std::min(steps, m);
  TERSE_ASSIGN_OR_RETURN(const char* rows, reader.GetArray<float>(filled * d));
  TERSE_ASSIGN_OR_RETURN(const char* gram_bytes,
                         reader.GetArray<double>(m * m));
  TERSE_RETURN_IF_ERROR(reader.ExpectEnd());

  Eigen::MatrixXd gram(m, m);
  BlobReader::CopyArray(gram_bytes, m * m, gram.data());
  // Consistency: unwritten slots are zero, the diagonal matches the rows.
  for (int64_t i = 0; i < m; ++i) {
    double norm2 = 0;
    if (i < filled) {
      for (int64_t j = 0; j < d; ++j) {
        const float v = BlobReader::Element<float>(rows, i * d + j);
        if (!std::isfinite(v)) {
          return absl::InvalidArgumentError(
              "efcp: dense_mfac state holds a non-finite gradient entry");
        }
        norm2 += static_cast<double>(v) * v;
      }
    } else if (gram.row(i).cwiseAbs().maxCoeff() != 0.0) {
      return absl::InvalidArgumentError(
          "efcp: dense_mfac state has Gram entries for unwritten slots");
    }
    if (!(std::abs(gram(i, i) - norm2) <= 1e-6 * norm2)) {
      return absl::InvalidArgumentError(
          "efcp: dense_mfac state's Gram matrix does not match its rows");
    }
  }
  TERSE_RETURN_IF_ERROR(system_.SetGram(gram));
  // Nothing below can fail.
  window_.Clear();
  for (int64_t i = 0; i < filled; ++i) {
    BlobReader::CopyArray(rows + i * d * static_cast<int64_t>(sizeof(float)), d,
                          window_.mutable_row(i));
  }
  steps_ = steps;
  return absl::OkStatus();
}

}  // namespace efcp
}  // namespace terse
