// Approximate and threshold-based sparse selection by magnitude (CPU).
//
// Every function writes ascending, distinct indices into a std::vector it
// resizes, orders magnitudes by the same 31-bit key as TopK (NaN above +inf,
// -0 == +0), is deterministic for a given input and options (independent of
// the thread count), and blocks until the threads it starts have joined.
// Reentrant; no shared state.
//
// Bounds on the number n of indices returned (k is the requested count):
//   SampledTopK (DGC):   ceil(lower_fraction * k) <= n <= k, n == k
//                        whenever the sampled threshold overshoots (the
//                        usual case) or the bounded adjustment falls back.
//   ThresholdSearch:     k <= n < 2k (Redsync), n == k after a fallback.
//   SelectAtLeast:       every entry at or above the threshold, or nothing
//                        when more than `cap` qualify (the count is exact).
#ifndef TERSE_COMPRESSORS_KERNELS_SELECT_H_
#define TERSE_COMPRESSORS_KERNELS_SELECT_H_

#include <cstdint>
#include <vector>

namespace terse {
namespace kernels {

// The magnitude key of |threshold| (see MagnitudeKey in topk.h): for every
// non-NaN x, |x| >= |threshold| exactly when key(x) >= ThresholdKey.
uint32_t ThresholdKey(float threshold);

// Collects, ascending, the i with key(x[i]) >= key into *indices and returns
// how many qualify. When more than `cap` qualify, *indices is left empty and
// the exact count is still returned (so callers can adjust and retry without
// ever holding more than `cap` indices).
int64_t SelectAtLeast(const float* x, int64_t d, uint32_t key, int64_t cap,
                      std::vector<uint32_t>* indices, int num_threads = 0);

// How many i have key(x[i]) >= key.
int64_t CountAtLeast(const float* x, int64_t d, uint32_t key,
                     int num_threads = 0);

struct SampledTopKOptions {
  double sample_fraction = 0.01;  // Share of d sampled (stratified).
  int64_t min_sample = 4096;      // Unless d is smaller.
  double overshoot = 1.1;         // The sample threshold aims at overshoot * k.
  double lower_fraction = 0.8;    // Accept lower_fraction * k <= n < k.
  int max_adjust = 3;             // Threshold re-adjustments before fallback.
  uint64_t seed = 0;              // Sample positions.
  int num_threads = 0;
};

struct SelectStats {
  int passes = 0;  // Full passes over x after the sample.
  bool fell_back_to_exact = false;
  uint32_t threshold_key = 0;  // Last threshold tried.
};

// DGC's sampled-threshold top-k: samples ~sample_fraction of x (one random
// position in each of s equal strata), takes the threshold that keeps
// overshoot * k of the sample scaled to d, selects every entry at or above
// it, and
//   - more than k selected: exact top-k among them (n = k);
//   - between lower_fraction * k and k: keeps them all;
//   - fewer, or more than 4k: re-derives the threshold from the sample,
//     at most max_adjust times, then falls back to the exact TopK.
// Inputs with d < 65536 use the exact TopK directly.
void SampledTopK(const float* x, int64_t d, int64_t k,
                 const SampledTopKOptions& options,
                 std::vector<uint32_t>* indices, SelectStats* stats = nullptr);

// The control logic of SampledTopK, shared with the CUDA version so that
// both select the same entries: where to sample, which threshold to try,
// and what to do with the count it gives. Not thread-safe (one per call).
class SampledTopKPlanner {
 public:
  // Consecutive entries per sample run (one 64-byte cache line).
  static constexpr int64_t kSampleRun = 16;
  // Inputs below this size (or k >= d) go to the exact TopK directly.
  static constexpr int64_t kExactBelow = int64_t{1} << 16;
  static bool Applies(int64_t d, int64_t k) {
    return d >= kExactBelow && k > 0 && k < d;
  }
  // The sample size (a multiple of kSampleRun) and the first index of every
  // run: one uniformly placed run in each of NumSamples / kSampleRun equal
  // strata, drawn from options.seed. Requires Applies(d, k).
  static int64_t NumSamples(int64_t d, const SampledTopKOptions& options);
  static void RunStarts(int64_t d, const SampledTopKOptions& options,
                        std::vector<int64_t>* starts);

  // sample_keys: the magnitude keys at the runs, in run order.
  SampledTopKPlanner(std::vector<uint32_t> sample_keys, int64_t d, int64_t k,
                     const SampledTopKOptions& options);
  // The threshold key to try next, and how many selected entries to hold at
  // most (4k).
  uint32_t key() const { return key_; }
  int64_t cap() const { return 4 * k_; }
  enum class Step {
    kTrimToK,   // Between k and cap selected: keep the exact top-k of them.
    kAccept,    // Between lower_fraction * k and k: keep them all.
    kRetry,     // key() was re-derived: select again.
    kFallback,  // Out of adjustments: use the exact TopK.
  };
  // n: how many entries have a key >= key().
  Step Observe(int64_t n);

 private:
  const std::vector<uint32_t> keys_;
  const int64_t k_;
  const int max_adjust_;
  const double target_;
  const int64_t lower_;
  int64_t rank_ = 1;  // Of the threshold among the sample keys (1 = max).
  uint32_t key_ = 0;
  int attempts_ = 0;
};

struct ThresholdSearchOptions {
  int max_iterations = 30;  // Binary-search steps before the fallback.
  int num_threads = 0;
};

// The control logic of ThresholdSearch, shared with the CUDA version: from
// the mean and max of |x|, the thresholds mean + r * (max - mean) to try
// (r = 0 first, then bisection of [0, 1]) and what to do with each count.
// Not thread-safe (one per call).
class ThresholdSearchPlanner {
 public:
  ThresholdSearchPlanner(double mean, float max, int64_t k,
                         const ThresholdSearchOptions& options);
  // False when the search cannot run (non-finite mean/max) or has given up.
  bool usable() const { return usable_; }
  uint32_t key() const { return key_; }
  // Selected entries to hold at most (2k - 1).
  int64_t cap() const { return 2 * k_ - 1; }
  enum class Step { kAccept, kRetry, kFallback };
  // n: how many entries have a key >= key().
  Step Observe(int64_t n);

 private:
  const double mean_;
  const double max_;
  const int64_t k_;
  const int max_iterations_;
  bool usable_;
  double lo_ = 0.0, hi_ = 1.0, r_ = 0.0;
  uint32_t key_ = 0;
  int iterations_ = 0;
};

// Redsync's threshold search: with mean and max of |x|, binary search of r
// in [0, 1] for the threshold mean + r * (max - mean) until
// k <= nnz(|x| >= threshold) < 2k, then selects those entries. When no such
// threshold exists in the range (k above the count at the mean, heavy ties,
// non-finite values) or max_iterations pass, falls back to the exact TopK.
void ThresholdSearch(const float* x, int64_t d, int64_t k,
                     const ThresholdSearchOptions& options,
                     std::vector<uint32_t>* indices,
                     SelectStats* stats = nullptr);

}  // namespace kernels
}  // namespace terse

#endif  // TERSE_COMPRESSORS_KERNELS_SELECT_H_
