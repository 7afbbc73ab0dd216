#include "efcp/dense_mfac_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/cuda_probe.h"
#include "common/status.h"
#include "device/cuda_pointer.h"
#include "efcp/efcp_cuda_kernels.h"
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

}  // namespace

struct CudaDenseMfac::Device {
  int ordinal = 0;
  cudaStream_t stream = nullptr;
  float* window = nullptr;   // m x d
  double* dots = nullptr;    // m
  double* coeffs = nullptr;  // m
  int* flag = nullptr;

  ~Device() {
    cudaSetDevice(ordinal);
    for (void* p : {static_cast<void*>(window), static_cast<void*>(dots),
                    static_cast<void*>(coeffs), static_cast<void*>(flag)}) {
      if (p != nullptr) cudaFree(p);
    }
  }
  absl::Status Sync() const {
    return Check(cudaStreamSynchronize(stream), "stream synchronize");
  }
};

absl::StatusOr<std::unique_ptr<CudaDenseMfac>> CudaDenseMfac::Create(
    const DenseMfacOptions& options, int device, void* stream) {
  TERSE_RETURN_IF_ERROR(CheckShape(options.dim, options.window));
  TERSE_RETURN_IF_ERROR(CheckDenseWindowSize(options.dim, options.window));
  TERSE_RETURN_IF_ERROR(CheckPositive(options.damp, "damp (lambda)"));
  if (options.refresh_interval < -1) {
    return absl::InvalidArgumentError(
        "efcp: refresh_interval must be -1 (= window), 0 (never) or > 0");
  }
  const CudaInfo info = ProbeCuda();
  if (device < 0 || device >= info.device_count) {
    return absl::FailedPreconditionError(absl::StrCat(
        "efcp cuda: no CUDA device ", device, " (", info.device_count, " found",
        info.why_none.empty() ? "" : ": ", info.why_none, ")"));
  }
  std::unique_ptr<CudaDenseMfac> mfac(new CudaDenseMfac(options));
  Device& dev = *mfac->device_;
  dev.ordinal = device;
  dev.stream = static_cast<cudaStream_t>(stream);
  TERSE_RETURN_IF_ERROR(Check(cudaSetDevice(device), "cudaSetDevice"));
  const int64_t m = options.window, d = options.dim;
  TERSE_RETURN_IF_ERROR(Check(
      cudaMalloc(reinterpret_cast<void**>(&dev.window), sizeof(float) * m * d),
      "cudaMalloc window"));
  TERSE_RETURN_IF_ERROR(
      Check(cudaMalloc(reinterpret_cast<void**>(&dev.dots), sizeof(double) * m),
            "cudaMalloc"));
  TERSE_RETURN_IF_ERROR(Check(
      cudaMalloc(reinterpret_cast<void**>(&dev.coeffs), sizeof(double) * m),
      "cudaMalloc"));
  TERSE_RETURN_IF_ERROR(
      Check(cudaMalloc(reinterpret_cast<void**>(&dev.flag), sizeof(int)),
            "cudaMalloc"));
  TERSE_RETURN_IF_ERROR(
      Check(cudaMemsetAsync(dev.window, 0, sizeof(float) * m * d, dev.stream),
            "memset"));
  TERSE_RETURN_IF_ERROR(dev.Sync());
  return mfac;
}

CudaDenseMfac::CudaDenseMfac(const DenseMfacOptions& options)
    : options_(options),
      device_(std::make_unique<Device>()),
      system_(options.window, options.damp,
              options.refresh_interval < 0 ? options.window
                                           : options.refresh_interval),
      host_dots_(options.window),
      host_coeffs_(options.window) {}

CudaDenseMfac::~CudaDenseMfac() = default;

