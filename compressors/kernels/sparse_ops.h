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
// format A (index32 + value32 non-null: `nnz` entries, ascending absolute
// indices) or format B (index16 + value16 non-null: the block16 encoding
// below, `nnz` slots).
//
// Format B, block-relative 16-bit indices + bf16 values, 4 bytes a slot and
// nothing else per row (no block-offset table). Index i lies in block
// i / 65536 at relative index i % 65536. A slot is either an entry
// (value16 a finite bf16, index16 its relative index) or a marker (index16
// 0, value16 an Inf/NaN pattern, which a finite value never has):
//   Block16Jump(a), a in [1, 127]: the next entries lie a blocks further on
//     (the next slot is an entry or another jump);
//   any other marker (the encoder writes kBlock16End): the row ends here (a
//     row shorter than its slots carries one, so the slots alone delimit the
//     row).
// A decoder starts in block 0 with no previous entry. An entry whose
// relative index is <= the previous entry's (a descent) lies in the next
// block; otherwise it lies in the current block. So a block boundary costs
// nothing when the next nonempty block is the next block and its first
// relative index is <= the last one before it (with entries spread over a
// block, almost always); the encoder writes jumps only for the other
// boundaries (empty blocks skipped, or no descent): ceil(blocks advanced /
// 127) slots, so at most one per block after block 0 over a row. Markers
// have index16 0, which is <= any previous relative index: the decoders'
// per-entry loop needs no marker test. Decoders are defensive: whatever the
// slot bits, they read only slots [0, nnz) and visit only indices < dim.
//
// block_starts / num_blocks: an optional decode index for the CUDA kernels
// only (block_starts[b] = the first slot of block b, num_blocks + 1 entries,
// built by Block16BlockStarts); the CPU kernels ignore it.
struct SparseRow {
  int64_t nnz = 0;
  const uint32_t* index32 = nullptr;
  const float* value32 = nullptr;
  const uint16_t* index16 = nullptr;
  const uint16_t* value16 = nullptr;
  int64_t dim = 0;  // format B: the dense length
  const uint32_t* block_starts = nullptr;
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

constexpr int kBlock16MaxJump = 127;
constexpr uint16_t kBlock16End = 0xffff;
// The value16 of a jump marker advancing 1 <= blocks <= 127.
inline uint16_t Block16Jump(int blocks) {
  return static_cast<uint16_t>(0x7f80 | blocks);
}

// True for the value16 bits of a marker (exponent all ones): a jump when
// the sign is clear and the low 7 bits are not 0, otherwise an end.
inline bool IsBlock16Marker(uint16_t value16) {
  return (value16 & 0x7f80u) == 0x7f80u;
}

// The bf16 the window stores for a finite v: round to nearest even,
// saturated to the largest finite bf16 (never a marker pattern).
uint16_t ToBlock16Value(float v);

// Slots the format-B encoding of n ascending indices takes (n + jumps).
int64_t Block16Slots(const uint32_t* indices, int64_t n);

// Makes n ascending entries fit `slots` slots of format B: while the
// encoding needs more, drops the entry smallest in |value| (ties: the higher
// index), compacting both arrays in place (order kept). Returns the entries
// left. Nothing is dropped when n + jumps <= slots (always when every index
// is < 65536). Otherwise at least min(n, slots - (B - 1)) entries stay,
// B = (largest index) / 65536 + 1 (at most one jump per block after block
// 0), and at least min(n, slots / 2) when B <= 128 (then at most one jump
// per entry).
int64_t FitBlock16(uint32_t* indices, float* values, int64_t n, int64_t slots);

// Encodes n ascending absolute indices (< 2^32) + finite fp32 values into
// format B, values through ToBlock16Value. Requires Block16Slots(indices, n)
// <= slots; writes a kBlock16End marker after the row when it is shorter
// than `slots`. Returns the slots used (without the end marker).
int64_t EncodeBlock16BF16(const uint32_t* indices, const float* values,
                          int64_t n, int64_t slots, uint16_t* index16,
                          uint16_t* value16);

// A format-B SparseRow over `slots` slots (borrowed) of a d-long vector.
SparseRow Block16Row(const uint16_t* index16, const uint16_t* value16,
                     int64_t slots, int64_t dim);

// Decodes a row (either format) to absolute indices and fp32 values.
void DecodeRow(const SparseRow& row, std::vector<uint32_t>* indices,
               std::vector<float>* values);

// The decode index of a format-B row for the CUDA kernels: (*starts)[b] =
// the first slot whose entry or marker lies in block b or later, for
// b <= ceil(dim / 65536); the last one is the slots up to the row's end.
void Block16BlockStarts(const SparseRow& row, std::vector<uint32_t>* starts);

}  // namespace kernels
}  // namespace terse

#endif  // TERSE_COMPRESSORS_KERNELS_SPARSE_OPS_H_
