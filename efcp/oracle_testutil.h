// fp64 references for the EFCP tests, computed from the d x d closed forms
// (independent of the Woodbury / Gram-matrix route the library takes), and
// small helpers to compare against them. Test-only.
#ifndef TERSE_EFCP_ORACLE_TESTUTIL_H_
#define TERSE_EFCP_ORACLE_TESTUTIL_H_

#include <cstdint>
#include <deque>
#include <random>
#include <vector>

namespace terse {
namespace efcp {

using DoubleRows = std::vector<std::vector<double>>;

// The last `capacity` vectors pushed (older ones dropped); row order does not
// matter to either closed form.
class RingReference {
 public:
  explicit RingReference(int64_t capacity) : capacity_(capacity) {}
  void Push(const std::vector<double>& row);
  void Push(const std::vector<float>& row);
  DoubleRows rows() const { return {rows_.begin(), rows_.end()}; }

 private:
  int64_t capacity_;
  std::deque<std::vector<double>> rows_;
};

// u = F^-1 x with F = lambda*I + (1/m) sum_r r r^T (d x d, solved by LLT).
// `rows` may hold fewer than m rows (the rest are zero).
std::vector<double> MfacReference(const DoubleRows& rows, int64_t m,
                                  double lambda, const std::vector<double>& x);

// u = (eps*I + (sum_r r r^T)^{1/2})^-1 g from the full d x d
// eigendecomposition.
std::vector<double> GgtReference(const DoubleRows& rows, double eps,
                                 const std::vector<double>& g);

// |got - want| / |want| (Euclidean).
double RelativeError(const std::vector<float>& got,
                     const std::vector<double>& want);

std::vector<float> RandomVector(int64_t d, std::mt19937* rng,
                                double scale = 1.0);
std::vector<double> ToDouble(const std::vector<float>& v);

}  // namespace efcp
}  // namespace terse

#endif  // TERSE_EFCP_ORACLE_TESTUTIL_H_
