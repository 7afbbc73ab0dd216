// A ring of m sparse rows of a d-dimensional history (the EFCP window), in
// one of two encodings of kernels::SparseRow:
//   kIndex32Fp32  32-bit absolute indices + fp32 values: 8 bytes an entry.
//   kBlock16Bf16  block-relative 16-bit indices + bf16 values: 4 bytes an
//                 entry plus ceil(d/65536)+1 32-bit block offsets a row.
// Every slot has room for `capacity` entries (allocated up front, so
// memory_bytes() is what the window holds from the start). The products go
// through compressors/kernels (SparseDenseDots, SparseLinearCombination).
//
// Rows handed to SetRow are trusted (the owner produced or validated them):
// ascending indices < dim, nnz <= capacity, finite values. In kBlock16Bf16
// the stored values are the bf16 roundings of the given ones; owners that
// need the exact stored values (error feedback, Gram entries) round first
// with RoundToStorage. Not thread-safe for writes.
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
  // Index, value and block-offset arrays of all slots.
  int64_t memory_bytes() const override;
  // The per-slot row descriptors.
  int64_t bookkeeping_bytes() const;

  // Replaces slot `slot` with the given entries (see the trust contract).
  void SetRow(int64_t slot, const uint32_t* indices, const float* values,
              int64_t nnz);
  void ClearRow(int64_t slot);
  void Clear();

  int64_t nnz(int64_t slot) const { return views_[slot].nnz; }
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
  int64_t num_blocks_;  // format B only
  // Format A.
  std::vector<uint32_t> index32_;  // rows_ x capacity_
  std::vector<float> value32_;     // rows_ x capacity_
  // Format B.
  std::vector<uint16_t> index16_;         // rows_ x capacity_
  std::vector<uint16_t> value16_;         // rows_ x capacity_
  std::vector<uint32_t> block_offsets_;   // rows_ x (num_blocks_ + 1)
  std::vector<uint32_t> encode_scratch_;  // num_blocks_ + 1
  std::vector<kernels::SparseRow> views_;
};

}  // namespace efcp
}  // namespace terse

#endif  // TERSE_EFCP_SPARSE_WINDOW_H_
