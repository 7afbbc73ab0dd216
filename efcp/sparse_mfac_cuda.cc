#include "efcp/sparse_mfac_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/cuda_probe.h"
#include "common/status.h"
#include "compressors/kernels/sparse_ops_cuda.h"
#include "compressors/kernels/topk_cuda.h"
#include "device/cuda_pointer.h"
#include "efcp/efcp_cuda_kernels.h"
#include "efcp/error_feedback.h"
#include "efcp/validate.h"
#include "efcp/window_state.h"

namespace terse {
namespace efcp {
namespace {

absl::Status Check(int error, absl::string_view what) {
  if (error == 0) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("efcp cuda: ", what, " failed: ", cuda::ErrorString(error)));
}

template <typename T>
absl::Status Allocate(T** ptr, int64_t count) {
  return Check(cudaMalloc(reinterpret_cast<void**>(ptr),
                          sizeof(T) * std::max<int64_t>(count, 1)),
               "cudaMalloc");
}

}  // namespace

struct CudaSparseMfac::Device {
  int ordinal = 0;
  cudaStream_t stream = nullptr;
  float* error = nullptr;       // d
  uint32_t* indices = nullptr;  // k
  float* values = nullptr;      // k
  float* negated = nullptr;     // k
  double* dots = nullptr;       // m
  double* coeffs = nullptr;     // m
  int* flag = nullptr;
  // The m row descriptors (device copies of rows_, for the one-launch
  // m-row kernels), rewritten when a slot's row is.
  kernels::SparseRow* rows = nullptr;
  // The window, in the layout of the host mirror.
  uint32_t* index32 = nullptr;  // m * k
  float* value32 = nullptr;     // m * k
  uint16_t* index16 = nullptr;  // m * k
  uint16_t* value16 = nullptr;  // m * k
  uint32_t* offsets = nullptr;  // m * (blocks + 1)
  int64_t blocks = 0;
  int64_t window_bytes = 0;

