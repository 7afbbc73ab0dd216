#include "compressors/kernels/topk.h"

#include <cassert>
#include <cstring>
#include <vector>

#include "compressors/kernels/parallel.h"

namespace terse {
namespace kernels {
namespace {

// Radix levels over the 31-bit key: bits [20, 31), [10, 20), [0, 10).
constexpr int kLevels = 3;
constexpr int kShift[kLevels] = {20, 10, 0};
constexpr int kBits[kLevels] = {11, 10, 10};
constexpr int kMaxBins = 1 << 11;
constexpr int64_t kMinPerThread = int64_t{1} << 16;

inline uint32_t KeyAt(const float* x, int64_t i) {
  uint32_t bits;
  std::memcpy(&bits, x + i, sizeof(bits));
  return bits & 0x7fffffffu;
}

// Where the k-th largest key lies: entries with (key >> shift) > prefix are
// all taken, `ties` of those with (key >> shift) == prefix are taken (the
// lowest-index ones). gt[t] / eq[t] count both kinds in thread t's chunk.
struct Plan {
  int threads = 1;
  int shift = 0;
  uint32_t prefix = 0;
  int64_t ties = 0;
  bool exact = false;  // shift == 0: prefix is the k-th largest key itself.
  std::vector<int64_t> gt;
  std::vector<int64_t> eq;
};

// Counts, per thread, the keys of level `level` among entries whose higher
// bits equal `prefix` (every entry at level 0).
void Histogram(const float* x, int64_t d, int threads, int level,
               uint32_t prefix, std::vector<uint32_t>* hist) {
  const int bins = 1 << kBits[level];
  hist->assign(static_cast<size_t>(threads) * kMaxBins, 0);
  ParallelFor(threads, [&](int t) {
    uint32_t* h = hist->data() + static_cast<size_t>(t) * kMaxBins;
    const int64_t begin = ChunkBegin(d, threads, t);
    const int64_t end = ChunkBegin(d, threads, t + 1);
    const int shift = kShift[level];
    if (level == 0) {
      // Two interleaved counters hide the store-to-load latency of
      // consecutive equal bins.
      std::vector<uint32_t> h2(bins, 0);
      int64_t i = begin;
      for (; i + 1 < end; i += 2) {
        ++h[KeyAt(x, i) >> shift];
        ++h2[KeyAt(x, i + 1) >> shift];
      }
      if (i < end) ++h[KeyAt(x, i) >> shift];
      for (int b = 0; b < bins; ++b) h[b] += h2[b];
      return;
    }
    const int high = shift + kBits[level];
    const uint32_t mask = static_cast<uint32_t>(bins - 1);
    for (int64_t i = begin; i < end; ++i) {
      const uint32_t key = KeyAt(x, i);
      if ((key >> high) == prefix) ++h[(key >> shift) & mask];
    }
  });
}

Plan MakePlan(const float* x, int64_t d, int64_t k, int num_threads,
              bool need_exact) {
  Plan plan;
  plan.threads = ResolveThreads(num_threads, d, kMinPerThread);
  const int threads = plan.threads;
  plan.gt.assign(threads, 0);
  plan.eq.assign(threads, 0);
  std::vector<uint32_t> hist;
  std::vector<int64_t> total(kMaxBins);
  int64_t need = k;  // How many of the entries matching `prefix` to take.
  uint32_t prefix = 0;
  for (int level = 0; level < kLevels; ++level) {
    Histogram(x, d, threads, level, prefix, &hist);
    const int bins = 1 << kBits[level];
    for (int b = 0; b < bins; ++b) {
      int64_t sum = 0;
      for (int t = 0; t < threads; ++t) sum += hist[t * kMaxBins + b];
      total[b] = sum;
    }
    int chosen = bins - 1;
    int64_t above = 0;
    while (above + total[chosen] < need) above += total[chosen--];
    assert(chosen >= 0);
    need -= above;
    for (int t = 0; t < threads; ++t) {
      const uint32_t* h = hist.data() + static_cast<size_t>(t) * kMaxBins;
      for (int b = chosen + 1; b < bins; ++b) plan.gt[t] += h[b];
      plan.eq[t] = h[chosen];
    }
    prefix = (prefix << kBits[level]) | static_cast<uint32_t>(chosen);
    plan.shift = kShift[level];
    plan.prefix = prefix;
    plan.ties = need;
    // Every entry of the chosen bin is taken: no finer level is needed.
    if (total[chosen] == need && !need_exact) break;
  }
  plan.exact = plan.shift == 0;
  return plan;
}

}  // namespace

void TopK(const float* x, int64_t d, int64_t k, uint32_t* indices,
          int num_threads) {
  assert(k >= 0 && k <= d);
  if (k <= 0) return;
  if (k >= d) {
    for (int64_t i = 0; i < d; ++i) indices[i] = static_cast<uint32_t>(i);
    return;
  }
  const Plan plan = MakePlan(x, d, k, num_threads, /*need_exact=*/false);
  const int threads = plan.threads;
  // Ties go to the lowest indices: to the threads in chunk order.
  std::vector<int64_t> ties(threads), offset(threads);
  int64_t ties_left = plan.ties;
  int64_t pos = 0;
  for (int t = 0; t < threads; ++t) {
    ties[t] = std::min(plan.eq[t], ties_left);
    ties_left -= ties[t];
    offset[t] = pos;
    pos += plan.gt[t] + ties[t];
  }
  assert(pos == k);
  ParallelFor(threads, [&](int t) {
    const int64_t begin = ChunkBegin(d, threads, t);
    const int64_t end = ChunkBegin(d, threads, t + 1);
    const int shift = plan.shift;
    const uint32_t prefix = plan.prefix;
    int64_t tie_budget = ties[t];
    uint32_t* out = indices + offset[t];
    for (int64_t i = begin; i < end; ++i) {
      const uint32_t high = KeyAt(x, i) >> shift;
      if (high > prefix) {
        *out++ = static_cast<uint32_t>(i);
      } else if (high == prefix && tie_budget > 0) {
        --tie_budget;
        *out++ = static_cast<uint32_t>(i);
      }
    }
  });
}

TopKThreshold TopKThresholdKey(const float* x, int64_t d, int64_t k,
                               int num_threads) {
  assert(k >= 1 && k <= d);
  const Plan plan = MakePlan(x, d, k, num_threads, /*need_exact=*/true);
  TopKThreshold result;
  result.key = plan.prefix;
  result.ties_taken = plan.ties;
  return result;
}

}  // namespace kernels
}  // namespace terse
