#include "efcp/error_feedback.h"

#include <algorithm>
#include <cmath>

#include "common/half.h"
#include "compressors/kernels/sparse_ops.h"
#include "compressors/kernels/topk.h"
#include "efcp/validate.h"

namespace terse {
namespace efcp {

ErrorFeedbackTopK::ErrorFeedbackTopK(int64_t dim, int64_t k, bool bf16_values,
                                     int num_threads)
    : k_(k),
      bf16_values_(bf16_values),
      num_threads_(num_threads),
      error_(static_cast<size_t>(dim), 0.0f) {}

int64_t ErrorFeedbackTopK::KeptEntries(double density, int64_t dim) {
  const double exact = density * static_cast<double>(dim);
  // Guard against density * dim landing a hair below an integer.
  int64_t k = static_cast<int64_t>(std::floor(exact * (1 + 1e-12)));
  return std::min(dim, std::max<int64_t>(1, k));
}

absl::Status ErrorFeedbackTopK::Check(absl::Span<const float> g) const {
  if (static_cast<int64_t>(g.size()) != dim()) {
    return CheckLength(static_cast<int64_t>(g.size()), dim(), "gradient");
  }
  return CheckFiniteSum(error_.data(), g.data(), dim(), "gradient");
}

int64_t ErrorFeedbackTopK::Compress(const float* g, uint32_t* indices,
                                    float* values, FitFn fit) {
  float* e = error_.data();
  const int64_t d = dim();
  for (int64_t i = 0; i < d; ++i) e[i] += g[i];
  kernels::TopK(e, d, k_, indices, num_threads_);
  kernels::Gather(e, indices, k_, values);
  if (bf16_values_) {
    for (int64_t j = 0; j < k_; ++j) {
      values[j] = BFloat16ToFloat(kernels::ToBlock16Value(values[j]));
    }
  }
  const int64_t n = fit(indices, values, k_);
  // a - c: exact in float (zero in fp32, the bf16 remainder otherwise).
  for (int64_t j = 0; j < n; ++j) e[indices[j]] -= values[j];
  return n;
}

}  // namespace efcp
}  // namespace terse
