#include "compressors/kernels/sparse_ops.h"

#include <algorithm>

#include "common/half.h"
#include "compressors/kernels/parallel.h"

namespace terse {
namespace kernels {
namespace {

constexpr int64_t kMinEntriesPerThread = int64_t{1} << 15;

int64_t TotalNnz(const SparseRow* rows, int64_t m) {
  int64_t total = 0;
  for (int64_t i = 0; i < m; ++i) total += rows[i].nnz;
  return total;
}

double RowDot(const SparseRow& row, const float* dense) {
  double sum = 0;
  if (row.index32 != nullptr) {
    for (int64_t j = 0; j < row.nnz; ++j) {
      sum += static_cast<double>(row.value32[j]) *
             static_cast<double>(dense[row.index32[j]]);
    }
    return sum;
  }
  for (int64_t b = 0; b < row.num_blocks; ++b) {
    const float* base = dense + b * kBlock16Size;
    for (int64_t j = row.block_offsets[b]; j < row.block_offsets[b + 1]; ++j) {
      sum += static_cast<double>(BFloat16ToFloat(row.value16[j])) *
             static_cast<double>(base[row.index16[j]]);
    }
  }
  return sum;
}

// Adds coeff * row into dense for the entries with lo <= index < hi.
void RowAxpyRange(const SparseRow& row, double coeff, int64_t lo, int64_t hi,
                  float* dense) {
  if (row.index32 != nullptr) {
    const uint32_t* first = std::lower_bound(
        row.index32, row.index32 + row.nnz,
        static_cast<uint32_t>(std::min<int64_t>(lo, UINT32_MAX)));
    for (const uint32_t* p = first; p != row.index32 + row.nnz; ++p) {
      if (*p >= hi) break;
      const int64_t j = p - row.index32;
      dense[*p] += static_cast<float>(coeff * row.value32[j]);
    }
    return;
  }
  const int64_t b_lo = lo / kBlock16Size;
  const int64_t b_hi =
      std::min(row.num_blocks, (hi + kBlock16Size - 1) / kBlock16Size);
  for (int64_t b = b_lo; b < b_hi; ++b) {
    const int64_t base = b * kBlock16Size;
    for (int64_t j = row.block_offsets[b]; j < row.block_offsets[b + 1]; ++j) {
      const int64_t idx = base + row.index16[j];
      if (idx < lo) continue;
      if (idx >= hi) break;
      dense[idx] += static_cast<float>(coeff * BFloat16ToFloat(row.value16[j]));
    }
  }
}

int64_t RowEnd(const SparseRow& row) {
  if (row.nnz == 0) return 0;
  if (row.index32 != nullptr) return int64_t{row.index32[row.nnz - 1]} + 1;
  for (int64_t b = row.num_blocks - 1; b >= 0; --b) {
    if (row.block_offsets[b + 1] > row.block_offsets[b]) {
      return b * kBlock16Size + row.index16[row.block_offsets[b + 1] - 1] + 1;
    }
  }
  return 0;
}

}  // namespace

void Gather(const float* dense, const uint32_t* indices, int64_t k,
            float* values) {
  for (int64_t j = 0; j < k; ++j) values[j] = dense[indices[j]];
}

void ScatterAdd(const uint32_t* indices, const float* values, int64_t k,
                float* dense) {
  for (int64_t j = 0; j < k; ++j) dense[indices[j]] += values[j];
}

void SparseDenseDots(const SparseRow* rows, int64_t m, const float* dense,
                     double* out, int num_threads) {
  if (m <= 0) return;
  int threads =
      ResolveThreads(num_threads, TotalNnz(rows, m), kMinEntriesPerThread);
  threads = static_cast<int>(std::min<int64_t>(threads, m));
  ParallelFor(threads, [&](int t) {
    for (int64_t i = t; i < m; i += threads) out[i] = RowDot(rows[i], dense);
  });
}

void SparseLinearCombination(const SparseRow* rows, int64_t m,
                             const double* coeffs, float* dense,
                             int num_threads) {
  if (m <= 0) return;
  int64_t extent = 0;
  for (int64_t i = 0; i < m; ++i) extent = std::max(extent, RowEnd(rows[i]));
  if (extent == 0) return;
  const int threads =
      ResolveThreads(num_threads, TotalNnz(rows, m), kMinEntriesPerThread);
  ParallelFor(threads, [&](int t) {
    const int64_t lo = ChunkBegin(extent, threads, t);
    const int64_t hi = ChunkBegin(extent, threads, t + 1);
    if (lo >= hi) return;
    for (int64_t i = 0; i < m; ++i) {
      RowAxpyRange(rows[i], coeffs[i], lo, hi, dense);
    }
  });
}

void EncodeBlock16BF16(const uint32_t* indices, const float* values, int64_t k,
                       int64_t d, uint16_t* index16, uint16_t* value16,
                       std::vector<uint32_t>* block_offsets) {
  const int64_t blocks = (d + kBlock16Size - 1) / kBlock16Size;
  block_offsets->assign(blocks + 1, 0);
  int64_t j = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    (*block_offsets)[b] = static_cast<uint32_t>(j);
    const int64_t limit = (b + 1) * kBlock16Size;
    while (j < k && indices[j] < limit) {
      index16[j] = static_cast<uint16_t>(indices[j] & 0xffffu);
      ++j;
    }
  }
  (*block_offsets)[blocks] = static_cast<uint32_t>(j);
  FloatToBFloat16(values, value16, static_cast<size_t>(k));
}

SparseRow Block16Row(const uint16_t* index16, const uint16_t* value16,
                     const std::vector<uint32_t>& block_offsets) {
  SparseRow row;
  row.index16 = index16;
  row.value16 = value16;
  row.block_offsets = block_offsets.data();
  row.num_blocks = block_offsets.empty()
                       ? 0
                       : static_cast<int64_t>(block_offsets.size()) - 1;
  row.nnz = block_offsets.empty() ? 0 : block_offsets.back();
  return row;
}

}  // namespace kernels
}  // namespace terse