absl::Status CudaDenseMfac::CheckFinite(const float* x) const {
  const Device& dev = *device_;
  int flag = 0;
  TERSE_RETURN_IF_ERROR(
      Check(cudaMemsetAsync(dev.flag, 0, sizeof(int), dev.stream), "memset"));
  TERSE_RETURN_IF_ERROR(
      Check(cuda::FlagNonFinite(x, nullptr, dim(), dev.flag, dev.stream),
            "finite check"));
  TERSE_RETURN_IF_ERROR(
      Check(cudaMemcpyAsync(&flag, dev.flag, sizeof(int),
                            cudaMemcpyDeviceToHost, dev.stream),
            "copy flag"));
  TERSE_RETURN_IF_ERROR(dev.Sync());
  if (flag != 0) {
    return absl::InvalidArgumentError("efcp: input has a NaN or Inf entry");
  }
  return absl::OkStatus();
}

absl::Status CudaDenseMfac::Dots(const float* x) const {
  const Device& dev = *device_;
  const int64_t m = options_.window;
  TERSE_RETURN_IF_ERROR(Check(
      cuda::DenseDots(dev.window, m, dim(), x, dev.dots, dev.stream), "dots"));
  TERSE_RETURN_IF_ERROR(
      Check(cudaMemcpyAsync(host_dots_.data(), dev.dots, sizeof(double) * m,
                            cudaMemcpyDeviceToHost, dev.stream),
            "download dots"));
  return dev.Sync();
}

absl::Status CudaDenseMfac::Combine(float* out) const {
  const Device& dev = *device_;
  const int64_t m = options_.window;
  TERSE_RETURN_IF_ERROR(
      Check(cudaMemcpyAsync(dev.coeffs, host_coeffs_.data(), sizeof(double) * m,
                            cudaMemcpyHostToDevice, dev.stream),
            "upload coefficients"));
  return Check(cuda::DenseLinearCombination(dev.window, m, dim(), dev.coeffs,
                                            out, dev.stream),
               "linear combination");
}

absl::Status CudaDenseMfac::Step(absl::Span<const float> grad,
                                 absl::Span<float> update) {
  TERSE_RETURN_IF_ERROR(
      CheckLength(static_cast<int64_t>(grad.size()), dim(), "gradient"));
  TERSE_RETURN_IF_ERROR(CheckOutputVector(update, dim(), "update"));
  Device& dev = *device_;
  TERSE_RETURN_IF_ERROR(Check(cudaSetDevice(dev.ordinal), "cudaSetDevice"));
  // Device memory of this device, or a Status (never an illegal address).
  TERSE_RETURN_IF_ERROR(CheckCudaDeviceSpan(
      grad.data(), static_cast<int64_t>(sizeof(float) * grad.size()), dev.ordinal,
      "CudaDenseMfac::Step: gradient"));
  TERSE_RETURN_IF_ERROR(CheckCudaDeviceSpan(
      update.data(), static_cast<int64_t>(sizeof(float) * update.size()), dev.ordinal,
      "CudaDenseMfac::Step: update"));
  TERSE_RETURN_IF_ERROR(CheckFinite(grad.data()));
  const int64_t d = dim(), slot = steps_ % options_.window;
  TERSE_RETURN_IF_ERROR(Check(
      cudaMemcpyAsync(dev.window + slot * d, grad.data(), sizeof(float) * d,
                      cudaMemcpyDeviceToDevice, dev.stream),
      "store row"));
  TERSE_RETURN_IF_ERROR(Dots(grad.data()));
  system_.ReplaceRow(slot, host_dots_.data());
  // u = F^-1 g = m G^T K^-1 e_slot.
  system_.RowInverseCoefficients(slot, host_coeffs_.data());
  TERSE_RETURN_IF_ERROR(
      Check(cudaMemsetAsync(update.data(), 0, sizeof(float) * d, dev.stream),
            "memset"));
  TERSE_RETURN_IF_ERROR(Combine(update.data()));
  TERSE_RETURN_IF_ERROR(dev.Sync());
  ++steps_;
  return absl::OkStatus();
}

