#include "efcp/gradient_momentum.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "efcp/state_blob.h"
#include "efcp/validate.h"

namespace terse {
namespace efcp {

absl::StatusOr<std::unique_ptr<GradientMomentum>> GradientMomentum::Create(
    std::unique_ptr<Preconditioner> inner, double beta1) {
  if (inner == nullptr) {
    return absl::InvalidArgumentError(
        "efcp gradient momentum: null preconditioner");
  }
  if (!(beta1 >= 0.0 && beta1 < 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "efcp gradient momentum: beta1 = ", beta1, " (accepted: [0, 1))"));
  }
  return std::unique_ptr<GradientMomentum>(
      new GradientMomentum(std::move(inner), beta1));
}

GradientMomentum::GradientMomentum(std::unique_ptr<Preconditioner> inner,
                                   double beta1)
    : inner_(std::move(inner)),
      beta1_(beta1),
      average_(static_cast<size_t>(inner_->dim()), 0.0f),
      next_(static_cast<size_t>(inner_->dim())) {}

absl::Status GradientMomentum::Step(absl::Span<const float> grad,
                                    absl::Span<float> update) {
  const int64_t d = dim();
  TERSE_RETURN_IF_ERROR(CheckFiniteVector(grad, d, "gradient"));
  TERSE_RETURN_IF_ERROR(CheckOutputVector(update, d, "update"));
  const float keep = static_cast<float>(beta1_);
  const float take = static_cast<float>(1.0 - beta1_);
  for (int64_t i = 0; i < d; ++i) {
    next_[i] = keep * average_[i] + take * grad[i];
  }
  TERSE_RETURN_IF_ERROR(CheckFiniteVector(next_, d, "gradient average"));
  // Both inner calls validate only what was checked above, so after the
  // first succeeds the second cannot fail on the input.
  TERSE_RETURN_IF_ERROR(inner_->Step(grad, update));
  average_.swap(next_);
  return inner_->Apply(average_, update);
}

absl::Status GradientMomentum::Apply(absl::Span<const float> x,
                                     absl::Span<float> out) const {
  return inner_->Apply(x, out);
}

MemoryUsage GradientMomentum::memory() const {
  MemoryUsage usage = inner_->memory();
  usage.scratch +=
      static_cast<int64_t>((average_.size() + next_.size()) * sizeof(float));
  return usage;
}

std::string GradientMomentum::SaveState() const {
  BlobWriter writer("gradient_momentum");
  writer.PutI64(dim());
  writer.PutArray(average_.data(), dim());
  writer.PutBytes(inner_->SaveState());
  return writer.Release();
}

absl::Status GradientMomentum::RestoreState(absl::string_view blob) {
  TERSE_ASSIGN_OR_RETURN(BlobReader reader,
                         BlobReader::Open(blob, "gradient_momentum"));
  const int64_t d = dim();
  TERSE_ASSIGN_OR_RETURN(int64_t blob_dim, reader.GetI64());
  if (blob_dim != d) {
    return absl::InvalidArgumentError(
        absl::StrCat("efcp gradient momentum: state for dim ", blob_dim,
                     " (this one ", d, ")"));
  }
  TERSE_ASSIGN_OR_RETURN(const char* bytes, reader.GetArray<float>(d));
  std::vector<float> average(static_cast<size_t>(d));
  BlobReader::CopyArray(bytes, d, average.data());
  TERSE_RETURN_IF_ERROR(
      CheckFiniteVector(average, d, "gradient average in state"));
  TERSE_ASSIGN_OR_RETURN(absl::string_view inner, reader.GetBytes());
  TERSE_RETURN_IF_ERROR(reader.ExpectEnd());
  TERSE_RETURN_IF_ERROR(inner_->RestoreState(inner));
  average_ = std::move(average);
  return absl::OkStatus();
}

}  // namespace efcp
}  // namespace terse
