#include "compressors/kernels/sparse_ops.h"

#include <algorithm>
#include <cmath>

#include "common/half.h"
#include "compressors/kernels/parallel.h"

namespace terse {
namespace kernels {
namespace {

constexpr int64_t kMinEntriesPerThread = int64_t{1} << 15;

// The m-row kernels walk the dense vector in tiles of kTile floats (256 KiB,
// within one core's L2) and, per tile, every row's entries that fall in it,
// so the random accesses into `dense` hit L2 instead of L3/DRAM. At d = 2^20,
// m = 1024, density 1% (bench/efcp:sparse_kernels_bench) this cut the CPU
// time per entry from 10-20 ns to 4-6 ns for format B and for the linear
// combination; format-A dots, whose sorted rows already streamed well, stay
// at 3-7 ns. L1-sized tiles measured slower (more per-row overhead, shorter
// row streams). kTile
// divides the format-B block, so a tile never straddles a block. Each row's
// entries are still visited in index order, and every dense element still
// receives its terms in row order: results are bit-identical to untiled
// row-by-row loops. Format-B rows carry no block index: the dots walk each
// row from its start anyway, and the linear combination's threads find their
// starting cursor by walking the slots below their range (a read-only pass,
// a small fraction of the multiply-add pass; measured in efcp_bench).
constexpr int64_t kTile = kBlock16Size;
static_assert(kBlock16Size % kTile == 0, "a tile must divide a block");

// A position in a row while walking it in index order: the next slot, and
// for format B the decoder state (current block, previous relative index or
// -1 at the row start and after a jump marker).
struct Cursor {
  int64_t j = 0;
  int64_t block = 0;
  int32_t prev = -1;
};

// The jump markers an entry (block b >= block, relative index r) needs
// after the state (block, prev) (see the format in sparse_ops.h).
inline int JumpsNeeded(int64_t block, int32_t prev, int64_t b, int32_t r) {
  if (b == block) return 0;
  if (b == block + 1 && prev >= 0 && r <= prev) return 0;  // A descent.
  return static_cast<int>((b - block + kBlock16MaxJump - 1) / kBlock16MaxJump);
}

// Calls fn(absolute index, value) for the entries of `row` from *cursor on
// whose index is below `end`, and advances *cursor past them (format B: also
// past the markers before the first entry at or above `end`, unless that
// marker is a jump to a block at or above `end`).
template <typename Fn>
inline void ForEntriesBelow(const SparseRow& row, int64_t end, Cursor* cursor,
                            Fn fn) {
  int64_t j = cursor->j;
  if (row.index32 != nullptr) {
    const uint32_t limit =
        static_cast<uint32_t>(std::min<int64_t>(end, int64_t{UINT32_MAX}));
    const uint32_t* index = row.index32;
    const float* value = row.value32;
    for (; j < row.nnz && index[j] < limit; ++j) fn(index[j], value[j]);
    cursor->j = j;
    return;
  }
  end = std::min(end, row.dim);
  const int64_t n = row.nnz;
  const uint16_t* index = row.index16;
  const uint16_t* value = row.value16;
  int64_t block = cursor->block;
  int32_t prev = cursor->prev;
  while (j < n) {
    if (prev >= 0) {
      // Fast path: ascending entries of `block` below `end`. A marker
      // (index16 0 <= prev), a descent or `end` leaves the loop.
      const int64_t base = block * kBlock16Size;
      const int64_t limit = end - base;
      for (; j < n; ++j) {
        const int32_t r = index[j];
        if ((r <= prev) | (r >= limit)) break;
        fn(base + r, BFloat16ToFloat(value[j]));
        prev = r;
      }
      if (j >= n) break;
    }
    const uint16_t v = value[j];
    const int32_t r = index[j];
    if (IsBlock16Marker(v)) {
      const int blocks = v & 0x7f;
      if ((v & 0x8000u) != 0 || blocks == 0) break;  // The end: stay on it.
      if ((block + blocks) * kBlock16Size >= end) break;
      block += blocks;
      prev = -1;
      ++j;
      continue;
    }
    // An entry the fast path did not take: the first one of the row or
    // after a jump (prev < 0), a descent into the next block, or one at or
    // above `end`.
    const int64_t b = prev >= 0 && r <= prev ? block + 1 : block;
    if (b * kBlock16Size + r >= end) break;
    fn(b * kBlock16Size + r, BFloat16ToFloat(v));
    block = b;
    prev = r;
    ++j;
  }
  cursor->j = j;
  cursor->block = block;
  cursor->prev = prev;
}

// The cursor at the first entry of `row` with index >= lo.
Cursor CursorAt(const SparseRow& row, int64_t lo) {
  Cursor cursor;
  if (row.index32 != nullptr) {
    cursor.j = std::lower_bound(
                   row.index32, row.index32 + row.nnz,
                   static_cast<uint32_t>(std::min<int64_t>(lo, UINT32_MAX))) -
               row.index32;
    return cursor;
  }
  // Format B has no index to search: walk the slots below lo, 16 at a time
  // while a group holds no marker and its descents keep it below lo's block
  // (branch-free; most of the walk), then entry by entry.
  constexpr int kGroup = 16;
  const int64_t target = std::min(lo, row.dim) / kBlock16Size;
  const uint16_t* index = row.index16;
  const uint16_t* value = row.value16;
  int64_t j = 0, block = 0;
  int32_t prev = -1;
  while (block < target && j + kGroup <= row.nnz) {
    int descents = index[j] <= prev ? 1 : 0;
    int markers = IsBlock16Marker(value[j]) ? 1 : 0;
    for (int q = 1; q < kGroup; ++q) {
      descents += index[j + q] <= index[j + q - 1] ? 1 : 0;
      markers += IsBlock16Marker(value[j + q]) ? 1 : 0;
    }
    if (markers != 0 || block + descents >= target) break;
    block += descents;
    prev = index[j + kGroup - 1];
    j += kGroup;
  }
  cursor.j = j;
  cursor.block = block;
  cursor.prev = prev;
  ForEntriesBelow(row, lo, &cursor, [](int64_t, float) {});
  return cursor;
}

int64_t TotalNnz(const SparseRow* rows, int64_t m) {
  int64_t total = 0;
  for (int64_t i = 0; i < m; ++i) total += rows[i].nnz;
  return total;
}

// An upper bound of the row's indices + 1 (format B: its dim).
int64_t RowEnd(const SparseRow& row) {
  if (row.nnz == 0) return 0;
  if (row.index32 != nullptr) return int64_t{row.index32[row.nnz - 1]} + 1;
  return row.dim;
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
  int64_t extent = 0;
  for (int64_t i = 0; i < m; ++i) extent = std::max(extent, RowEnd(rows[i]));
  int threads =
      ResolveThreads(num_threads, TotalNnz(rows, m), kMinEntriesPerThread);
  threads = static_cast<int>(std::min<int64_t>(threads, m));
  ParallelFor(threads, [&](int t) {
    // Thread t owns the contiguous rows [lo, hi).
    const int64_t lo = ChunkBegin(m, threads, t);
    const int64_t hi = ChunkBegin(m, threads, t + 1);
    std::vector<Cursor> cursor(hi - lo);
    std::vector<double> sum(hi - lo, 0.0);
    for (int64_t start = 0; start < extent; start += kTile) {
      const int64_t end = std::min(extent, start + kTile);
      for (int64_t i = lo; i < hi; ++i) {
        double s = sum[i - lo];
        ForEntriesBelow(rows[i], end, &cursor[i - lo],
                        [&s, dense](int64_t index, float value) {
                          s += static_cast<double>(value) *
                               static_cast<double>(dense[index]);
                        });
        sum[i - lo] = s;
      }
    }
    for (int64_t i = lo; i < hi; ++i) out[i] = sum[i - lo];
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
    // Thread t owns the dense range [lo, hi).
    const int64_t lo = ChunkBegin(extent, threads, t);
    const int64_t hi = ChunkBegin(extent, threads, t + 1);
    if (lo >= hi) return;
    std::vector<Cursor> cursor(m);
    for (int64_t i = 0; i < m; ++i) cursor[i] = CursorAt(rows[i], lo);
    for (int64_t start = lo; start < hi;) {
      const int64_t end = std::min(hi, (start / kTile + 1) * kTile);
      for (int64_t i = 0; i < m; ++i) {
        const double coeff = coeffs[i];
        ForEntriesBelow(rows[i], end, &cursor[i],
                        [coeff, dense](int64_t index, float value) {
                          dense[index] += static_cast<float>(coeff * value);
                        });
      }
      start = end;
    }
  });
}

uint16_t ToBlock16Value(float v) {
  uint16_t bits = FloatToBFloat16(v);
  if (IsBlock16Marker(bits) && std::isfinite(v)) {
    bits = static_cast<uint16_t>((bits & 0x8000u) | 0x7f7fu);
  }
  return bits;
}

int64_t Block16Slots(const uint32_t* indices, int64_t n) {
  int64_t slots = n, block = 0;
  int32_t prev = -1;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t b = indices[j] >> 16;
    const int32_t r = static_cast<int32_t>(indices[j] & 0xffffu);
    slots += JumpsNeeded(block, prev, b, r);
    block = b;
    prev = r;
  }
  return slots;
}

int64_t FitBlock16(uint32_t* indices, float* values, int64_t n, int64_t slots) {
  if (n <= 0 || Block16Slots(indices, n) <= slots) return n;
  // Entries as a doubly linked list in index order; need[j] = 1 when entry
  // j needs a jump marker after its current predecessor.
  std::vector<int64_t> before(n), after(n);
  std::vector<int> need(n);
  std::vector<char> dropped(n, 0);
  auto needs = [&](int64_t p, int64_t q) {
    const int64_t block = p < 0 ? 0 : indices[p] >> 16;
    const int32_t prev =
        p < 0 ? -1 : static_cast<int32_t>(indices[p] & 0xffffu);
    return JumpsNeeded(block, prev, indices[q] >> 16,
                       static_cast<int32_t>(indices[q] & 0xffffu));
  };
  int64_t total = n;
  for (int64_t j = 0; j < n; ++j) {
    before[j] = j - 1;
    after[j] = j + 1 < n ? j + 1 : -1;
    need[j] = needs(j - 1, j);
    total += need[j];
  }
  std::vector<int64_t> order(n);
  for (int64_t j = 0; j < n; ++j) order[j] = j;
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const float fa = std::fabs(values[a]), fb = std::fabs(values[b]);
    return fa != fb ? fa < fb : a > b;
  });
  for (int64_t x : order) {
    if (total <= slots) break;
    const int64_t p = before[x], q = after[x];
    total -= 1 + need[x];
    dropped[x] = 1;
    if (p >= 0) after[p] = q;
    if (q >= 0) {
      before[q] = p;
      const int now = needs(p, q);
      total += now - need[q];
      need[q] = now;
    }
  }
  int64_t kept = 0;
  for (int64_t j = 0; j < n; ++j) {
    if (dropped[j]) continue;
    indices[kept] = indices[j];
    values[kept] = values[j];
    ++kept;
  }
  return kept;
}

