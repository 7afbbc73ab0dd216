// The m x d gradient history G seen through the two products every
// full-matrix preconditioner needs: G x (dots of each row with a dense
// vector) and G^T c (a linear combination of the rows). DenseWindow stores
// the rows densely, SparseWindow as sparse rows; M-FAC and GGT are written
// once against this interface.
//
// Rows are ring slots 0..rows()-1; a slot never written is an all-zero row.
// Implementations are not thread-safe for writes; const methods may run
// concurrently with each other.
#ifndef TERSE_EFCP_GRADIENT_WINDOW_H_
#define TERSE_EFCP_GRADIENT_WINDOW_H_

#include <cstdint>

namespace terse {
namespace efcp {

class GradientWindow {
 public:
  virtual ~GradientWindow() = default;

  virtual int64_t rows() const = 0;
  virtual int64_t dim() const = 0;

  // out[i] = <row i, x> accumulated in double, for every slot i < rows().
  // `x` has dim() entries.
  virtual void Dots(const float* x, double* out) const = 0;

  // out += sum_i coeffs[i] * row i (summed in float). `coeffs` has rows()
  // entries, `out` dim().
  virtual void AddLinearCombination(const double* coeffs, float* out) const = 0;

  // Bytes of the stored rows.
  virtual int64_t memory_bytes() const = 0;
};

}  // namespace efcp
}  // namespace terse

#endif  // TERSE_EFCP_GRADIENT_WINDOW_H_
