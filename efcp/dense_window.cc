#include "efcp/dense_window.h"

#include <algorithm>
#include <cstring>

#include "efcp/parallel_for.h"

namespace terse {
namespace efcp {
namespace {

// Columns per block: 2048 floats (8 KiB) of the vector stay in L1 while the
// rows stream past.
constexpr int64_t kColumnBlock = 2048;
// Below this many floats of work a product stays on the calling thread.
constexpr int64_t kMinParallelWork = 1 << 16;

}  // namespace

double DotF64(const float* a, const float* b, int64_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += static_cast<double>(a[i]) * b[i];
    s1 += static_cast<double>(a[i + 1]) * b[i + 1];
    s2 += static_cast<double>(a[i + 2]) * b[i + 2];
    s3 += static_cast<double>(a[i + 3]) * b[i + 3];
  }
  for (; i < n; ++i) s0 += static_cast<double>(a[i]) * b[i];
  return (s0 + s1) + (s2 + s3);
}

DenseWindow::DenseWindow(int64_t rows, int64_t dim, int num_threads)
    : rows_(rows),
      dim_(dim),
      num_threads_(ResolveNumThreads(num_threads)),
      data_(static_cast<size_t>(rows * dim), 0.0f) {}

int64_t DenseWindow::memory_bytes() const {
  return static_cast<int64_t>(data_.size() * sizeof(float));
}

void DenseWindow::SetRow(int64_t slot, const float* values) {
  std::memcpy(mutable_row(slot), values, sizeof(float) * dim_);
}

void DenseWindow::Clear() { std::fill(data_.begin(), data_.end(), 0.0f); }

void DenseWindow::Dots(const float* x, double* out) const {
  const int threads = rows_ * dim_ >= kMinParallelWork ? num_threads_ : 1;
  ParallelFor(rows_, threads, 1, 1, [&](int64_t row_begin, int64_t row_end) {
    std::fill(out + row_begin, out + row_end, 0.0);
    for (int64_t c0 = 0; c0 < dim_; c0 += kColumnBlock) {
      const int64_t len = std::min(kColumnBlock, dim_ - c0);
      for (int64_t i = row_begin; i < row_end; ++i) {
        out[i] += DotF64(row(i) + c0, x + c0, len);
      }
    }
  });
}

void DenseWindow::AddLinearCombination(const double* coeffs, float* out) const {
  const int threads = rows_ * dim_ >= kMinParallelWork ? num_threads_ : 1;
  ParallelFor(dim_, threads, kColumnBlock, kColumnBlock,
              [&](int64_t col_begin, int64_t col_end) {
                for (int64_t c0 = col_begin; c0 < col_end; c0 += kColumnBlock) {
                  const int64_t len = std::min(kColumnBlock, col_end - c0);
                  float* dst = out + c0;
                  for (int64_t i = 0; i < rows_; ++i) {
                    const float c = static_cast<float>(coeffs[i]);
                    if (c == 0.0f) continue;
                    const float* src = row(i) + c0;
                    for (int64_t j = 0; j < len; ++j) dst[j] += c * src[j];
                  }
                }
              });
}

}  // namespace efcp
}  // namespace terse
