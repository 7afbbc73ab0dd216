// CudaDenseMfac: DenseMfac (dense_mfac.h) with the m x d window and both
// products (G x, G^T c) on one CUDA device; the m x m system (MfacSystem,
// fp64) stays on the host. Same options and numerics (dots in double,
// combination in float, rows in order).
//
// Step/Apply take DEVICE pointers of dim() floats on `device`; work is
// ordered on `stream` (a cudaStream_t as void*, nullptr = the legacy default
// stream) and each call blocks until it is done. Per step m doubles cross
// the bus each way. Device memory: m*d*4 bytes of window plus O(m).
// State blobs are "dense_mfac" blobs, interchangeable with the CPU class
// (SaveState downloads the written rows).
//
// Errors: bad arguments are InvalidArgument with the state untouched; a
// failing CUDA call is Internal, after which the state is unspecified. Not
// thread-safe.
#ifndef TERSE_EFCP_DENSE_MFAC_CUDA_H_
#define TERSE_EFCP_DENSE_MFAC_CUDA_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "efcp/dense_mfac.h"
#include "efcp/mfac_system.h"
#include "efcp/preconditioner.h"

namespace terse {
namespace efcp {

class CudaDenseMfac final : public Preconditioner {
 public:
  // InvalidArgument as DenseMfac::Create; FailedPrecondition when no CUDA
  // device answers or `device` is out of range; Internal when allocation
  // fails.
  static absl::StatusOr<std::unique_ptr<CudaDenseMfac>> Create(
      const DenseMfacOptions& options, int device = 0, void* stream = nullptr);
  ~CudaDenseMfac() override;

  int64_t dim() const override { return options_.dim; }
  absl::Status Step(absl::Span<const float> grad,
                    absl::Span<float> update) override;
  absl::Status Apply(absl::Span<const float> x,
                     absl::Span<float> out) const override;
  int64_t steps() const override { return steps_; }
  MemoryUsage memory() const override;
  // Empty (a blob RestoreState rejects) when the download fails.
  std::string SaveState() const override;
  absl::Status RestoreState(absl::string_view blob) override;
  absl::string_view name() const override { return "dense_mfac"; }

  const MfacSystem& system() const { return system_; }

 private:
  struct Device;  // device buffers and stream (dense_mfac_cuda.cc)

  explicit CudaDenseMfac(const DenseMfacOptions& options);
  absl::Status CheckFinite(const float* x) const;
  // dots = G x on the device, then copied to host_dots_.
  absl::Status Dots(const float* x) const;
  // out += G^T host_coeffs_ on the device.
  absl::Status Combine(float* out) const;

  DenseMfacOptions options_;
  std::unique_ptr<Device> device_;
  MfacSystem system_;
  mutable std::vector<double> host_dots_;
  mutable std::vector<double> host_coeffs_;
  int64_t steps_ = 0;
};

}  // namespace efcp
}  // namespace terse

#endif  // TERSE_EFCP_DENSE_MFAC_CUDA_H_
