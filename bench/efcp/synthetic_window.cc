#include "bench/efcp/synthetic_window.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "common/half.h"

namespace terse {
namespace efcp {

void SyntheticWindow(int64_t d, int64_t m, int64_t k,
                     std::vector<SparseVector>* rows,
                     std::vector<double>* gram) {
  std::mt19937 rng(7);
  std::vector<uint32_t> perm(d);
  std::iota(perm.begin(), perm.end(), 0u);
  std::shuffle(perm.begin(), perm.end(), rng);
  const int64_t classes = std::max<int64_t>(1, d / k);
  // The supports of the classes that occur (i mod P for i < m), sorted.
  std::vector<std::vector<uint32_t>> support(std::min(classes, m));
  for (int64_t c = 0; c < static_cast<int64_t>(support.size()); ++c) {
    support[c].assign(perm.begin() + c * k, perm.begin() + (c + 1) * k);
    std::sort(support[c].begin(), support[c].end());
  }
  std::normal_distribution<float> normal;
  rows->assign(m, SparseVector());
  for (int64_t i = 0; i < m; ++i) {
    SparseVector& row = (*rows)[i];
    row.indices = support[i % classes];
    row.values.resize(k);
    for (float& v : row.values) {
      v = BFloat16ToFloat(FloatToBFloat16(normal(rng)));
    }
  }
  // Rows of different classes have disjoint supports: only same-class
  // pairs (j = i mod P, i mod P + P, ...) have a non-zero dot product.
  gram->assign(m * m, 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = i % classes; j <= i; j += classes) {
      double dot = 0;
      const std::vector<float>& a = (*rows)[i].values;
      const std::vector<float>& b = (*rows)[j].values;
      for (int64_t t = 0; t < k; ++t) dot += static_cast<double>(a[t]) * b[t];
      (*gram)[i * m + j] = dot;
      (*gram)[j * m + i] = dot;
    }
  }
}

}  // namespace efcp
}  // namespace terse
