// A ring of m dense float rows of length d (m*d*4 bytes): the history of
// DenseMfac and Ggt.
//
// Dots and AddLinearCombination stream the whole m x d block once, in column
// blocks that keep the matching slice of the vector in L1, on up to
// `num_threads` threads (rows split for Dots, columns for the combination).
// Every slot always takes part (an unwritten slot is zero), so the cost of a
// product does not depend on how full the window is. Not thread-safe for
// writes.
#ifndef TERSE_EFCP_DENSE_WINDOW_H_
#define TERSE_EFCP_DENSE_WINDOW_H_

#include <cstdint>
#include <vector>

#include "efcp/gradient_window.h"

namespace terse {
namespace efcp {

class DenseWindow : public GradientWindow {
 public:
  // rows >= 1, dim >= 1 (checked by the owning preconditioner's Create).
  // Allocates and zeroes rows*dim floats.
  DenseWindow(int64_t rows, int64_t dim, int num_threads);

  int64_t rows() const override { return rows_; }
  int64_t dim() const override { return dim_; }

  void Dots(const float* x, double* out) const override;
  void AddLinearCombination(const double* coeffs, float* out) const override;
  int64_t memory_bytes() const override;

  // Copies dim() floats into slot `slot` (0 <= slot < rows()).
  void SetRow(int64_t slot, const float* values);
  const float* row(int64_t slot) const { return data_.data() + slot * dim_; }
  float* mutable_row(int64_t slot) { return data_.data() + slot * dim_; }
  // Zeroes every slot.
  void Clear();

 private:
  int64_t rows_;
  int64_t dim_;
  int num_threads_;
  std::vector<float> data_;  // row-major rows_ x dim_
};

// <a, b> over n floats, accumulated in double.
double DotF64(const float* a, const float* b, int64_t n);

}  // namespace efcp
}  // namespace terse

#endif  // TERSE_EFCP_DENSE_WINDOW_H_