  ~Device() {
    cudaSetDevice(ordinal);
    for (void* p : {static_cast<void*>(error), static_cast<void*>(indices),
                    static_cast<void*>(values), static_cast<void*>(negated),
                    static_cast<void*>(dots), static_cast<void*>(coeffs),
                    static_cast<void*>(flag), static_cast<void*>(rows),
                    static_cast<void*>(index32), static_cast<void*>(value32),
                    static_cast<void*>(index16), static_cast<void*>(value16),
                    static_cast<void*>(offsets)}) {
      if (p != nullptr) cudaFree(p);
    }
  }
  absl::Status Sync() const {
    return Check(cudaStreamSynchronize(stream), "stream synchronize");
  }
};

absl::StatusOr<std::unique_ptr<CudaSparseMfac>> CudaSparseMfac::Create(
    const SparseMfacOptions& options, int device, void* stream) {
  // The CPU class checks the options the same way.
  TERSE_RETURN_IF_ERROR(CheckShape(options.dim, options.window));
  TERSE_RETURN_IF_ERROR(CheckPositive(options.damp, "damp (lambda)"));
  TERSE_RETURN_IF_ERROR(CheckDensity(options.density));
  if (options.refresh_interval < -1) {
    return absl::InvalidArgumentError(
        "efcp: refresh_interval must be -1 (= window), 0 (never) or > 0");
  }
  if (options.storage != WindowStorage::kIndex32Fp32 &&
      options.storage != WindowStorage::kBlock16Bf16) {
    return absl::InvalidArgumentError("efcp: unknown window storage");
  }
  const CudaInfo info = ProbeCuda();
  if (device < 0 || device >= info.device_count) {
    return absl::FailedPreconditionError(absl::StrCat(
        "efcp cuda: no CUDA device ", device, " (", info.device_count, " found",
        info.why_none.empty() ? "" : ": ", info.why_none, ")"));
  }
  const int64_t k =
      ErrorFeedbackTopK::KeptEntries(options.density, options.dim);
  std::unique_ptr<CudaSparseMfac> mfac(new CudaSparseMfac(options, k));
  Device& dev = *mfac->device_;
  dev.ordinal = device;
  dev.stream = static_cast<cudaStream_t>(stream);
  TERSE_RETURN_IF_ERROR(Check(cudaSetDevice(device), "cudaSetDevice"));
  const int64_t m = options.window, d = options.dim;
  TERSE_RETURN_IF_ERROR(Allocate(&dev.error, d));
  TERSE_RETURN_IF_ERROR(Allocate(&dev.indices, k));
  TERSE_RETURN_IF_ERROR(Allocate(&dev.values, k));
  TERSE_RETURN_IF_ERROR(Allocate(&dev.negated, k));
  TERSE_RETURN_IF_ERROR(Allocate(&dev.dots, m));
  TERSE_RETURN_IF_ERROR(Allocate(&dev.coeffs, m));
  TERSE_RETURN_IF_ERROR(Allocate(&dev.rows, m));
  TERSE_RETURN_IF_ERROR(Allocate(&dev.flag, 1));
  if (options.storage == WindowStorage::kIndex32Fp32) {
    TERSE_RETURN_IF_ERROR(Allocate(&dev.index32, m * k));
    TERSE_RETURN_IF_ERROR(Allocate(&dev.value32, m * k));
    dev.window_bytes = m * k * 8;
  } else {
    dev.blocks = (d + kernels::kBlock16Size - 1) / kernels::kBlock16Size;
    TERSE_RETURN_IF_ERROR(Allocate(&dev.index16, m * k));
    TERSE_RETURN_IF_ERROR(Allocate(&dev.value16, m * k));
    TERSE_RETURN_IF_ERROR(Allocate(&dev.offsets, m * (dev.blocks + 1)));
    dev.window_bytes = m * k * 4 + m * (dev.blocks + 1) * 4;
  }
  TERSE_RETURN_IF_ERROR(Check(
      cudaMemsetAsync(dev.error, 0, sizeof(float) * d, dev.stream), "memset"));
  for (int64_t slot = 0; slot < m; ++slot) {
    TERSE_RETURN_IF_ERROR(mfac->UploadRow(slot));
  }
  TERSE_RETURN_IF_ERROR(dev.Sync());
  return mfac;
}

CudaSparseMfac::CudaSparseMfac(const SparseMfacOptions& options, int64_t k)
    : options_(options),
      k_(k),
      device_(std::make_unique<Device>()),
      mirror_(options.window, options.dim, k, options.storage, 1),
      system_(options.window, options.damp,
              options.refresh_interval < 0 ? options.window
                                           : options.refresh_interval),
      rows_(options.window),
      host_indices_(k),
      host_values_(k),
      host_dots_(options.window),
      host_coeffs_(options.window) {}

CudaSparseMfac::~CudaSparseMfac() = default;

absl::Status CudaSparseMfac::UploadRow(int64_t slot) {
  Device& dev = *device_;
  const kernels::SparseRow& host = mirror_.row(slot);
  kernels::SparseRow& view = rows_[slot];
  view = kernels::SparseRow();
  view.nnz = host.nnz;
  const int64_t base = slot * k_;
  if (options_.storage == WindowStorage::kIndex32Fp32) {
    view.index32 = dev.index32 + base;
    view.value32 = dev.value32 + base;
    if (host.nnz > 0) {
      TERSE_RETURN_IF_ERROR(
          Check(cudaMemcpyAsync(dev.index32 + base, host.index32,
                                sizeof(uint32_t) * host.nnz,
                                cudaMemcpyHostToDevice, dev.stream),
                "upload row"));
      TERSE_RETURN_IF_ERROR(
          Check(cudaMemcpyAsync(dev.value32 + base, host.value32,
                                sizeof(float) * host.nnz,
                                cudaMemcpyHostToDevice, dev.stream),
                "upload row"));
    }
    return UploadDescriptor(slot);
  }
  // The device kernels index format-B slots through a per-row table of
  // block starts (sparse_ops.h), built here from the host row.
  uint32_t* offsets = dev.offsets + slot * (dev.blocks + 1);
  kernels::Block16BlockStarts(host, &starts_);
  view.index16 = dev.index16 + base;
  view.value16 = dev.value16 + base;
  view.dim = host.dim;
  view.nnz = starts_.back();
  view.block_starts = offsets;
  view.num_blocks = dev.blocks;
  if (host.nnz > 0) {
    TERSE_RETURN_IF_ERROR(
        Check(cudaMemcpyAsync(dev.index16 + base, host.index16,
                              sizeof(uint16_t) * host.nnz,
                              cudaMemcpyHostToDevice, dev.stream),
              "upload row"));
    TERSE_RETURN_IF_ERROR(
        Check(cudaMemcpyAsync(dev.value16 + base, host.value16,
                              sizeof(uint16_t) * host.nnz,
                              cudaMemcpyHostToDevice, dev.stream),
              "upload row"));
  }
  TERSE_RETURN_IF_ERROR(
      Check(cudaMemcpyAsync(offsets, starts_.data(),
                            sizeof(uint32_t) * (dev.blocks + 1),
                            cudaMemcpyHostToDevice, dev.stream),
            "upload row"));
  TERSE_RETURN_IF_ERROR(UploadDescriptor(slot));
  // starts_ is reused by the next row: wait for this copy.
  return dev.Sync();
}

absl::Status CudaSparseMfac::UploadDescriptor(int64_t slot) {
  // From rows_, which outlives the copy (pageable memory is staged anyway).
  return Check(cudaMemcpyAsync(device_->rows + slot, &rows_[slot],
                               sizeof(kernels::SparseRow),
                               cudaMemcpyHostToDevice, device_->stream),
               "upload row descriptor");
}

absl::Status CudaSparseMfac::CheckFinite(const float* x,
                                         bool with_error) const {
  const Device& dev = *device_;
  int flag = 0;
  TERSE_RETURN_IF_ERROR(
      Check(cudaMemsetAsync(dev.flag, 0, sizeof(int), dev.stream), "memset"));
  TERSE_RETURN_IF_ERROR(
      Check(with_error
                ? cuda::FlagNonFinite(dev.error, x, dim(), dev.flag, dev.stream)
                : cuda::FlagNonFinite(x, nullptr, dim(), dev.flag, dev.stream),
            "finite check"));
  TERSE_RETURN_IF_ERROR(
      Check(cudaMemcpyAsync(&flag, dev.flag, sizeof(int),
                            cudaMemcpyDeviceToHost, dev.stream),
            "copy flag"));
  TERSE_RETURN_IF_ERROR(dev.Sync());
  if (flag != 0) {
    return absl::InvalidArgumentError(
        with_error ? "efcp: gradient has a NaN or Inf entry (or overflows "
                     "when added to the error-feedback buffer)"
                   : "efcp: x has a NaN or Inf entry");
  }
  return absl::OkStatus();
}

absl::Status CudaSparseMfac::Step(absl::Span<const float> grad,
                                  absl::Span<float> update) {
  TERSE_RETURN_IF_ERROR(
      CheckLength(static_cast<int64_t>(grad.size()), dim(), "gradient"));
  TERSE_RETURN_IF_ERROR(CheckOutputVector(update, dim(), "update"));
  Device& dev = *device_;
  TERSE_RETURN_IF_ERROR(Check(cudaSetDevice(dev.ordinal), "cudaSetDevice"));
  // Device memory of this device, or a Status (never an illegal address).
  TERSE_RETURN_IF_ERROR(CheckCudaDeviceSpan(
      grad.data(), static_cast<int64_t>(sizeof(float) * grad.size()),
      dev.ordinal, "CudaSparseMfac::Step: gradient"));
  TERSE_RETURN_IF_ERROR(CheckCudaDeviceSpan(
      update.data(), static_cast<int64_t>(sizeof(float) * update.size()),
      dev.ordinal, "CudaSparseMfac::Step: update"));
  TERSE_RETURN_IF_ERROR(CheckFinite(grad.data(), /*with_error=*/true));
  const int64_t d = dim(), m = options_.window, slot = steps_ % m;
  void* stream = dev.stream;
  // a = e + g; c = top-k(a) (rounded to the storage); e = a - c.
  TERSE_RETURN_IF_ERROR(
      Check(cuda::AddInPlace(dev.error, grad.data(), d, stream), "e += g"));
  TERSE_RETURN_IF_ERROR(Check(
      kernels::cuda::TopK(dev.error, d, k_, dev.indices, stream), "TopK"));
  TERSE_RETURN_IF_ERROR(Check(
      kernels::cuda::Gather(dev.error, dev.indices, k_, dev.values, stream),
      "Gather"));
  // Rounds the first n values to the storage and writes their negation.
  const int bf16 = options_.storage == WindowStorage::kBlock16Bf16 ? 1 : 0;
  auto round_and_negate = [&](int64_t n) {
    return Check(cuda::RoundAndNegate(dev.values, dev.negated, n, bf16, stream),
                 "round");
  };
  TERSE_RETURN_IF_ERROR(round_and_negate(k_));
  // The host trims the row to what the window holds (block16 markers may
  // take slots); only the kept entries leave the error buffer.
  TERSE_RETURN_IF_ERROR(Check(
      cudaMemcpyAsync(host_indices_.data(), dev.indices, sizeof(uint32_t) * k_,
                      cudaMemcpyDeviceToHost, dev.stream),
      "download row"));
  TERSE_RETURN_IF_ERROR(
      Check(cudaMemcpyAsync(host_values_.data(), dev.values, sizeof(float) * k_,
                            cudaMemcpyDeviceToHost, dev.stream),
            "download row"));
  TERSE_RETURN_IF_ERROR(dev.Sync());
  const int64_t n = mirror_.Fit(host_indices_.data(), host_values_.data(), k_);
  if (n < k_) {
    TERSE_RETURN_IF_ERROR(Check(
        cudaMemcpyAsync(dev.indices, host_indices_.data(), sizeof(uint32_t) * n,
                        cudaMemcpyHostToDevice, dev.stream),
        "upload kept row"));
    TERSE_RETURN_IF_ERROR(Check(
        cudaMemcpyAsync(dev.values, host_values_.data(), sizeof(float) * n,
                        cudaMemcpyHostToDevice, dev.stream),
        "upload kept row"));
    TERSE_RETURN_IF_ERROR(round_and_negate(n));
  }
  TERSE_RETURN_IF_ERROR(Check(
      kernels::cuda::ScatterAdd(dev.indices, dev.negated, n, dev.error, stream),
      "e -= c"));
  mirror_.SetRow(slot, host_indices_.data(), host_values_.data(), n);
  TERSE_RETURN_IF_ERROR(UploadRow(slot));
  // G c through the dense scatter of c in the output buffer.
  TERSE_RETURN_IF_ERROR(
      Check(cudaMemsetAsync(update.data(), 0, sizeof(float) * d, dev.stream),
            "memset"));
  TERSE_RETURN_IF_ERROR(
      Check(kernels::cuda::ScatterAdd(dev.indices, dev.values, n, update.data(),
                                      stream),
            "scatter c"));
  TERSE_RETURN_IF_ERROR(Check(kernels::cuda::SparseDenseDots(
                                  dev.rows, m, update.data(), dev.dots, stream),
                              "SparseDenseDots"));
  TERSE_RETURN_IF_ERROR(
      Check(cudaMemcpyAsync(host_dots_.data(), dev.dots, sizeof(double) * m,
                            cudaMemcpyDeviceToHost, dev.stream),
            "download dots"));
  TERSE_RETURN_IF_ERROR(dev.Sync());
  system_.ReplaceRow(slot, host_dots_.data());
  // u = F^-1 c = m G^T K^-1 e_slot.
  system_.RowInverseCoefficients(slot, host_coeffs_.data());
  TERSE_RETURN_IF_ERROR(
      Check(cudaMemsetAsync(update.data(), 0, sizeof(float) * d, dev.stream),
            "memset"));
  TERSE_RETURN_IF_ERROR(
      Check(cudaMemcpyAsync(dev.coeffs, host_coeffs_.data(), sizeof(double) * m,
                            cudaMemcpyHostToDevice, dev.stream),
            "upload coefficients"));
  TERSE_RETURN_IF_ERROR(
      Check(kernels::cuda::SparseLinearCombination(dev.rows, m, dev.coeffs, d,
                                                   update.data(), stream),
            "SparseLinearCombination"));
  TERSE_RETURN_IF_ERROR(dev.Sync());
  ++steps_;
  return absl::OkStatus();
}

absl::Status CudaSparseMfac::Apply(absl::Span<const float> x,
                                   absl::Span<float> out) const {
  TERSE_RETURN_IF_ERROR(
      CheckLength(static_cast<int64_t>(x.size()), dim(), "x"));
  TERSE_RETURN_IF_ERROR(CheckOutputVector(out, dim(), "out"));
  const Device& dev = *device_;
  TERSE_RETURN_IF_ERROR(Check(cudaSetDevice(dev.ordinal), "cudaSetDevice"));
  // Device memory of this device, or a Status (never an illegal address).
  TERSE_RETURN_IF_ERROR(CheckCudaDeviceSpan(
      x.data(), static_cast<int64_t>(sizeof(float) * x.size()), dev.ordinal,
      "CudaSparseMfac::Apply: x"));
  TERSE_RETURN_IF_ERROR(CheckCudaDeviceSpan(
      out.data(), static_cast<int64_t>(sizeof(float) * out.size()), dev.ordinal,
      "CudaSparseMfac::Apply: out"));
  TERSE_RETURN_IF_ERROR(CheckFinite(x.data(), /*with_error=*/false));
  const int64_t d = dim(), m = options_.window;
  void* stream = dev.stream;
  TERSE_RETURN_IF_ERROR(
      Check(cudaMemcpyAsync(out.data(), x.data(), sizeof(float) * d,
                            cudaMemcpyDeviceToDevice, dev.stream),
            "copy x"));
  TERSE_RETURN_IF_ERROR(Check(
      kernels::cuda::SparseDenseDots(dev.rows, m, x.data(), dev.dots, stream),
      "SparseDenseDots"));
  TERSE_RETURN_IF_ERROR(
      Check(cudaMemcpyAsync(host_dots_.data(), dev.dots, sizeof(double) * m,
                            cudaMemcpyDeviceToHost, dev.stream),
            "download dots"));
  TERSE_RETURN_IF_ERROR(dev.Sync());
  system_.InverseCoefficients(host_dots_.data(), host_coeffs_.data());
  TERSE_RETURN_IF_ERROR(
      Check(cudaMemcpyAsync(dev.coeffs, host_coeffs_.data(), sizeof(double) * m,
                            cudaMemcpyHostToDevice, dev.stream),
            "upload coefficients"));
  TERSE_RETURN_IF_ERROR(
      Check(kernels::cuda::SparseLinearCombination(dev.rows, m, dev.coeffs, d,
                                                   out.data(), stream),
            "SparseLinearCombination"));
  TERSE_RETURN_IF_ERROR(
      Check(cuda::Scale(out.data(), static_cast<float>(1.0 / options_.damp), d,
                        stream),
            "scale"));
  return dev.Sync();
}

MemoryUsage CudaSparseMfac::memory() const {
  MemoryUsage usage;
  usage.window = device_->window_bytes;
  usage.error = dim() * static_cast<int64_t>(sizeof(float));
  usage.small = system_.memory_bytes();
  usage.scratch =
      mirror_.memory_bytes() + mirror_.bookkeeping_bytes() + k_ * 20 +
      options_.window *
          (32 + 2 * static_cast<int64_t>(sizeof(kernels::SparseRow)));
  return usage;
}

absl::StatusOr<std::vector<float>> CudaSparseMfac::error() const {
  const Device& dev = *device_;
  TERSE_RETURN_IF_ERROR(Check(cudaSetDevice(dev.ordinal), "cudaSetDevice"));
  std::vector<float> host(dim());
  TERSE_RETURN_IF_ERROR(
      Check(cudaMemcpyAsync(host.data(), dev.error, sizeof(float) * dim(),
                            cudaMemcpyDeviceToHost, dev.stream),
            "download error"));
  TERSE_RETURN_IF_ERROR(dev.Sync());
  return host;
}

std::string CudaSparseMfac::SaveState() const {
  absl::StatusOr<std::vector<float>> host_error = error();
  if (!host_error.ok()) return std::string();  // an empty blob never restores
  return SaveSparseHistory(name(), mirror_, steps_, host_error->data(),
                           system_.gram());
}

absl::Status CudaSparseMfac::RestoreState(absl::string_view blob) {
  TERSE_ASSIGN_OR_RETURN(SparseHistoryState state,
                         ParseSparseHistory(blob, name(), mirror_));
  TERSE_RETURN_IF_ERROR(system_.SetGram(state.gram));
  CommitSparseRows(state.rows, &mirror_);
  steps_ = state.steps;
  Device& dev = *device_;
  TERSE_RETURN_IF_ERROR(Check(cudaSetDevice(dev.ordinal), "cudaSetDevice"));
  for (int64_t slot = 0; slot < options_.window; ++slot) {
    TERSE_RETURN_IF_ERROR(UploadRow(slot));
  }
  TERSE_RETURN_IF_ERROR(Check(
      cudaMemcpyAsync(dev.error, state.error.data(), sizeof(float) * dim(),
                      cudaMemcpyHostToDevice, dev.stream),
      "upload error"));
  return dev.Sync();
}

}  // namespace efcp
}  // namespace terse
