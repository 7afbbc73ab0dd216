#include "compressors/kernels/cuda_checked.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "compressors/kernels/select_cuda.h"
#include "compressors/kernels/sparse_ops_cuda.h"
#include "compressors/kernels/topk_cuda.h"
#include "device/cuda_pointer.h"

namespace terse {
namespace kernels {
namespace cuda_checked {
namespace {

#define TERSE_CHECK_SPAN(ptr, bytes, what)                             \
  do {                                                                 \
    absl::Status _s = CheckCudaDeviceSpan((ptr), (bytes), -1, (what)); \
    if (!_s.ok()) return _s;                                           \
  } while (0)

absl::Status Launched(int error, const char* what) {
  if (error == 0) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(what, ": ", cuda::CudaErrorString(error)));
}

absl::Status CheckSizes(int64_t d, int64_t k, const char* what) {
  if (d < 0 || k < 0 || k > d || d >= (int64_t{1} << 32)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": need 0 <= k <= d < 2^32, got d = ", d, ", k = ", k));
  }
  return absl::OkStatus();
}

absl::Status CheckRows(const SparseRow* rows, int64_t m, const char* what) {
  if (m < 0 || (rows == nullptr && m > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": null rows or negative m"));
  }
  for (int64_t r = 0; r < m; ++r) {
    const SparseRow& row = rows[r];
    const std::string name = absl::StrCat(what, ": row ", r);
    if (row.nnz < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " has a negative nnz"));
    }
    if (row.index32 != nullptr || row.value32 != nullptr) {
      TERSE_CHECK_SPAN(row.index32, row.nnz * 4, name + " index32");
      TERSE_CHECK_SPAN(row.value32, row.nnz * 4, name + " value32");
    } else {
      TERSE_CHECK_SPAN(row.index16, row.nnz * 2, name + " index16");
      TERSE_CHECK_SPAN(row.value16, row.nnz * 2, name + " value16");
      TERSE_CHECK_SPAN(row.block_starts, (row.num_blocks + 1) * 4,
                       name + " block_starts");
    }
  }
  return absl::OkStatus();
}

// A device copy of n host items, for the m-row kernels, which read their
// row descriptors and coefficients from device memory. Freed on
// destruction (cudaFree waits for the work using it).
template <typename T>
class DeviceCopy {
 public:
  DeviceCopy() = default;
  DeviceCopy(const DeviceCopy&) = delete;
  DeviceCopy& operator=(const DeviceCopy&) = delete;
  ~DeviceCopy() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  absl::Status Upload(const T* host, int64_t n, void* stream,
                      const char* what) {
    if (n <= 0) return absl::OkStatus();
    int error = cudaMalloc(reinterpret_cast<void**>(&ptr_), sizeof(T) * n);
    if (error == 0) {
      error = cudaMemcpyAsync(ptr_, host, sizeof(T) * n, cudaMemcpyHostToDevice,
                              static_cast<cudaStream_t>(stream));
    }
    return Launched(error, what);
  }
  const T* get() const { return ptr_; }

 private:
  T* ptr_ = nullptr;
};

absl::Status Synced(int error, void* stream, const char* what) {
  if (error == 0) {
    error = cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
  }
  return Launched(error, what);
}

}  // namespace

absl::Status TopK(const float* x, int64_t d, int64_t k, uint32_t* indices,
                  void* stream) {
  TERSE_CHECK_SPAN(x, d * 4, "cuda TopK: x");
  TERSE_CHECK_SPAN(indices, k * 4, "cuda TopK: indices");
  absl::Status sizes = CheckSizes(d, k, "cuda TopK");
  if (!sizes.ok()) return sizes;
  return Launched(kernels::cuda::TopK(x, d, k, indices, stream), "cuda TopK");
}

absl::Status SelectAtLeast(const float* x, int64_t d, uint32_t key, int64_t cap,
                           uint32_t* indices, int64_t* count, void* stream) {
  TERSE_CHECK_SPAN(x, d * 4, "cuda SelectAtLeast: x");
  TERSE_CHECK_SPAN(indices, cap * 4, "cuda SelectAtLeast: indices");
  if (count == nullptr) {
    return absl::InvalidArgumentError("cuda SelectAtLeast: null count");
  }
  return Launched(
      kernels::cuda::SelectAtLeast(x, d, key, cap, indices, count, stream),
      "cuda SelectAtLeast");
}

absl::Status CountAtLeast(const float* x, int64_t d, uint32_t key,
                          int64_t* count, void* stream) {
  TERSE_CHECK_SPAN(x, d * 4, "cuda CountAtLeast: x");
  if (count == nullptr) {
    return absl::InvalidArgumentError("cuda CountAtLeast: null count");
  }
  return Launched(kernels::cuda::CountAtLeast(x, d, key, count, stream),
                  "cuda CountAtLeast");
}

