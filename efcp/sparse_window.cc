#include "efcp/sparse_window.h"

#include <algorithm>

#include "common/half.h"

namespace terse {
namespace efcp {

absl::string_view WindowStorageName(WindowStorage storage) {
  switch (storage) {
    case WindowStorage::kIndex32Fp32:
      return "index32_fp32";
    case WindowStorage::kBlock16Bf16:
      return "block16_bf16";
  }
  return "unknown";
}

SparseWindow::SparseWindow(int64_t rows, int64_t dim, int64_t capacity,
                           WindowStorage storage, int num_threads)
    : rows_(rows),
      dim_(dim),
      capacity_(capacity),
      storage_(storage),
      num_threads_(num_threads),
      num_blocks_((dim + kernels::kBlock16Size - 1) / kernels::kBlock16Size),
      views_(rows) {
  const size_t entries = static_cast<size_t>(rows * capacity);
  if (storage_ == WindowStorage::kIndex32Fp32) {
    index32_.assign(entries, 0);
    value32_.assign(entries, 0.0f);
  } else {
    index16_.assign(entries, 0);
    value16_.assign(entries, 0);
    block_offsets_.assign(static_cast<size_t>(rows * (num_blocks_ + 1)), 0);
  }
  Clear();
}

int64_t SparseWindow::memory_bytes() const {
  return static_cast<int64_t>(
      index32_.size() * sizeof(uint32_t) + value32_.size() * sizeof(float) +
      index16_.size() * sizeof(uint16_t) + value16_.size() * sizeof(uint16_t) +
      block_offsets_.size() * sizeof(uint32_t));
}

int64_t SparseWindow::bookkeeping_bytes() const {
  return static_cast<int64_t>(views_.size() * sizeof(kernels::SparseRow) +
                              encode_scratch_.capacity() * sizeof(uint32_t));
}

void SparseWindow::ClearRow(int64_t slot) {
  kernels::SparseRow& view = views_[slot];
  view = kernels::SparseRow();
  const int64_t base = slot * capacity_;
  if (storage_ == WindowStorage::kIndex32Fp32) {
    view.index32 = index32_.data() + base;
    view.value32 = value32_.data() + base;
  } else {
    uint32_t* offsets = block_offsets_.data() + slot * (num_blocks_ + 1);
    std::fill(offsets, offsets + num_blocks_ + 1, 0u);
    view.index16 = index16_.data() + base;
    view.value16 = value16_.data() + base;
    view.block_offsets = offsets;
    view.num_blocks = num_blocks_;
  }
}

void SparseWindow::Clear() {
  for (int64_t slot = 0; slot < rows_; ++slot) ClearRow(slot);
}

void SparseWindow::SetRow(int64_t slot, const uint32_t* indices,
                          const float* values, int64_t nnz) {
  ClearRow(slot);
  kernels::SparseRow& view = views_[slot];
  const int64_t base = slot * capacity_;
  if (storage_ == WindowStorage::kIndex32Fp32) {
    // copy_n, not memcpy: an empty row may come with null pointers (an
    // empty vector's data()), which memcpy must not be given even for 0
    // bytes (UBSan: "null pointer passed as argument 2").
    std::copy_n(indices, nnz, index32_.data() + base);
    std::copy_n(values, nnz, value32_.data() + base);
  } else {
    kernels::EncodeBlock16BF16(indices, values, nnz, dim_,
                               index16_.data() + base, value16_.data() + base,
                               &encode_scratch_);
    std::copy(encode_scratch_.begin(), encode_scratch_.end(),
              block_offsets_.begin() + slot * (num_blocks_ + 1));
  }
  view.nnz = nnz;
}

void SparseWindow::ReadRow(int64_t slot, std::vector<uint32_t>* indices,
                           std::vector<float>* values) const {
  const kernels::SparseRow& view = views_[slot];
  indices->resize(view.nnz);
  values->resize(view.nnz);
  if (storage_ == WindowStorage::kIndex32Fp32) {
    std::copy(view.index32, view.index32 + view.nnz, indices->begin());
    std::copy(view.value32, view.value32 + view.nnz, values->begin());
    return;
  }
  for (int64_t b = 0; b < view.num_blocks; ++b) {
    for (uint32_t j = view.block_offsets[b]; j < view.block_offsets[b + 1];
         ++j) {
      (*indices)[j] =
          static_cast<uint32_t>(b * kernels::kBlock16Size + view.index16[j]);
    }
  }
  BFloat16ToFloat(view.value16, values->data(), view.nnz);
}

float SparseWindow::RoundToStorage(float v) const {
  if (storage_ == WindowStorage::kIndex32Fp32) return v;
  return BFloat16ToFloat(FloatToBFloat16(v));
}

void SparseWindow::RoundToStorage(float* values, int64_t n) const {
  if (storage_ == WindowStorage::kIndex32Fp32) return;
  for (int64_t i = 0; i < n; ++i) {
    values[i] = BFloat16ToFloat(FloatToBFloat16(values[i]));
  }
}

void SparseWindow::Dots(const float* x, double* out) const {
  kernels::SparseDenseDots(views_.data(), rows_, x, out, num_threads_);
}

void SparseWindow::AddLinearCombination(const double* coeffs,
                                        float* out) const {
  kernels::SparseLinearCombination(views_.data(), rows_, coeffs, out,
                                   num_threads_);
}

}  // namespace efcp
}  // namespace terse
