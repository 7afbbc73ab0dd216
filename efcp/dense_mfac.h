// DenseMfac: M-FAC (Frantar et al., 2021) over a dense ring of the last m
// gradients, on one flat float vector of d parameters.
//
// F = lambda*I + (1/m) G^T G with G the m x d window (unwritten rows zero);
// Step(g) stores g in slot t mod m and returns u = F^-1 g (the new g
// included), computed as m G^T K^-1 e_slot since g is a row of G. Per step: one
// pass over the window for G g, one for G^T c, and O(m^2) for the factor update
// and solve (mfac_system.h), plus an O(m^3) refactorisation every
// `refresh_interval` steps: O(m*d + m^2) amortised. Memory: m*d*4 bytes of
// window plus 2*m^2*8 bytes of small matrices. Not thread-safe (see
// preconditioner.h).
#ifndef TERSE_EFCP_DENSE_MFAC_H_
#define TERSE_EFCP_DENSE_MFAC_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "efcp/dense_history.h"
#include "efcp/mfac_system.h"
#include "efcp/preconditioner.h"

namespace terse {
namespace efcp {

struct DenseMfacOptions {
  int64_t dim = 0;                // d >= 1
  int64_t window = 1024;          // m >= 1
  double damp = 1e-5;             // lambda > 0
  int64_t refresh_interval = -1;  // -1: m; 0: never (tests only)
  int num_threads = 0;            // 0: min(hardware, 8)
};

class DenseMfac final : public Preconditioner {
 public:
  // InvalidArgument for d or m < 1 (or m*d beyond 2^40 floats), a damping
  // that is not finite and positive, or refresh_interval < -1.
  static absl::StatusOr<std::unique_ptr<DenseMfac>> Create(
      const DenseMfacOptions& options);

  int64_t dim() const override { return options_.dim; }
  absl::Status Step(absl::Span<const float> grad,
                    absl::Span<float> update) override;
  absl::Status Apply(absl::Span<const float> x,
                     absl::Span<float> out) const override;
  int64_t steps() const override { return history_.steps(); }
  MemoryUsage memory() const override;
  std::string SaveState() const override;
  absl::Status RestoreState(absl::string_view blob) override;
  absl::string_view name() const override { return "dense_mfac"; }

  const DenseMfacOptions& options() const { return options_; }
  const DenseWindow& window() const { return history_.window(); }
  const MfacSystem& system() const { return system_; }
  // Forces the O(m^3) refactorisation now (benchmarks, tests).
  void Refactorize() { system_.Refactorize(); }

 private:
  explicit DenseMfac(const DenseMfacOptions& options);

  DenseMfacOptions options_;
  DenseHistory history_;
  MfacSystem system_;
};

}  // namespace efcp
}  // namespace terse

#endif  // TERSE_EFCP_DENSE_MFAC_H_
