// Dense <-> sparse kernels (CPU): gather, scatter-add, and the two m-row
// operations EFCP needs (dot products of sparse rows with a dense vector, and
// a linear combination of sparse rows into a dense vector).
//
// All indices here are TRUSTED: they must be < the dense length. Decoders of
// peer payloads validate before calling these (see compressors/payload.h).
// The functions are reentrant; the multithreaded ones block until the
// threads they start have joined. Results do not depend on the thread count.
#ifndef TERSE_COMPRESSORS_KERNELS_SPARSE_OPS_H_
#define TERSE_COMPRESSORS_KERNELS_SPARSE_OPS_H_

#include <cstdint>
#include <vector>

namespace terse {
namespace kernels {

// values[j] = dense[indices[j]], j < k.
void Gather(const float* dense, const uint32_t* indices, int64_t k,
            float* values);

// dense[indices[j]] += values[j] for j < k in j order (duplicates summed).
void ScatterAdd(const uint32_t* indices, const float* values, int64_t k,
                float* dense);

// One stored sparse row, borrowed (the pointers are not owned). Either
// format A (index32 + value32 non-null) or format B (block-relative:
// index16 + value16 (bf16 bits) + block_offsets non-null). In format B the
// absolute index of entry j is b * 65536 + index16[j] where
// block_offsets[b] <= j < block_offsets[b + 1]; block_offsets has
// num_blocks + 1 entries and block_offsets[num_blocks] == nnz. Entries are
// ascending by index.
struct SparseRow {
  int64_t nnz = 0;
  const uint32_t* index32 = nullptr;
  const float* value32 = nullptr;
  const uint16_t* index16 = nullptr;
  const uint16_t* value16 = nullptr;
  const uint32_t* block_offsets = nullptr;
  int64_t num_blocks = 0;
};

// The width of one format-B block.
constexpr int64_t kBlock16Size = 65536;

// out[i] = sum_j row_i.value[j] * dense[row_i.index[j]], accumulated in
// double in j order, for i < m. Multithreaded over rows.
void SparseDenseDots(const SparseRow* rows, int64_t m, const float* dense,
                     double* out, int num_threads = 0);

// dense[idx] += float(coeffs[i] * row_i.value) for every row i < m, entry by
// entry; every dense element receives its terms in row order (so the result
// is deterministic). Multithreaded over ranges of the dense index.
void SparseLinearCombination(const SparseRow* rows, int64_t m,
                             const double* coeffs, float* dense,
                             int num_threads = 0);

// Encodes ascending absolute indices (< d) + fp32 values into format B:
// index16[j] = indices[j] % 65536, value16[j] = bf16(values[j]) (round to
// nearest even), *block_offsets resized to ceil(d / 65536) + 1 entries.
void EncodeBlock16BF16(const uint32_t* indices, const float* values, int64_t k,
                       int64_t d, uint16_t* index16, uint16_t* value16,
                       std::vector<uint32_t>* block_offsets);

// A format-B SparseRow viewing the three arrays (borrowed).
SparseRow Block16Row(const uint16_t* index16, const uint16_t* value16,
                     const std::vector<uint32_t>& block_offsets);

}  // namespace kernels
}  // namespace terse

#endif  // TERSE_COMPRESSORS_KERNELS_SPARSE_OPS_H_
