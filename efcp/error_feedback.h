// Error-feedback top-k sparsification of a gradient stream (EFCP):
//   a = e + g;  c = the k entries of a largest in magnitude (exact top-k from
//   compressors/kernels, ties to the lower index);  e = a - c.
// The values of c are rounded to the window's storage precision before e is
// formed, and the window may keep fewer than k of them (a block16 row whose
// markers leave no slot for its smallest entries, SparseWindow::Fit): only
// the entries kept are subtracted, so e + (what the window stores) = a
// exactly, and over any run e_T + sum_t c_t = sum_t g_t up to the float
// rounding of a = e + g.
// Holds the d-float error buffer e (zero at the start). Not thread-safe.
#ifndef TERSE_EFCP_ERROR_FEEDBACK_H_
#define TERSE_EFCP_ERROR_FEEDBACK_H_

#include <cstdint>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/types/span.h"

namespace terse {
namespace efcp {

class ErrorFeedbackTopK {
 public:
  // 1 <= k <= dim < 2^32 (checked by the owner's Create). `bf16_values`
  // rounds the kept values to bf16 (for a kBlock16Bf16 window).
  ErrorFeedbackTopK(int64_t dim, int64_t k, bool bf16_values, int num_threads);

  int64_t dim() const { return static_cast<int64_t>(error_.size()); }
  int64_t k() const { return k_; }

  // InvalidArgument unless g has dim() entries and every e + g is finite.
  absl::Status Check(absl::Span<const float> g) const;

  // Trims the k selected entries (ascending indices, rounded values) in
  // place to those the window will store, returning how many.
  using FitFn = absl::FunctionRef<int64_t(uint32_t*, float*, int64_t)>;

  // One step on a gradient that passed Check: selects the top k of e + g,
  // lets `fit` trim them, writes the n kept indices (ascending) and values
  // (rounded), subtracts exactly those from e, and returns n.
  int64_t Compress(const float* g, uint32_t* indices, float* values, FitFn fit);

  const std::vector<float>& error() const { return error_; }
  std::vector<float>* mutable_error() { return &error_; }

  // k = max(1, floor(density * dim)) for 0 < density <= 1.
  static int64_t KeptEntries(double density, int64_t dim);

 private:
  int64_t k_;
  bool bf16_values_;
  int num_threads_;
  std::vector<float> error_;
};

}  // namespace efcp
}  // namespace terse

#endif  // TERSE_EFCP_ERROR_FEEDBACK_H_