absl::Status SampledTopK(const float* x, int64_t d, int64_t k,
                         const SampledTopKOptions& options, uint32_t* indices,
                         int64_t* count, void* stream) {
  TERSE_CHECK_SPAN(x, d * 4, "cuda SampledTopK: x");
  TERSE_CHECK_SPAN(indices, k * 4, "cuda SampledTopK: indices");
  absl::Status sizes = CheckSizes(d, k, "cuda SampledTopK");
  if (!sizes.ok()) return sizes;
  if (count == nullptr) {
    return absl::InvalidArgumentError("cuda SampledTopK: null count");
  }
  return Launched(
      kernels::cuda::SampledTopK(x, d, k, options, indices, count, stream),
      "cuda SampledTopK");
}

absl::Status ThresholdSearch(const float* x, int64_t d, int64_t k,
                             const ThresholdSearchOptions& options,
                             uint32_t* indices, int64_t* count, void* stream) {
  TERSE_CHECK_SPAN(x, d * 4, "cuda ThresholdSearch: x");
  TERSE_CHECK_SPAN(indices, std::max<int64_t>(k, 2 * k - 1) * 4,
                   "cuda ThresholdSearch: indices");
  absl::Status sizes = CheckSizes(d, k, "cuda ThresholdSearch");
  if (!sizes.ok()) return sizes;
  if (count == nullptr) {
    return absl::InvalidArgumentError("cuda ThresholdSearch: null count");
  }
  return Launched(
      kernels::cuda::ThresholdSearch(x, d, k, options, indices, count, stream),
      "cuda ThresholdSearch");
}

absl::Status RandomKIndices(uint64_t seed, int64_t d, int64_t k,
                            uint32_t* indices, void* stream) {
  TERSE_CHECK_SPAN(indices, k * 4, "cuda RandomKIndices: indices");
  absl::Status sizes = CheckSizes(d, k, "cuda RandomKIndices");
  if (!sizes.ok()) return sizes;
  return Launched(kernels::cuda::RandomKIndices(seed, d, k, indices, stream),
                  "cuda RandomKIndices");
}

absl::Status Gather(const float* dense, const uint32_t* indices, int64_t k,
                    float* values, void* stream) {
  TERSE_CHECK_SPAN(indices, k * 4, "cuda Gather: indices");
  TERSE_CHECK_SPAN(values, k * 4, "cuda Gather: values");
  TERSE_CHECK_SPAN(dense, k > 0 ? 4 : 0, "cuda Gather: dense");
  return Launched(kernels::cuda::Gather(dense, indices, k, values, stream),
                  "cuda Gather");
}

absl::Status ScatterAdd(const uint32_t* indices, const float* values, int64_t k,
                        float* dense, int64_t dense_size, void* stream) {
  TERSE_CHECK_SPAN(indices, k * 4, "cuda ScatterAdd: indices");
  TERSE_CHECK_SPAN(values, k * 4, "cuda ScatterAdd: values");
  TERSE_CHECK_SPAN(dense, dense_size * 4, "cuda ScatterAdd: dense");
  return Launched(kernels::cuda::ScatterAdd(indices, values, k, dense, stream),
                  "cuda ScatterAdd");
}

absl::Status SparseDenseDots(const SparseRow* rows, int64_t m,
                             const float* dense, int64_t dense_size,
                             double* out, void* stream) {
  absl::Status checked = CheckRows(rows, m, "cuda SparseDenseDots");
  if (!checked.ok()) return checked;
  TERSE_CHECK_SPAN(dense, dense_size * 4, "cuda SparseDenseDots: dense");
  TERSE_CHECK_SPAN(out, m * 8, "cuda SparseDenseDots: out");
  DeviceCopy<SparseRow> device_rows;
  TERSE_RETURN_IF_ERROR(
      device_rows.Upload(rows, m, stream, "cuda SparseDenseDots: copy rows"));
  return Synced(
      kernels::cuda::SparseDenseDots(device_rows.get(), m, dense, out, stream),
      stream, "cuda SparseDenseDots");
}

absl::Status SparseLinearCombination(const SparseRow* rows, int64_t m,
                                     const double* coeffs, float* dense,
                                     int64_t dense_size, void* stream) {
  absl::Status checked = CheckRows(rows, m, "cuda SparseLinearCombination");
  if (!checked.ok()) return checked;
  if (coeffs == nullptr && m > 0) {
    return absl::InvalidArgumentError(
        "cuda SparseLinearCombination: null coeffs");
  }
  TERSE_CHECK_SPAN(dense, dense_size * 4,
                   "cuda SparseLinearCombination: dense");
  DeviceCopy<SparseRow> device_rows;
  TERSE_RETURN_IF_ERROR(device_rows.Upload(
      rows, m, stream, "cuda SparseLinearCombination: copy rows"));
  DeviceCopy<double> device_coeffs;
  TERSE_RETURN_IF_ERROR(device_coeffs.Upload(
      coeffs, m, stream, "cuda SparseLinearCombination: copy coeffs"));
  return Synced(
      kernels::cuda::SparseLinearCombination(
          device_rows.get(), m, device_coeffs.get(), dense_size, dense, stream),
      stream, "cuda SparseLinearCombination");
}

}  // namespace cuda_checked
}  // namespace kernels
}  // namespace terse
