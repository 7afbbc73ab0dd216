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
      views_(rows) {
  const size_t entries = static_cast<size_t>(rows * capacity);
  if (storage_ == WindowStorage::kIndex32Fp32) {
    index32_.assign(entries, 0);
    value32_.assign(entries, 0.0f);
  } else {
    index16_.assign(entries, 0);
    value16_.assign(entries, 0);
  }
  Clear();
}

int64_t SparseWindow::memory_bytes() const {
  return static_cast<int64_t>(
      index32_.size() * sizeof(uint32_t) + value32_.size() * sizeof(float) +
      index16_.size() * sizeof(uint16_t) + value16_.size() * sizeof(uint16_t));
}

int64_t SparseWindow::bookkeeping_bytes() const {
  return static_cast<int64_t>(views_.size() * sizeof(kernels::SparseRow));
}

int64_t SparseWindow::Slots(const uint32_t* indices, int64_t n) const {
  if (storage_ == WindowStorage::kIndex32Fp32) return n;
  return kernels::Block16Slots(indices, n);
}

int64_t SparseWindow::Fit(uint32_t* indices, float* values, int64_t n) const {
  if (storage_ == WindowStorage::kIndex32Fp32) return std::min(n, capacity_);
  return kernels::FitBlock16(indices, values, n, capacity_);
}

void SparseWindow::ClearRow(int64_t slot) {
  kernels::SparseRow& view = views_[slot];
  const int64_t base = slot * capacity_;
  if (storage_ == WindowStorage::kIndex32Fp32) {
    view = kernels::SparseRow();
    view.index32 = index32_.data() + base;
    view.value32 = value32_.data() + base;
  } else {
    // An end marker in the first slot: the slots alone say "empty".
    index16_[base] = 0;
    value16_[base] = kernels::kBlock16End;
    view = kernels::Block16Row(index16_.data() + base, value16_.data() + base,
                               0, dim_);
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
    view.nnz = nnz;
  } else {
    view.nnz = kernels::EncodeBlock16BF16(indices, values, nnz, capacity_,
                                          index16_.data() + base,
                                          value16_.data() + base);
  }
}

int64_t SparseWindow::nnz(int64_t slot) const {
  if (storage_ == WindowStorage::kIndex32Fp32) return views_[slot].nnz;
  std::vector<uint32_t> indices;
  std::vector<float> values;
  ReadRow(slot, &indices, &values);
  return static_cast<int64_t>(indices.size());
}

void SparseWindow::ReadRow(int64_t slot, std::vector<uint32_t>* indices,
                           std::vector<float>* values) const {
  kernels::DecodeRow(views_[slot], indices, values);
}

float SparseWindow::RoundToStorage(float v) const {
  if (storage_ == WindowStorage::kIndex32Fp32) return v;
  return BFloat16ToFloat(kernels::ToBlock16Value(v));
}

void SparseWindow::RoundToStorage(float* values, int64_t n) const {
  if (storage_ == WindowStorage::kIndex32Fp32) return;
  for (int64_t i = 0; i < n; ++i) values[i] = RoundToStorage(values[i]);
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
