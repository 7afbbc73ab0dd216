// Argument checks shared by the EFCP preconditioners. Each returns an
// InvalidArgument Status that names the argument and the first bad entry;
// none of them changes anything.
#ifndef TERSE_EFCP_VALIDATE_H_
#define TERSE_EFCP_VALIDATE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace terse {
namespace efcp {

// v.size() == dim and every entry finite.
absl::Status CheckFiniteVector(absl::Span<const float> v, int64_t dim,
                               absl::string_view what);

// Every a[i] + b[i] (rounded to float) finite; both have n entries. Used by
// the error-feedback variants, whose accumulator e + g must stay finite.
absl::Status CheckFiniteSum(const float* a, const float* b, int64_t n,
                            absl::string_view what);

// size == dim (for buffers whose contents cannot be read here, e.g. device
// memory).
absl::Status CheckLength(int64_t size, int64_t dim, absl::string_view what);

// out.size() == dim.
absl::Status CheckOutputVector(absl::Span<const float> out, int64_t dim,
                               absl::string_view what);

// The shape checks every preconditioner's Create shares: 1 <= dim < 2^32 and
// 1 <= window <= 16384 (the m x m matrices take 2 * 8 * m^2 bytes).
absl::Status CheckShape(int64_t dim, int64_t window);
// For dense windows: window * dim <= 2^40 floats.
absl::Status CheckDenseWindowSize(int64_t dim, int64_t window);
absl::Status CheckPositive(double value, absl::string_view what);
// 0 < density <= 1.
absl::Status CheckDensity(double density);

}  // namespace efcp
}  // namespace terse

#endif  // TERSE_EFCP_VALIDATE_H_
