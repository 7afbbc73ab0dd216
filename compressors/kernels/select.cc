#include "compressors/kernels/select.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include "compressors/kernels/parallel.h"
#include "compressors/kernels/randomk.h"
#include "compressors/kernels/sparse_ops.h"
#include "compressors/kernels/topk.h"

namespace terse {
namespace kernels {
namespace {

constexpr int64_t kMinPerThread = int64_t{1} << 16;
constexpr int64_t kExactBelow = int64_t{1} << 16;

inline uint32_t KeyAt(const float* x, int64_t i) {
  uint32_t bits;
  std::memcpy(&bits, x + i, sizeof(bits));
  return bits & 0x7fffffffu;
}

void ExactTopK(const float* x, int64_t d, int64_t k, int num_threads,
               std::vector<uint32_t>* indices) {
  indices->resize(k);
  TopK(x, d, k, indices->data(), num_threads);
}

// Keeps the k largest of the candidate positions `cand` (ascending), with
// the same tie rule as TopK (lower index wins: candidates are ascending).
void TopKOfCandidates(const float* x, int64_t k, std::vector<uint32_t>* cand) {
  const int64_t n = static_cast<int64_t>(cand->size());
  if (k >= n) return;
  std::vector<float> values(n);
  Gather(x, cand->data(), n, values.data());
  std::vector<uint32_t> pick(k);
  TopK(values.data(), n, k, pick.data(), 1);
  for (int64_t j = 0; j < k; ++j) pick[j] = (*cand)[pick[j]];
  cand->swap(pick);
}

// The index of the sample key with rank `rank` (1-based, descending).
uint32_t KthLargestKey(std::vector<uint32_t> keys, int64_t rank) {
  auto nth = keys.begin() + (rank - 1);
  std::nth_element(keys.begin(), nth, keys.end(), std::greater<uint32_t>());
  return *nth;
}

}  // namespace

uint32_t ThresholdKey(float threshold) {
  uint32_t bits;
  std::memcpy(&bits, &threshold, sizeof(bits));
  return bits & 0x7fffffffu;
}

int64_t SelectAtLeast(const float* x, int64_t d, uint32_t key, int64_t cap,
                      std::vector<uint32_t>* indices, int num_threads) {
  const int threads = ResolveThreads(num_threads, d, kMinPerThread);
  std::vector<std::vector<uint32_t>> local(threads);
  std::vector<int64_t> counts(threads, 0);
  ParallelFor(threads, [&](int t) {
    const int64_t begin = ChunkBegin(d, threads, t);
    const int64_t end = ChunkBegin(d, threads, t + 1);
    std::vector<uint32_t>& out = local[t];
    int64_t n = 0;
    for (int64_t i = begin; i < end; ++i) {
      if (KeyAt(x, i) >= key) {
        if (n < cap) out.push_back(static_cast<uint32_t>(i));
        ++n;
      }
    }
    counts[t] = n;
  });
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  indices->clear();
  if (total > cap) return total;
  indices->reserve(total);
  for (const auto& part : local) {
    indices->insert(indices->end(), part.begin(), part.end());
  }
  return total;
}

int64_t CountAtLeast(const float* x, int64_t d, uint32_t key, int num_threads) {
  const int threads = ResolveThreads(num_threads, d, kMinPerThread);
  std::vector<int64_t> counts(threads, 0);
  ParallelFor(threads, [&](int t) {
    const int64_t begin = ChunkBegin(d, threads, t);
    const int64_t end = ChunkBegin(d, threads, t + 1);
    int64_t n = 0;
    for (int64_t i = begin; i < end; ++i) n += KeyAt(x, i) >= key;
    counts[t] = n;
  });
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  return total;
}

void SampledTopK(const float* x, int64_t d, int64_t k,
                 const SampledTopKOptions& options,
                 std::vector<uint32_t>* indices, SelectStats* stats) {
  assert(k >= 0 && k <= d);
  SelectStats local_stats;
  SelectStats* st = stats != nullptr ? stats : &local_stats;
  *st = SelectStats();
  indices->clear();
  if (k <= 0) return;
  if (d < kExactBelow || k >= d) {
    st->fell_back_to_exact = true;
    ExactTopK(x, d, k, options.num_threads, indices);
    return;
  }
  // Stratified sample: one position in each of s equal strata.
  int64_t s = static_cast<int64_t>(std::llround(options.sample_fraction * d));
  s = std::min(d, std::max(s, options.min_sample));
  std::vector<uint32_t> keys(s);
  uint64_t state = options.seed;
  for (int64_t j = 0; j < s; ++j) {
    const int64_t begin =
        static_cast<int64_t>((static_cast<unsigned __int128>(d) * j) / s);
    const int64_t end =
        static_cast<int64_t>((static_cast<unsigned __int128>(d) * (j + 1)) / s);
    const int64_t pos =
        begin +
        static_cast<int64_t>(UniformBelow(
            &state, static_cast<uint64_t>(std::max<int64_t>(end - begin, 1))));
    keys[j] = KeyAt(x, pos);
  }
  const int64_t cap = 4 * k;
  const double target = options.overshoot * static_cast<double>(k);
  const int64_t lower = static_cast<int64_t>(
      std::ceil(options.lower_fraction * static_cast<double>(k)));
  // Rank of the threshold inside the sample (1 = the largest sample key).
  double rank = std::ceil(target * static_cast<double>(s) / d);
  for (int attempt = 0; attempt <= options.max_adjust; ++attempt) {
    const int64_t r =
        std::min<int64_t>(s, std::max<int64_t>(1, static_cast<int64_t>(rank)));
    const uint32_t key = KthLargestKey(keys, r);
    st->threshold_key = key;
    const int64_t n =
        SelectAtLeast(x, d, key, cap, indices, options.num_threads);
    ++st->passes;
    if (n <= cap && n >= k) {
      TopKOfCandidates(x, k, indices);
      return;
    }
    if (n <= cap && n >= lower) return;
    // Too few (lower the threshold) or too many (raise it): rescale the
    // sample rank by how far off the count was.
    if ((n < lower && r == s) || (n > cap && r == 1)) break;
    const double scaled = static_cast<double>(r) * target /
                          static_cast<double>(std::max<int64_t>(n, 1));
    rank = n < lower ? std::max(scaled, static_cast<double>(r + 1))
                     : std::min(scaled, static_cast<double>(r - 1));
  }
  st->fell_back_to_exact = true;
  ExactTopK(x, d, k, options.num_threads, indices);
}

void ThresholdSearch(const float* x, int64_t d, int64_t k,
                     const ThresholdSearchOptions& options,
                     std::vector<uint32_t>* indices, SelectStats* stats) {
  assert(k >= 0 && k <= d);
  SelectStats local_stats;
  SelectStats* st = stats != nullptr ? stats : &local_stats;
  *st = SelectStats();
  indices->clear();
  if (k <= 0) return;
  if (k >= d) {
    st->fell_back_to_exact = true;
    ExactTopK(x, d, k, options.num_threads, indices);
    return;
  }
  // Mean and max of |x| in one pass (per-thread partial sums, added in
  // thread order; the threshold only steers the search, so the split does
  // not change the selection rule).
  const int threads = ResolveThreads(options.num_threads, d, kMinPerThread);
  std::vector<double> sums(threads, 0.0);
  std::vector<float> maxima(threads, 0.0f);
  ParallelFor(threads, [&](int t) {
    const int64_t begin = ChunkBegin(d, threads, t);
    const int64_t end = ChunkBegin(d, threads, t + 1);
    double sum = 0;
    float max = 0;
    for (int64_t i = begin; i < end; ++i) {
      const float a = std::fabs(x[i]);
      sum += a;
      max = std::max(max, a);  // NaN never wins here; sum becomes NaN.
    }
    sums[t] = sum;
    maxima[t] = max;
  });
  ++st->passes;
  double sum = 0;
  float max = 0;
  for (int t = 0; t < threads; ++t) {
    sum += sums[t];
    max = std::max(max, maxima[t]);
  }
  const double mean = sum / static_cast<double>(d);
  bool ok = std::isfinite(mean) && std::isfinite(max);
  double lo = 0.0, hi = 1.0;
  for (int it = 0; ok && it < options.max_iterations; ++it) {
    const double r = it == 0 ? 0.0 : 0.5 * (lo + hi);
    const float threshold = static_cast<float>(mean + r * (max - mean));
    const uint32_t key = ThresholdKey(threshold);
    st->threshold_key = key;
    const int64_t n =
        SelectAtLeast(x, d, key, 2 * k - 1, indices, options.num_threads);
    ++st->passes;
    if (n >= k && n < 2 * k) return;
    if (n < k) {
      if (it == 0) break;  // Even the mean keeps fewer than k.
      hi = r;
    } else {
      lo = r;
    }
  }
  st->fell_back_to_exact = true;
  ExactTopK(x, d, k, options.num_threads, indices);
}

}  // namespace kernels
}  // namespace terse