absl::Status CudaDenseMfac::Apply(absl::Span<const float> x,
                                  absl::Span<float> out) const {
  TERSE_RETURN_IF_ERROR(
      CheckLength(static_cast<int64_t>(x.size()), dim(), "x"));
  TERSE_RETURN_IF_ERROR(CheckOutputVector(out, dim(), "out"));
  const Device& dev = *device_;
  TERSE_RETURN_IF_ERROR(Check(cudaSetDevice(dev.ordinal), "cudaSetDevice"));
  // Device memory of this device, or a Status (never an illegal address).
  TERSE_RETURN_IF_ERROR(CheckCudaDeviceSpan(
      x.data(), static_cast<int64_t>(sizeof(float) * x.size()), dev.ordinal,
      "CudaDenseMfac::Apply: x"));
  TERSE_RETURN_IF_ERROR(CheckCudaDeviceSpan(
      out.data(), static_cast<int64_t>(sizeof(float) * out.size()), dev.ordinal,
      "CudaDenseMfac::Apply: out"));
  TERSE_RETURN_IF_ERROR(CheckFinite(x.data()));
  TERSE_RETURN_IF_ERROR(
      Check(cudaMemcpyAsync(out.data(), x.data(), sizeof(float) * dim(),
                            cudaMemcpyDeviceToDevice, dev.stream),
            "copy x"));
  TERSE_RETURN_IF_ERROR(Dots(x.data()));
  system_.InverseCoefficients(host_dots_.data(), host_coeffs_.data());
  TERSE_RETURN_IF_ERROR(Combine(out.data()));
  TERSE_RETURN_IF_ERROR(
      Check(cuda::Scale(out.data(), static_cast<float>(1.0 / options_.damp),
                        dim(), dev.stream),
            "scale"));
  return dev.Sync();
}

MemoryUsage CudaDenseMfac::memory() const {
  MemoryUsage usage;
  usage.window = options_.window * dim() * static_cast<int64_t>(sizeof(float));
  usage.small = system_.memory_bytes();
  usage.scratch = options_.window * 32;
  return usage;
}

std::string CudaDenseMfac::SaveState() const {
  const Device& dev = *device_;
  const int64_t filled = std::min(steps_, options_.window);
  std::vector<float> rows(static_cast<size_t>(filled * dim()));
  if (cudaSetDevice(dev.ordinal) != cudaSuccess ||
      (!rows.empty() &&
       cudaMemcpyAsync(rows.data(), dev.window, sizeof(float) * rows.size(),
                       cudaMemcpyDeviceToHost, dev.stream) != cudaSuccess) ||
      !dev.Sync().ok()) {
    return std::string();
  }
  return SaveDenseHistory(name(), dim(), options_.window, steps_, rows.data(),
                          system_.gram());
}

absl::Status CudaDenseMfac::RestoreState(absl::string_view blob) {
  TERSE_ASSIGN_OR_RETURN(
      DenseHistoryState state,
      ParseDenseHistory(blob, name(), dim(), options_.window));
  TERSE_RETURN_IF_ERROR(system_.SetGram(state.gram));
  steps_ = state.steps;
  Device& dev = *device_;
  const int64_t filled = std::min(state.steps, options_.window);
  const int64_t d = dim();
  TERSE_RETURN_IF_ERROR(Check(cudaSetDevice(dev.ordinal), "cudaSetDevice"));
  TERSE_RETURN_IF_ERROR(
      Check(cudaMemsetAsync(dev.window, 0, sizeof(float) * options_.window * d,
                            dev.stream),
            "memset"));
  if (filled > 0) {
    // The blob's bytes need no alignment for a copy.
    TERSE_RETURN_IF_ERROR(Check(
        cudaMemcpyAsync(dev.window, state.rows, sizeof(float) * filled * d,
                        cudaMemcpyHostToDevice, dev.stream),
        "upload rows"));
  }
  return dev.Sync();
}

}  // namespace efcp
}  // namespace terse
