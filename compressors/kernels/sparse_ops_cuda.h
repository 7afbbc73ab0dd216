// CUDA versions of sparse_ops.h. Array arguments are DEVICE pointers,
// including the m-row functions' `rows` (a device array of m SparseRow
// descriptors whose pointers point to device memory too) and `coeffs`.
// `stream` is a cudaStream_t as void* (nullptr = default stream). Each
// function returns a cudaError_t as int (0 = success) and only enqueues work
// (asynchronous): the descriptor and coefficient arrays must stay as they are
// until the work is done. SparseDenseDots and SparseLinearCombination are
// ONE kernel launch each, whatever m (callers keep the descriptors on the
// device, e.g. efcp/sparse_mfac_cuda.cc uploads a slot's descriptor when the
// slot is replaced; cuda_checked.h takes host arrays and copies them).
//
// Rows: format A (index32 + value32, `nnz` strictly ascending indices) or
// format B (index16 + value16) WITH its decode index: block_starts =
// Block16BlockStarts of the row (num_blocks + 1 entries, num_blocks =
// ceil(dim / 65536)) and nnz = block_starts[num_blocks] (the slots up to
// the row's end). Indices must be < the dense length (TRUSTED, as on the
// CPU; SparseLinearCombination skips any at or above its `dim`).
//
// Differences from the CPU versions, by design of the hardware:
//   - ScatterAdd sums duplicate indices with atomics, in unspecified order
//     (bit-identical to the CPU only when the indices are distinct).
//   - SparseDenseDots: one thread block a row; each thread sums a strided
//     part of the row in double, then a tree over the block: equal to the
//     CPU result up to the double rounding of a reordered sum, not
//     bit-identical (as before). Deterministic: the same inputs give the
//     same bits on every run.
//   - SparseLinearCombination: one thread block a chunk of 8192 dense
//     elements, adding the rows into it in row order (a barrier between
//     rows, a row's distinct indices shared among the threads; no atomics).
//     Every element receives float(coeff_i * value) for i = 0, 1, ... in
//     order, one float addition each, exactly as the CPU version: the result
//     is BIT-IDENTICAL to the CPU SparseLinearCombination.
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
// out[i] = <row i, dense>, i < m. rows: device array of m descriptors;
// out: device array of m doubles.
int SparseDenseDots(const SparseRow* rows, int64_t m, const float* dense,
                    double* out, void* stream);
// dense[idx] += float(coeffs[i] * row_i.value) for every row i < m, rows in
// order. rows: device array of m descriptors; coeffs: device array of m
// doubles; dim: the length of `dense` (every row index < dim).
int SparseLinearCombination(const SparseRow* rows, int64_t m,
                            const double* coeffs, int64_t dim, float* dense,
                            void* stream);

}  // namespace cuda
}  // namespace kernels
}  // namespace terse

#endif  // TERSE_COMPRESSORS_KERNELS_SPARSE_OPS_CUDA_H_
