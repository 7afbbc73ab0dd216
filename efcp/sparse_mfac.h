// SparseMfac: EFCP, the sparse M-FAC with error feedback of Modoranu et al.
// (ICML 2024), on one flat float vector of d parameters.
//
// Per Step(g):
//   a = e + g;  c = top-k(a), k = max(1, floor(density * d));  e = a - c
//   store c in ring slot t mod m (SparseWindow, either storage);
//   update row/column t mod m of G G^T with sparse.dense products (c is
//   scattered into the output buffer, then SparseDenseDots of the m stored
//   rows against it: O(m*k));
//   u = F^-1 c, F = lambda*I + (1/m) G^T G built from the stored sparse
//   rows, computed as m G^T K^-1 e_slot since c is a row (mfac_system.h).
// Cost per step: O(d) for the error buffer, top-k and the output, O(m*k) for
// the products, O(m^2) for the factor (plus the periodic O(m^3) refresh).
// Memory: the window (m*k*8 bytes in kIndex32Fp32, about m*k*4 in
// kBlock16Bf16), the error buffer (d*4) and the m x m matrices.
// Not thread-safe (see preconditioner.h).
#ifndef TERSE_EFCP_SPARSE_MFAC_H_
#define TERSE_EFCP_SPARSE_MFAC_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "efcp/mfac_system.h"
#include "efcp/preconditioner.h"
#include "efcp/sparse_history.h"
#include "efcp/sparse_window.h"

namespace terse {
namespace efcp {

struct SparseMfacOptions {
  int64_t dim = 0;        // d >= 1, < 2^32
  int64_t window = 1024;  // m >= 1
  double damp = 1e-5;     // lambda > 0
  double density = 0.01;  // 0 < density <= 1
  WindowStorage storage = WindowStorage::kIndex32Fp32;
  int64_t refresh_interval = -1;  // -1: m; 0: never (tests only)
  int num_threads = 0;            // 0: min(hardware, 8)
};

class SparseMfac final : public Preconditioner {
 public:
  // InvalidArgument for d < 1 or >= 2^32, m < 1, a damping that is not
  // finite and positive, density outside (0, 1], refresh_interval < -1.
  static absl::StatusOr<std::unique_ptr<SparseMfac>> Create(
      const SparseMfacOptions& options);

  int64_t dim() const override { return options_.dim; }
  absl::Status Step(absl::Span<const float> grad,
                    absl::Span<float> update) override;
  absl::Status Apply(absl::Span<const float> x,
                     absl::Span<float> out) const override;
  int64_t steps() const override { return history_.steps(); }
  MemoryUsage memory() const override;
  std::string SaveState() const override;
  absl::Status RestoreState(absl::string_view blob) override;
  absl::string_view name() const override { return "sparse_mfac"; }

  // Replaces the window with `rows` (slot i <- rows[i], at most m rows; the
  // other slots are cleared) together with their Gram matrix `gram`
  // (row-major rows.size()^2, gram[i][j] = <rows[i], rows[j]>), which is
  // taken on trust except for its diagonal, its symmetry and the positive
  // definiteness of K: recomputing it would cost O(m^2 * k). The rows must be
  // valid (ascending indices < d, at most k entries, finite values already
  // representable in the storage). The error buffer is kept; the step count
  // becomes rows.size(). For benchmarks and for importing a window built
  // elsewhere. On error nothing changes.
  absl::Status ImportWindow(const std::vector<SparseVector>& rows,
                            absl::Span<const double> gram);

  const SparseMfacOptions& options() const { return options_; }
  int64_t k() const { return history_.k(); }
  const SparseWindow& window() const { return history_.window(); }
  const MfacSystem& system() const { return system_; }
  const std::vector<float>& error() const { return history_.error(); }
  void Refactorize() { system_.Refactorize(); }

 private:
  explicit SparseMfac(const SparseMfacOptions& options);
  // Validates rows + Gram (zero-padded to m x m) and commits them.
  absl::Status CommitWindow(const std::vector<SparseVector>& rows,
                            const Eigen::MatrixXd& gram);

  SparseMfacOptions options_;
  SparseHistory history_;
  MfacSystem system_;
};

}  // namespace efcp
}  // namespace terse

#endif  // TERSE_EFCP_SPARSE_MFAC_H_
