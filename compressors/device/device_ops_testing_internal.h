// The pieces device_ops_testing.cc and device_ops_testing_quantizers.cc
// share: inputs, a device fixture, bitwise comparisons, and the quantizers'
// check. Private to these files; testing only.
#ifndef TERSE_COMPRESSORS_DEVICE_DEVICE_OPS_TESTING_INTERNAL_H_
#define TERSE_COMPRESSORS_DEVICE_DEVICE_OPS_TESTING_INTERNAL_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "compressors/device/device_ops.h"
#include "device/runtime.h"

namespace terse {
namespace testing {
namespace device_ops_testing_internal {

// Gradient-like values with exact ties and both zeros.
inline std::vector<float> Values(int64_t d, uint32_t seed) {
  std::vector<float> x(d);
  uint32_t s = seed;
  for (int64_t i = 0; i < d; ++i) {
    s ^= s << 13;
    s ^= s >> 17;
    s ^= s << 5;
    x[i] = static_cast<float>(static_cast<int32_t>(s)) * 4.6566e-10f *
           (1 + static_cast<float>(i % 7));
    if (i % 97 == 0) x[i] = 0.5f;  // Ties.
    if (i % 101 == 0) x[i] = -0.0f;
  }
  return x;
}

class Fixture {
 public:
  Fixture(DeviceRuntime* runtime, int ordinal)
      : runtime_(runtime), ordinal_(ordinal) {}

  absl::Status Init() {
    TERSE_ASSIGN_OR_RETURN(stream_, runtime_->CreateStream(ordinal_));
    TERSE_ASSIGN_OR_RETURN(ops_, MakeDeviceOps(runtime_, ordinal_));
    return absl::OkStatus();
  }
  // A device copy of `host` (kept alive by the fixture).
  template <typename T>
  absl::StatusOr<T*> Upload(const std::vector<T>& host) {
    TERSE_ASSIGN_OR_RETURN(
        DeviceBuffer b,
        DeviceBuffer::Allocate(runtime_, ordinal_,
                               static_cast<int64_t>(host.size() * sizeof(T))));
    TERSE_RETURN_IF_ERROR(stream_->Memcpy(b.data(), host.data(), b.bytes()));
    TERSE_RETURN_IF_ERROR(stream_->Synchronize());
    T* p = b.as<T>();
    buffers_.push_back(std::move(b));
    return p;
  }
  template <typename T>
  absl::StatusOr<std::vector<T>> Download(const T* device, int64_t n) {
    std::vector<T> host(n);
    TERSE_RETURN_IF_ERROR(stream_->Memcpy(host.data(), device, n * sizeof(T)));
    TERSE_RETURN_IF_ERROR(stream_->Synchronize());
    return host;
  }
  Stream* stream() { return stream_.get(); }
  DeviceOps* ops() { return ops_.get(); }

 private:
  DeviceRuntime* runtime_;
  int ordinal_;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<DeviceOps> ops_;
  std::vector<DeviceBuffer> buffers_;
};

template <typename T>
absl::Status SameBits(const std::vector<T>& got, const std::vector<T>& want,
                      const std::string& what) {
  if (got.size() != want.size()) {
    return absl::InternalError(
        absl::StrCat(what, ": ", got.size(), " elements, want ", want.size()));
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      return absl::InternalError(
          absl::StrCat(what, "[", i, "]: device ", got[i], ", cpu ", want[i]));
    }
  }
  return absl::OkStatus();
}

// Same bits, or both NaN: a NaN made by the GPU's arithmetic carries the
// canonical payload, the CPU's the operand's.
inline absl::Status SameBitsOrNan(const std::vector<float>& got,
                                  const std::vector<float>& want,
                                  const std::string& what) {
  if (got.size() != want.size()) return SameBits(got, want, what);
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) && std::isnan(want[i])) continue;
    if (std::memcmp(&got[i], &want[i], 4) != 0) {
      return absl::InternalError(
          absl::StrCat(what, "[", i, "]: device ", got[i], ", cpu ", want[i]));
    }
  }
  return absl::OkStatus();
}

// Values over 61 binary orders of magnitude: their sums in double round,
// so that a summation order other than kernels::FixedOrderSum's shows.
inline std::vector<float> WideValues(int64_t d, uint32_t seed) {
  std::vector<float> x = Values(d, seed);
  for (int64_t i = 0; i < d; ++i) {
    x[i] = std::ldexp(x[i], static_cast<int>((i * 37) % 61) - 30);
  }
  return x;
}

// A block with an infinity, one with a NaN, and finite ones (blocks of 100).
inline std::vector<float> NonFiniteValues() {
  std::vector<float> x = Values(300, 3);
  x[150] = -std::numeric_limits<float>::infinity();
  x[250] = std::numeric_limits<float>::quiet_NaN();
  return x;
}

// EF-signSGD and QSGD, whose scales and norms are sums in the fixed order of
// kernels/fixed_order_sum.h, against the CPU compressors (see
// device_ops_testing_quantizers.cc); `x` and `y0` of at least 5000 values.
absl::Status CheckQuantizers(Fixture* f, const std::vector<float>& x,
                             const std::vector<float>& y0);

}  // namespace device_ops_testing_internal
}  // namespace testing
}  // namespace terse

#endif  // TERSE_COMPRESSORS_DEVICE_DEVICE_OPS_TESTING_INTERNAL_H_