int64_t EncodeBlock16BF16(const uint32_t* indices, const float* values,
                          int64_t n, int64_t slots, uint16_t* index16,
                          uint16_t* value16) {
  int64_t s = 0, block = 0;
  int32_t prev = -1;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t b = indices[j] >> 16;
    const int32_t r = static_cast<int32_t>(indices[j] & 0xffffu);
    for (int jumps = JumpsNeeded(block, prev, b, r); jumps > 0; --jumps) {
      const int64_t blocks = std::min<int64_t>(b - block, kBlock16MaxJump);
      index16[s] = 0;
      value16[s] = Block16Jump(static_cast<int>(blocks));
      ++s;
      block += blocks;
    }
    index16[s] = static_cast<uint16_t>(r);
    value16[s] = ToBlock16Value(values[j]);
    ++s;
    block = b;
    prev = r;
  }
  if (s < slots) {
    index16[s] = 0;
    value16[s] = kBlock16End;
  }
  return s;
}

SparseRow Block16Row(const uint16_t* index16, const uint16_t* value16,
                     int64_t slots, int64_t dim) {
  SparseRow row;
  row.index16 = index16;
  row.value16 = value16;
  row.nnz = slots;
  row.dim = dim;
  return row;
}

void DecodeRow(const SparseRow& row, std::vector<uint32_t>* indices,
               std::vector<float>* values) {
  indices->clear();
  values->clear();
  Cursor cursor;
  ForEntriesBelow(row, RowEnd(row), &cursor,
                  [indices, values](int64_t index, float value) {
                    indices->push_back(static_cast<uint32_t>(index));
                    values->push_back(value);
                  });
}

void Block16BlockStarts(const SparseRow& row, std::vector<uint32_t>* starts) {
  const int64_t blocks = (row.dim + kBlock16Size - 1) / kBlock16Size;
  starts->assign(blocks + 1, 0);
  Cursor cursor;
  for (int64_t b = 0; b < blocks; ++b) {
    ForEntriesBelow(row, (b + 1) * kBlock16Size, &cursor,
                    [](int64_t, float) {});
    (*starts)[b + 1] = static_cast<uint32_t>(cursor.j);
  }
}

}  // namespace kernels
}  // namespace terse
