#include "efcp/validate.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace terse {
namespace efcp {
namespace {

constexpr int64_t kMaxWindow = 16384;

inline uint32_t NonFiniteFlag(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return ((bits >> 23) & 0xffu) == 0xffu;
}

}  // namespace

absl::Status CheckFiniteVector(absl::Span<const float> v, int64_t dim,
                               absl::string_view what) {
  if (static_cast<int64_t>(v.size()) != dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "efcp: ", what, " has ", v.size(), " entries, expected ", dim));
  }
  uint32_t bad = 0;
  for (size_t i = 0; i < v.size(); ++i) bad |= NonFiniteFlag(v[i]);
  if (bad == 0) return absl::OkStatus();
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("efcp: ", what, "[", i, "] = ", v[i], " is not finite"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckFiniteSum(const float* a, const float* b, int64_t n,
                            absl::string_view what) {
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad |= NonFiniteFlag(a[i] + b[i]);
  if (bad == 0) return absl::OkStatus();
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i] + b[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "efcp: ", what, "[", i, "] is not finite (entry ", b[i],
          ", accumulated with the error-feedback buffer ", a[i], ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckLength(int64_t size, int64_t dim, absl::string_view what) {
  if (size != dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "efcp: ", what, " has ", size, " entries, expected ", dim));
  }
  return absl::OkStatus();
}

absl::Status CheckOutputVector(absl::Span<const float> out, int64_t dim,
                               absl::string_view what) {
  return CheckLength(static_cast<int64_t>(out.size()), dim, what);
}

absl::Status CheckShape(int64_t dim, int64_t window) {
  if (dim < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("efcp: dim must be >= 1, got ", dim));
  }
  if (dim >= (int64_t{1} << 32)) {
    return absl::InvalidArgumentError(
        absl::StrCat("efcp: dim must be < 2^32, got ", dim));
  }
  if (window < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("efcp: window (m) must be >= 1, got ", window));
  }
  if (window > kMaxWindow) {
    return absl::InvalidArgumentError(absl::StrCat(
        "efcp: window (m) must be <= ", kMaxWindow, ", got ", window));
  }
  return absl::OkStatus();
}

absl::Status CheckDenseWindowSize(int64_t dim, int64_t window) {
  if (window * dim > (int64_t{1} << 40)) {
    return absl::InvalidArgumentError(absl::StrCat("efcp: a dense window of ",
                                                   window, " x ", dim,
                                                   " floats is too large"));
  }
  return absl::OkStatus();
}

absl::Status CheckPositive(double value, absl::string_view what) {
  if (!(std::isfinite(value) && value > 0.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("efcp: ", what, " must be finite and > 0, got ", value));
  }
  return absl::OkStatus();
}

absl::Status CheckDensity(double density) {
  if (!(density > 0.0 && density <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("efcp: density must be in (0, 1], got ", density));
  }
  return absl::OkStatus();
}

}  // namespace efcp
}  // namespace terse
