#include "compressors/kernels/topk.h"

#include <cassert>
#include <cstring>
#include <vector>

#include "compressors/kernels/parallel.h"
#include "compressors/kernels/scan.h"

namespace terse {
namespace kernels {
namespace {

// Radix levels over the 31-bit key: bits [20, 31), [10, 20), [0, 10).
constexpr int kLevels = 3;
constexpr int kShift[kLevels] = {20, 10, 0};
constexpr int kBits[kLevels] = {11, 10, 10};
constexpr int kMaxBins = 1 << 11;
constexpr int64_t kMinPerThread = int64_t{1} << 16;
// The candidate path is taken when the threshold bin of level 0 holds at
// most d / kCandidateDivisor entries (it then needs 8 bytes per candidate).
constexpr int64_t kCandidateDivisor = 8;

// Where the k-th largest key lies: entries with (key >> shift) > prefix are
// all taken, `ties` of those with (key >> shift) == prefix are taken (the
// lowest-index ones). gt[t] / eq[t] count both kinds in thread t's chunk.
struct Plan {
  int threads = 1;
  int levels_done = 0;
  int shift = 0;
  uint32_t prefix = 0;
  int64_t ties = 0;       // == the entries still needed among the "equal".
  bool complete = false;  // Every "equal" entry is taken: no finer level.
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
        ++h[KeyOf(x, i) >> shift];
        ++h2[KeyOf(x, i + 1) >> shift];
      }
      if (i < end) ++h[KeyOf(x, i) >> shift];
      for (int b = 0; b < bins; ++b) h[b] += h2[b];
      return;
    }
    const int high = shift + kBits[level];
    const uint32_t mask = static_cast<uint32_t>(bins - 1);
    ForEachAtLeast(x, begin, end, prefix << high, [&](int64_t, uint32_t key) {
      if ((key >> high) == prefix) ++h[(key >> shift) & mask];
    });
  });
}

Plan StartPlan(int64_t d, int64_t k, int num_threads) {
  Plan plan;
  plan.threads = ResolveThreads(num_threads, d, kMinPerThread);
  plan.gt.assign(plan.threads, 0);
  plan.eq.assign(plan.threads, 0);
  plan.ties = k;
  return plan;
}

// Runs the next histogram level and narrows the plan to its chosen bin.
void NextLevel(const float* x, int64_t d, Plan* plan) {
  const int level = plan->levels_done;
  const int threads = plan->threads;
  std::vector<uint32_t> hist;
  Histogram(x, d, threads, level, plan->prefix, &hist);
  const int bins = 1 << kBits[level];
  std::vector<int64_t> total(bins);
  for (int b = 0; b < bins; ++b) {
    int64_t sum = 0;
    for (int t = 0; t < threads; ++t) sum += hist[t * kMaxBins + b];
    total[b] = sum;
  }
  int64_t need = plan->ties;
  int chosen = bins - 1;
  int64_t above = 0;
  while (above + total[chosen] < need) above += total[chosen--];
  assert(chosen >= 0);
  need -= above;
  for (int t = 0; t < threads; ++t) {
    const uint32_t* h = hist.data() + static_cast<size_t>(t) * kMaxBins;
    for (int b = chosen + 1; b < bins; ++b) plan->gt[t] += h[b];
    plan->eq[t] = h[chosen];
  }
  plan->prefix = (plan->prefix << kBits[level]) | static_cast<uint32_t>(chosen);
  plan->shift = kShift[level];
  plan->ties = need;
  plan->complete = total[chosen] == need;
  ++plan->levels_done;
}

// Writes the plan's selection: every thread at an offset known from the
// counts, ties to the lowest indices (the threads in chunk order).
void Collect(const float* x, int64_t d, int64_t k, const Plan& plan,
             uint32_t* indices) {
  const int threads = plan.threads;
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
    ForEachAtLeast(x, begin, end, prefix << shift,
                   [&](int64_t i, uint32_t key) {
                     const uint32_t high = key >> shift;
                     if (high > prefix) {
                       *out++ = static_cast<uint32_t>(i);
                     } else if (tie_budget > 0) {
                       --tie_budget;
                       *out++ = static_cast<uint32_t>(i);
                     }
                   });
  });
}

// After level 0 with a small threshold bin: one pass gathers the entries
// above the bin (all taken) and the bin's entries with their keys; the
// rest of the selection runs on the bin alone, and a merge of two ascending
// lists writes the result.
void CollectWithCandidates(const float* x, int64_t d, int64_t k,
                           const Plan& plan, uint32_t* indices) {
  const int threads = plan.threads;
  std::vector<int64_t> def_offset(threads + 1, 0), cand_offset(threads + 1, 0);
  for (int t = 0; t < threads; ++t) {
    def_offset[t + 1] = def_offset[t] + plan.gt[t];
    cand_offset[t + 1] = cand_offset[t] + plan.eq[t];
  }
  const int64_t num_def = def_offset[threads];
  const int64_t num_cand = cand_offset[threads];
  std::vector<uint32_t> def(num_def), cand(num_cand), cand_key(num_cand);
  ParallelFor(threads, [&](int t) {
    const int64_t begin = ChunkBegin(d, threads, t);
    const int64_t end = ChunkBegin(d, threads, t + 1);
    const int shift = plan.shift;
    const uint32_t prefix = plan.prefix;
    uint32_t* d_out = def.data() + def_offset[t];
    uint32_t* c_out = cand.data() + cand_offset[t];
    uint32_t* k_out = cand_key.data() + cand_offset[t];
    ForEachAtLeast(x, begin, end, prefix << shift,
                   [&](int64_t i, uint32_t key) {
                     if ((key >> shift) > prefix) {
                       *d_out++ = static_cast<uint32_t>(i);
                     } else {
                       *c_out++ = static_cast<uint32_t>(i);
                       *k_out++ = key;
                     }
                   });
  });
  // A magnitude key read as a float has the same key (its sign is clear).
  const TopKThreshold th =
      TopKThresholdKey(reinterpret_cast<const float*>(cand_key.data()),
                       num_cand, plan.ties, threads);
  int64_t ties_left = th.ties_taken;
  int64_t j = 0, o = 0;
  for (int64_t c = 0; c < num_cand; ++c) {
    const uint32_t key = cand_key[c];
    if (key < th.key) continue;
    if (key == th.key) {
      if (ties_left == 0) continue;
      --ties_left;
    }
    while (j < num_def && def[j] < cand[c]) indices[o++] = def[j++];
    indices[o++] = cand[c];
  }
  while (j < num_def) indices[o++] = def[j++];
  assert(o == k);
  (void)k;
}

Plan MakePlan(const float* x, int64_t d, int64_t k, int num_threads,
              bool need_exact) {
  Plan plan = StartPlan(d, k, num_threads);
  while (plan.levels_done < kLevels && !(plan.complete && !need_exact)) {
    NextLevel(x, d, &plan);
  }
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
  Plan plan = StartPlan(d, k, num_threads);
  NextLevel(x, d, &plan);
  int64_t candidates = 0;
  for (int64_t e : plan.eq) candidates += e;
  if (!plan.complete && candidates <= d / kCandidateDivisor) {
    CollectWithCandidates(x, d, k, plan, indices);
    return;
  }
  while (plan.levels_done < kLevels && !plan.complete) NextLevel(x, d, &plan);
  Collect(x, d, k, plan, indices);
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
