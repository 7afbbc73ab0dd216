#include "compressors/kernels/select.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <utility>

#include "compressors/kernels/parallel.h"
#include "compressors/kernels/randomk.h"
#include "compressors/kernels/scan.h"
#include "compressors/kernels/topk.h"

namespace terse {
namespace kernels {
namespace {

constexpr int64_t kMinPerThread = int64_t{1} << 16;

void ExactTopK(const float* x, int64_t d, int64_t k, int num_threads,
               std::vector<uint32_t>* indices) {
  indices->resize(k);
  TopK(x, d, k, indices->data(), num_threads);
}

// Keeps the k largest of the candidate positions `cand` (ascending) whose
// magnitude keys are `keys`, with the tie rule of TopK (lower index wins;
// the candidates are ascending, so the first ties are kept).
void TopKOfCandidates(int64_t k, std::vector<uint32_t>* cand,
                      const std::vector<uint32_t>& keys) {
  const int64_t n = static_cast<int64_t>(cand->size());
  if (k >= n) return;
  // A magnitude key read as a float has the same key.
  const TopKThreshold th =
      TopKThresholdKey(reinterpret_cast<const float*>(keys.data()), n, k, 1);
  int64_t ties_left = th.ties_taken;
  int64_t out = 0;
  for (int64_t j = 0; j < n; ++j) {
    if (keys[j] < th.key) continue;
    if (keys[j] == th.key) {
      if (ties_left == 0) continue;
      --ties_left;
    }
    (*cand)[out++] = (*cand)[j];
  }
  cand->resize(out);
}

// SelectAtLeast, also returning the keys of the selected entries when
// `keys` is not null.
int64_t SelectAtLeastImpl(const float* x, int64_t d, uint32_t key, int64_t cap,
                          std::vector<uint32_t>* indices,
                          std::vector<uint32_t>* keys, int num_threads) {
  const int threads = ResolveThreads(num_threads, d, kMinPerThread);
  std::vector<std::vector<uint32_t>> local(threads), local_keys(threads);
  std::vector<int64_t> counts(threads, 0);
  ParallelFor(threads, [&](int t) {
    const int64_t begin = ChunkBegin(d, threads, t);
    const int64_t end = ChunkBegin(d, threads, t + 1);
    std::vector<uint32_t>& out = local[t];
    std::vector<uint32_t>& out_keys = local_keys[t];
    int64_t n = 0;
    ForEachAtLeast(x, begin, end, key, [&](int64_t i, uint32_t k) {
      if (n < cap) {
        out.push_back(static_cast<uint32_t>(i));
        if (keys != nullptr) out_keys.push_back(k);
      }
      ++n;
    });
    counts[t] = n;
  });
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  indices->clear();
  if (keys != nullptr) keys->clear();
  if (total > cap) return total;
  indices->reserve(total);
  for (const auto& part : local) {
    indices->insert(indices->end(), part.begin(), part.end());
  }
  if (keys != nullptr) {
    keys->reserve(total);
    for (const auto& part : local_keys) {
      keys->insert(keys->end(), part.begin(), part.end());
    }
  }
  return total;
}

// The sample key of rank `rank` (1-based, descending). A magnitude key
// read as a float has the same key, so the radix select applies.
uint32_t KthLargestKey(const std::vector<uint32_t>& keys, int64_t rank) {
  return TopKThresholdKey(reinterpret_cast<const float*>(keys.data()),
                          static_cast<int64_t>(keys.size()), rank, 1)
      .key;
}

}  // namespace

uint32_t ThresholdKey(float threshold) {
  uint32_t bits;
  std::memcpy(&bits, &threshold, sizeof(bits));
  return bits & 0x7fffffffu;
}

int64_t SelectAtLeast(const float* x, int64_t d, uint32_t key, int64_t cap,
                      std::vector<uint32_t>* indices, int num_threads) {
  return SelectAtLeastImpl(x, d, key, cap, indices, nullptr, num_threads);
}

int64_t CountAtLeast(const float* x, int64_t d, uint32_t key, int num_threads) {
  const int threads = ResolveThreads(num_threads, d, kMinPerThread);
  std::vector<int64_t> counts(threads, 0);
  ParallelFor(threads, [&](int t) {
    const int64_t begin = ChunkBegin(d, threads, t);
    const int64_t end = ChunkBegin(d, threads, t + 1);
    int64_t n = 0;
    ForEachAtLeast(x, begin, end, key, [&](int64_t, uint32_t) { ++n; });
    counts[t] = n;
  });
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  return total;
}

int64_t SampledTopKPlanner::NumSamples(int64_t d,
                                       const SampledTopKOptions& options) {
  int64_t s = static_cast<int64_t>(std::llround(options.sample_fraction * d));
  s = std::min(d, std::max(s, options.min_sample));
  return std::max<int64_t>(1, s / kSampleRun) * kSampleRun;
}

void SampledTopKPlanner::RunStarts(int64_t d, const SampledTopKOptions& options,
                                   std::vector<int64_t>* starts) {
  // One random run of kSampleRun consecutive entries in each of s /
  // kSampleRun equal strata: one cache miss per run, not per sample.
  const int64_t runs = NumSamples(d, options) / kSampleRun;
  starts->resize(runs);
  uint64_t state = options.seed;
  for (int64_t j = 0; j < runs; ++j) {
    const int64_t begin =
        static_cast<int64_t>((static_cast<unsigned __int128>(d) * j) / runs);
    const int64_t end = static_cast<int64_t>(
        (static_cast<unsigned __int128>(d) * (j + 1)) / runs);
    (*starts)[j] =
        begin +
        static_cast<int64_t>(UniformBelow(
            &state, static_cast<uint64_t>(end - begin - kSampleRun + 1)));
  }
}

SampledTopKPlanner::SampledTopKPlanner(std::vector<uint32_t> sample_keys,
                                       int64_t d, int64_t k,
                                       const SampledTopKOptions& options)
    : keys_(std::move(sample_keys)),
      k_(k),
      max_adjust_(options.max_adjust),
      target_(options.overshoot * static_cast<double>(k)),
      lower_(static_cast<int64_t>(
          std::ceil(options.lower_fraction * static_cast<double>(k)))) {
  const int64_t s = static_cast<int64_t>(keys_.size());
  rank_ = std::min<int64_t>(
      s, std::max<int64_t>(1, static_cast<int64_t>(std::ceil(
                                  target_ * static_cast<double>(s) / d))));
  key_ = KthLargestKey(keys_, rank_);
}

SampledTopKPlanner::Step SampledTopKPlanner::Observe(int64_t n) {
  ++attempts_;
  if (n <= cap() && n >= k_) return Step::kTrimToK;
  if (n <= cap() && n >= lower_) return Step::kAccept;
  const int64_t s = static_cast<int64_t>(keys_.size());
  if (attempts_ > max_adjust_ || (n < lower_ && rank_ == s) ||
      (n > cap() && rank_ == 1)) {
    return Step::kFallback;
  }
  // Too few (lower the threshold) or too many (raise it): rescale the
  // sample rank by how far off the count was.
  const double scaled = static_cast<double>(rank_) * target_ /
                        static_cast<double>(std::max<int64_t>(n, 1));
  const double next = n < lower_
                          ? std::max(scaled, static_cast<double>(rank_ + 1))
                          : std::min(scaled, static_cast<double>(rank_ - 1));
  rank_ =
      std::min<int64_t>(s, std::max<int64_t>(1, static_cast<int64_t>(next)));
  key_ = KthLargestKey(keys_, rank_);
  return Step::kRetry;
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
  if (!SampledTopKPlanner::Applies(d, k)) {
    st->fell_back_to_exact = true;
    ExactTopK(x, d, k, options.num_threads, indices);
    return;
  }
  std::vector<int64_t> starts;
  SampledTopKPlanner::RunStarts(d, options, &starts);
  constexpr int64_t kRun = SampledTopKPlanner::kSampleRun;
  std::vector<uint32_t> keys(starts.size() * kRun);
  for (size_t j = 0; j < starts.size(); ++j) {
    for (int64_t r = 0; r < kRun; ++r) {
      keys[j * kRun + r] = KeyOf(x, starts[j] + r);
    }
  }
  SampledTopKPlanner planner(std::move(keys), d, k, options);
  std::vector<uint32_t> cand_keys;
  while (true) {
    st->threshold_key = planner.key();
    const int64_t n =
        SelectAtLeastImpl(x, d, planner.key(), planner.cap(), indices,
                          &cand_keys, options.num_threads);
    ++st->passes;
    switch (planner.Observe(n)) {
      case SampledTopKPlanner::Step::kTrimToK:
        TopKOfCandidates(k, indices, cand_keys);
        return;
      case SampledTopKPlanner::Step::kAccept:
        return;
      case SampledTopKPlanner::Step::kRetry:
        continue;
      case SampledTopKPlanner::Step::kFallback:
        st->fell_back_to_exact = true;
        ExactTopK(x, d, k, options.num_threads, indices);
        return;
    }
  }
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
  ThresholdSearchPlanner planner(sum / static_cast<double>(d), max, k, options);
  while (planner.usable()) {
    st->threshold_key = planner.key();
    const int64_t n = SelectAtLeast(x, d, planner.key(), planner.cap(), indices,
                                    options.num_threads);
    ++st->passes;
    const ThresholdSearchPlanner::Step step = planner.Observe(n);
    if (step == ThresholdSearchPlanner::Step::kAccept) return;
    if (step == ThresholdSearchPlanner::Step::kFallback) break;
  }
  st->fell_back_to_exact = true;
  ExactTopK(x, d, k, options.num_threads, indices);
}

ThresholdSearchPlanner::ThresholdSearchPlanner(
    double mean, float max, int64_t k, const ThresholdSearchOptions& options)
    : mean_(mean),
      max_(max),
      k_(k),
      max_iterations_(options.max_iterations),
      usable_(std::isfinite(mean) && std::isfinite(max) && k > 0 &&
              options.max_iterations > 0) {
  key_ = ThresholdKey(static_cast<float>(mean_));
}

ThresholdSearchPlanner::Step ThresholdSearchPlanner::Observe(int64_t n) {
  ++iterations_;
  if (n >= k_ && n < 2 * k_) return Step::kAccept;
  if (n < k_) {
    if (iterations_ == 1) {  // Even the mean keeps fewer than k.
      usable_ = false;
      return Step::kFallback;
    }
    hi_ = r_;
  } else {
    lo_ = r_;
  }
  if (iterations_ >= max_iterations_) {
    usable_ = false;
    return Step::kFallback;
  }
  r_ = 0.5 * (lo_ + hi_);
  key_ = ThresholdKey(static_cast<float>(mean_ + r_ * (max_ - mean_)));
  return Step::kRetry;
}

}  // namespace kernels
}  // namespace terse
