// A ring of m sparse rows of a d-dimensional history (the EFCP window), in
// one of two encodings of kernels::SparseRow:
//   kIndex32Fp32  32-bit absolute indices + fp32 values: 8 bytes an entry.
//   kBlock16Bf16  block-relative 16-bit indices + bf16 values, the block16
//                 format of compressors/kernels/sparse_ops.h: 4 bytes a
//                 slot, and nothing else per row. A slot holds an entry or a
//                 marker (a jump to a block where the next block is not
//                 implied by a descent of the relative index, or the end of
//                 a row shorter than its slots).
// Every row has `capacity` slots (allocated up front, so memory_bytes() is
// what the window holds from the start): exactly rows * capacity * 8 or * 4
// bytes. The slots alone determine every row; the per-row views (pointers
// and the cached count of used slots) are derived bookkeeping, reported by
// bookkeeping_bytes(). Why markers in the slots and no per-row block table:
// a table of ceil(d/65536)+1 offsets costs 68 bytes a row at d = 2^20, more
// than the 3 bytes between 4*floor(0.01 d) and 1% of a dense row, while with
// top-k entries spread over the blocks nearly every boundary is a descent
// and costs no slot; the kernels rebuild what they need (per-row cursors)
// as transient state while walking the rows.
//
// Capacity and entries: in kIndex32Fp32 a row holds up to `capacity`
// entries. In kBlock16Bf16 its entries plus markers must fit `capacity`
// slots; Fit() makes a row fit by dropping its smallest-magnitude entries
// (kernels::FitBlock16), and owners keep what was dropped in their error
// buffer, so what the window stores is exactly what counts as sent. With
// d <= 65536 no marker is ever needed; otherwise a full row of capacity
// slots keeps at least capacity - (ceil(d/65536) - 1) entries.
//
// Rows handed to SetRow are trusted (the owner produced or validated them):
// ascending indices < dim, finite values, and Slots(indices) <= capacity.
// In kBlock16Bf16 the stored values are the bf16 roundings of the given ones
// (kernels::ToBlock16Value); owners that need the exact stored values (error
// feedback, Gram entries) round first with RoundToStorage. Not thread-safe
// for writes.
#ifndef TERSE_EFCP_SPARSE_WINDOW_H_
#define TERSE_EFCP_SPARSE_WINDOW_H_

#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "compressors/kernels/sparse_ops.h"
#include "efcp/gradient_window.h"

namespace terse {
namespace efcp {

enum class WindowStorage : uint32_t {
  kIndex32Fp32 = 0,
  kBlock16Bf16 = 1,
};

// "index32_fp32" / "block16_bf16".
absl::string_view WindowStorageName(WindowStorage storage);

// One sparse row in absolute form (imports, saved state).
struct SparseVector {
  std::vector<uint32_t> indices;  // ascending, < dim
  std::vector<float> values;
};

class SparseWindow : public GradientWindow {
 public:
  // rows, dim, capacity >= 1, capacity <= dim, dim < 2^32 (checked by the
  // owner's Create).
  SparseWindow(int64_t rows, int64_t dim, int64_t capacity,
               WindowStorage storage, int num_threads);

  int64_t rows() const override { return rows_; }
  int64_t dim() const override { return dim_; }
  int64_t capacity() const { return capacity_; }
  WindowStorage storage() const { return storage_; }

  void Dots(const float* x, double* out) const override;
  void AddLinearCombination(const double* coeffs, float* out) const override;
  // The index and value arrays of all slots: everything the window keeps.
  int64_t memory_bytes() const override;
  // The per-row views (derived from the arrays).
  int64_t bookkeeping_bytes() const;

  // The slots n ascending entries take in this storage (n, or n + markers).
  int64_t Slots(const uint32_t* indices, int64_t n) const;
  // Makes n ascending entries fit one row (see "Capacity and entries"):
  // compacts them in place and returns how many stay.
  int64_t Fit(uint32_t* indices, float* values, int64_t n) const;

  // Replaces row `slot` with the given entries (see the trust contract).
  void SetRow(int64_t slot, const uint32_t* indices, const float* values,
              int64_t nnz);
  void ClearRow(int64_t slot);
  void Clear();

  // Entries stored in row `slot` (a decode in kBlock16Bf16: O(capacity)).
  int64_t nnz(int64_t slot) const;
  // Slots row `slot` uses (entries + markers).
  int64_t used_slots(int64_t slot) const { return views_[slot].nnz; }
  const kernels::SparseRow& row(int64_t slot) const { return views_[slot]; }
  // The stored row decoded to absolute indices and fp32 values.
  void ReadRow(int64_t slot, std::vector<uint32_t>* indices,
               std::vector<float>* values) const;

  // The value the window stores for v (identity for fp32, bf16 round trip).
  float RoundToStorage(float v) const;
  void RoundToStorage(float* values, int64_t n) const;

 private:
  int64_t rows_;
  int64_t dim_;
  int64_t capacity_;
  WindowStorage storage_;
  int num_threads_;
  // Format A.
  std::vector<uint32_t> index32_;  // rows_ x capacity_
  std::vector<float> value32_;     // rows_ x capacity_
  // Format B.
  std::vector<uint16_t> index16_;  // rows_ x capacity_
  std::vector<uint16_t> value16_;  // rows_ x capacity_
  std::vector<kernels::SparseRow> views_;
};

}  // namespace efcp
}  // namespace terse

#endif  // TERSE_EFCP_SPARSE_WINDOW_H_
