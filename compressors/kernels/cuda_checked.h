// Checked entry points of the CUDA selection and sparse kernels
// (topk_cuda.h, select_cuda.h, sparse_ops_cuda.h): each checks that its
// DEVICE arguments are CUDA device memory (cudaPointerGetAttributes, see
// device/cuda_pointer.h) before launching, and returns a Status: a host
// pointer (or one on another device) is InvalidArgument naming the
// argument, instead of an illegal-address fault that poisons the CUDA
// context; a failed launch is Internal with the runtime's text; no device
// is FailedPrecondition.
//
// Same arguments and semantics as the unchecked functions; they are what
// callers with pointers from elsewhere (the engine, bindings, benchmarks)
// use. The unchecked int versions remain for callers that validated their
// buffers once (efcp's CUDA M-FAC classes check at Step/Apply and then
// launch on their own allocations many times per step).
#ifndef TERSE_COMPRESSORS_KERNELS_CUDA_CHECKED_H_
#define TERSE_COMPRESSORS_KERNELS_CUDA_CHECKED_H_

#include <cstdint>

#include "absl/status/status.h"
#include "compressors/kernels/select.h"
#include "compressors/kernels/sparse_ops.h"

namespace terse {
namespace kernels {
namespace cuda_checked {

absl::Status TopK(const float* x, int64_t d, int64_t k, uint32_t* indices,
                  void* stream);
absl::Status SelectAtLeast(const float* x, int64_t d, uint32_t key, int64_t cap,
                           uint32_t* indices, int64_t* count, void* stream);
absl::Status CountAtLeast(const float* x, int64_t d, uint32_t key,
                          int64_t* count, void* stream);
absl::Status SampledTopK(const float* x, int64_t d, int64_t k,
                         const SampledTopKOptions& options, uint32_t* indices,
                         int64_t* count, void* stream);
// `indices` holds max(k, 2k - 1).
absl::Status ThresholdSearch(const float* x, int64_t d, int64_t k,
                             const ThresholdSearchOptions& options,
                             uint32_t* indices, int64_t* count, void* stream);
absl::Status RandomKIndices(uint64_t seed, int64_t d, int64_t k,
                            uint32_t* indices, void* stream);
absl::Status Gather(const float* dense, const uint32_t* indices, int64_t k,
                    float* values, void* stream);
// `dense_size`: the elements of `dense` (indices must be below it).
absl::Status ScatterAdd(const uint32_t* indices, const float* values, int64_t k,
                        float* dense, int64_t dense_size, void* stream);
// `rows` and `coeffs` are HOST arrays (unlike the unchecked versions, which
// take device arrays); each row's arrays are checked, the descriptors and
// coefficients are copied to a device scratch buffer, and these two block
// until the kernel is done. dense_size: the length of `dense` (every row
// index must be < dense_size).
absl::Status SparseDenseDots(const SparseRow* rows, int64_t m,
                             const float* dense, int64_t dense_size,
                             double* out, void* stream);
absl::Status SparseLinearCombination(const SparseRow* rows, int64_t m,
                                     const double* coeffs, float* dense,
                                     int64_t dense_size, void* stream);

}  // namespace cuda_checked
}  // namespace kernels
}  // namespace terse

#endif  // TERSE_COMPRESSORS_KERNELS_CUDA_CHECKED_H_
