#include "efcp/dense_mfac.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "efcp/state_blob.h"
#include "efcp/validate.h"
#include "efcp/window_state.h"

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

// Blob: dim, window, steps, the written rows (min(steps, m)), the Gram
// matrix (window_state.h).
std::string DenseMfac::SaveState() const {
  BlobWriter writer(name());
  writer.PutI64(dim());
  writer.PutI64(options_.window);
  writer.PutI64(steps_);
  WriteDenseRows(window_, std::min(steps_, options_.window), &writer);
  WriteGram(system_.gram(), &writer);
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
  std::vector<double> norms2;
  TERSE_ASSIGN_OR_RETURN(const char* rows,
                         ReadDenseRows(&reader, filled, d, &norms2));
  TERSE_ASSIGN_OR_RETURN(Eigen::MatrixXd gram, ReadGram(&reader, m));
  TERSE_RETURN_IF_ERROR(reader.ExpectEnd());
  TERSE_RETURN_IF_ERROR(CheckGramMatchesRows(gram, norms2));
  TERSE_RETURN_IF_ERROR(system_.SetGram(gram));
  // Nothing below can fail.
  CommitDenseRows(rows, filled, &window_);
  steps_ = steps;
  return absl::OkStatus();
}

}  // namespace efcp
}  // namespace terse
