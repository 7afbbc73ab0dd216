// A synthetic full M-FAC window for the EFCP benchmarks (efcp_bench,
// sparse_mfac_cuda_bench): m rows of k entries each, where row i belongs to
// class c = i mod P (P = max(1, d / k)) and every row of a class has the
// same random k-subset of [0, d), disjoint from the other classes' subsets.
// So the Gram matrix is block-sparse and costs O(m * (m / P) * k) to
// compute exactly. Values are standard normal rounded to the bf16 grid
// (valid in either window storage). Deterministic (seed 7).
#ifndef TERSE_BENCH_EFCP_SYNTHETIC_WINDOW_H_
#define TERSE_BENCH_EFCP_SYNTHETIC_WINDOW_H_

#include <cstdint>
#include <vector>

#include "efcp/sparse_mfac.h"

namespace terse {
namespace efcp {

// Fills `rows` (m rows) and `gram` (m x m, row-major). Requires
// 1 <= k <= d and m >= 1.
void SyntheticWindow(int64_t d, int64_t m, int64_t k,
                     std::vector<SparseVector>* rows,
                     std::vector<double>* gram);

}  // namespace efcp
}  // namespace terse

#endif  // TERSE_BENCH_EFCP_SYNTHETIC_WINDOW_H_
