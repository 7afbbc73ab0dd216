// CUDA versions of sparse_ops.h. Array arguments are DEVICE pointers, except
// `rows` and `coeffs`, which are HOST arrays (of m entries) whose SparseRow
// pointers point to device memory. `stream` is a cudaStream_t as void*
// (nullptr = default stream). Each function returns a cudaError_t as int
// (0 = success) and only enqueues work (asynchronous).
//
// Differences from the CPU versions, by design of the hardware:
//   - ScatterAdd sums duplicate indices with atomics, in unspecified order
//     (bit-identical to the CPU only when the indices are distinct).
//   - SparseDenseDots reduces each row as a tree in double: equal to the CPU
//     result up to double rounding, not bit-identical.
//   - SparseLinearCombination adds the rows one after another (one launch a
//     row, no atomics), so it is bit-identical to the CPU version.
//
// UNCHECKED: these trust that device pointers are device memory (a host
// pointer faults inside the kernel and poisons the CUDA context). Callers
// with pointers from elsewhere use cuda_checked.h, which checks each span
// (cudaPointerGetAttributes) and returns a Status.
#ifndef TERSE_COMPRESSORS_KERNELS_SPARSE_OPS_CUDA_H_
#define TERSE_COMPRESSORS_KERNELS_SPARSE_OPS_CUDA_H_

#include <cstdint>

#include "compressors/kernels/sparse_ops.h"

namespace terse {
namespace kernels {
namespace cuda {

int Gather(const float* dense, const uint32_t* indices, int64_t k,
           float* values, void* stream);
int ScatterAdd(const uint32_t* indices, const float* values, int64_t k,
               float* dense, void* stream);
// out: device array of m doubles.
int SparseDenseDots(const SparseRow* rows, int64_t m, const float* dense,
                    double* out, void* stream);
int SparseLinearCombination(const SparseRow* rows, int64_t m,
                            const double* coeffs, float* dense, void* stream);

}  // namespace cuda
}  // namespace kernels
}  // namespace terse

#endif  // TERSE_COMPRESSORS_KERNELS_SPARSE_OPS_CUDA_H_
