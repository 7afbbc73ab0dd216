// CudaSparseMfac: SparseMfac (EFCP) with the error buffer, the sparse window
// and every O(d) or O(m*k) product on one CUDA device; the m x m system
// (MfacSystem, fp64) stays on the host. Same algorithm and options as
// SparseMfac (sparse_mfac.h), through the CUDA kernels of
// compressors/kernels (TopK bit-identical to the CPU one, Gather,
// ScatterAdd, SparseDenseDots, SparseLinearCombination) and a few
// element-wise kernels (efcp_cuda_kernels.h).
//
// Step/Apply take DEVICE pointers of dim() floats on `device`; work is
// ordered on `stream` (a cudaStream_t as void*, nullptr = the legacy default
// stream) and each call blocks until it is done. Per step the k kept
// entries travel to the host (a mirror of the window, used for the
// block16+bf16 encoding and for SaveState) and the m dots and coefficients
// cross the bus: O(k + m) transfers. The m-row products are one kernel
// launch each (SparseDenseDots, SparseLinearCombination over a device array
// of the m row descriptors, rewritten one descriptor when a slot is
// replaced), so a step launches a fixed number of kernels whatever m.
//
// Memory: device = window + error buffer (d floats) + O(k + m) scratch;
// host = the same window again (the mirror) + the m x m matrices. In
// block16+bf16 the device window also keeps, per row, the decode index the
// CUDA kernels use (ceil(d/65536)+1 block starts, built from the host row:
// 68 bytes a row at d = 2^20, so the device copy is 1.002% of dense where
// the host window is <= 1%); memory().window reports the device copy.
// Entries the window cannot hold (block16 markers, sparse_window.h) stay in
// the device error buffer, as on the CPU.
// State blobs are "sparse_mfac" blobs, interchangeable with the CPU class.
//
// Errors: bad arguments are InvalidArgument with the state untouched, as on
// the CPU; a failing CUDA call is Internal, after which the state is
// unspecified. Not thread-safe.
#ifndef TERSE_EFCP_SPARSE_MFAC_CUDA_H_
#define TERSE_EFCP_SPARSE_MFAC_CUDA_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compressors/kernels/sparse_ops.h"
#include "efcp/mfac_system.h"
#include "efcp/preconditioner.h"
#include "efcp/sparse_mfac.h"
#include "efcp/sparse_window.h"

namespace terse {
namespace efcp {

class CudaSparseMfac final : public Preconditioner {
 public:
  // InvalidArgument as SparseMfac::Create; FailedPrecondition when no CUDA
  // device answers or `device` is out of range; Internal when allocation
  // fails.
  static absl::StatusOr<std::unique_ptr<CudaSparseMfac>> Create(
      const SparseMfacOptions& options, int device = 0, void* stream = nullptr);
  ~CudaSparseMfac() override;

  int64_t dim() const override { return options_.dim; }
  absl::Status Step(absl::Span<const float> grad,
                    absl::Span<float> update) override;
  absl::Status Apply(absl::Span<const float> x,
                     absl::Span<float> out) const override;
  int64_t steps() const override { return steps_; }
  // window = the device window; scratch includes the host mirror.
  MemoryUsage memory() const override;
  // Empty (a blob RestoreState rejects) when copying the device error
  // buffer fails.
  std::string SaveState() const override;
  absl::Status RestoreState(absl::string_view blob) override;
  absl::string_view name() const override { return "sparse_mfac"; }

  int64_t k() const { return k_; }
  // The host mirror of the window (what the device holds).
  const SparseWindow& window() const { return mirror_; }
  const MfacSystem& system() const { return system_; }
  // Copies the device error buffer to the host.
  absl::StatusOr<std::vector<float>> error() const;

 private:
  struct Device;  // device buffers and stream (sparse_mfac_cuda.cc)

  CudaSparseMfac(const SparseMfacOptions& options, int64_t k);
  // Copies slot `slot` of the mirror to the device and updates its row view
  // (rows_[slot] and its device copy).
  absl::Status UploadRow(int64_t slot);
  // Copies the descriptor rows_[slot] to the device array the kernels read.
  absl::Status UploadDescriptor(int64_t slot);
  // InvalidArgument when some x[i] (+ error[i] when with_error) is not
  // finite; `x` is a device pointer of dim() floats.
  absl::Status CheckFinite(const float* x, bool with_error) const;

  SparseMfacOptions options_;
  int64_t k_;
  std::unique_ptr<Device> device_;
  SparseWindow mirror_;
  MfacSystem system_;
  std::vector<kernels::SparseRow> rows_;     // device pointers (host copy)
  std::vector<uint32_t> host_indices_;       // k
  std::vector<float> host_values_;           // k
  std::vector<uint32_t> starts_;             // a row's block starts
  mutable std::vector<double> host_dots_;    // m
  mutable std::vector<double> host_coeffs_;  // m
  int64_t steps_ = 0;
};

}  // namespace efcp
}  // namespace terse

#endif  // TERSE_EFCP_SPARSE_MFAC_CUDA_H_
