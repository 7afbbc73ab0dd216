// Internals shared by CompressedReducer's .cc files (compressed_reducer.cc,
// compressed_reducer_exchange.cc): the statistics' layout, small helpers and
// the per-bucket state. Not part of the engine's API; include only there.
#ifndef TERSE_ENGINE_COMPRESSED_REDUCER_INTERNAL_H_
#define TERSE_ENGINE_COMPRESSED_REDUCER_INTERNAL_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/compressed_reducer.h"

namespace terse {
namespace reducer_internal {

// Statistics exchanged per step: ||a||^2, ||g_min||^2, ||g_c||^2, the
// bucket's previous step time and ||what was sent||^2, then ||C(a)||^2 of
// each of the decision's gain probes (the same number on every rank: every
// rank takes the same decision).
constexpr int kNumStats = 9;
enum StatIndex {
  kNormEf = 0,
  kNormMin,
  kNormCandidate,
  kSeconds,
  kNormSent,
  kWindowDev,    // ||sum over the window of (g - sent)||^2, see below
  kWindowGrad,   // ||sum over the window of g||^2
  kWindowSteps,  // steps in the window so far
  kSentBytes,    // bytes this rank put on the wire for the bucket
};

// The window gain compares sums over ALL ranks: ||sum_r dev_r||^2 and
// ||sum_r grad_r||^2 of the ranks' window sums, not the mean of each rank's
// own norms. They differ where the ranks' deviations cancel: PowerSGD sends
// every rank's projection on a subspace found from the SUM of the ranks'
// matrices, so each rank's residual holds its own noise outside that
// subspace, which the sum over ranks averages out (on the slow-network MLP,
// integration/portfolio_gains.py: rank 4's window gain 0.81-0.84 per rank
// against 0.95-0.97 over the sum at steps 100-150, while top-k's two agree
// within 0.01). A rank cannot compute a norm of the sum alone, so on the
// step that closes a window each rank appends to the exchanged statistics
// its window sums (buckets of up to kWindowSketch floats) or their count
// sketch (kernels/count_sketch.h, kWindowSketch buckets, the same hashes on
// every rank); the exchange sums them over ranks, and the norms of those
// sums replace the slots kWindowDev and kWindowGrad.
constexpr int64_t kWindowSketch = 1024;

// Slots of the pending norms kept for Observe: the stats above with the
// time slot holding Accordion's accumulated norm instead.
constexpr int kAccumulatedSlot = kSeconds;

// A compressor's name as reports show it: PowerSGD with its rank.
inline std::string ReportName(const std::string& compressor, int64_t level) {
  return level > 0 ? absl::StrCat(compressor, ":", level) : compressor;
}

inline double SquaredNorm(const std::vector<float>& v) {
  double sum = 0;
  for (float x : v) sum += static_cast<double>(x) * x;
  return sum;
}

inline std::vector<Segment> SegmentsOf(const Bucket& bucket) {
  std::vector<Segment> segments;
  int64_t offset = 0;
  for (const BucketMember& m : bucket.members) {
    Segment seg;
    seg.name = m.name;
    seg.offset = offset;
    seg.count = m.count;
    seg.shape = m.shape;
    segments.push_back(seg);
    offset += m.count;
  }
  return segments;
}

inline std::string KeyOf(const Bucket& bucket) {
  return absl::StrJoin(bucket.members, ",",
                       [](std::string* out, const BucketMember& m) {
                         absl::StrAppend(out, m.name);
                       });
}

// The statistics as the policy reads them, from their sum over ranks: the
// mean over ranks, and the window slots from the window sums' sketches
// (see kWindowSketch), which are then dropped.
inline void FoldStatistics(int size, size_t sketch_at, int64_t sketch_k,
                           std::vector<double>* stats) {
  for (double& s : *stats) s /= size;
  if (sketch_k == 0) return;
  double dev = 0, grad = 0;
  for (int64_t i = 0; i < sketch_k; ++i) {
    dev += (*stats)[sketch_at + i] * (*stats)[sketch_at + i];
    grad +=
        (*stats)[sketch_at + sketch_k + i] * (*stats)[sketch_at + sketch_k + i];
  }
  (*stats)[kWindowDev] = dev;
  (*stats)[kWindowGrad] = grad;
  stats->resize(sketch_at);
}

}  // namespace reducer_internal

struct CompressedReducer::BucketState {
  std::string key;
  std::unique_ptr<gravac::Policy> policy;
  bool adaptive = false;  // Needs statistics averaged over ranks.
  bool accumulates = false;
  // By (name, cf, level, probe): probe instances keep state (PowerSGD's warm
  // start) apart from the ones that send.
  std::map<std::tuple<std::string, double, int64_t, bool>,
           std::unique_ptr<Compressor>>
      compressors;
  std::vector<Segment> segments;
  std::vector<float> a, level1, level2, accumulator, scratch;
  // Copies of the compressors' warm states while a checkpoint is written
  // (SaveBuckets; the reducer's lock is held until the write ends).
  std::vector<std::vector<float>> exported_warm;
  // Restored warm states, handed to each compressor when it is created.
  std::vector<proto::WarmState> restored_warm;
  // Window gain (Decision::window_gain_steps), over the window of
  // `window_choice`: window_grad = sum of g. With error feedback the sum of
  // g - sent telescopes to the residual's change e_T - e_0, so window_dev
  // holds e_0 (the residual at the window's start) and becomes e_T - e_0
  // on the step that closes it: one pass over g per step, not five. Under
  // TERSE_MOMENTUM_CORRECTION the residual is not a - sent, so g (this
  // step's gradient) is kept and window_dev sums g - sent step by step.
  bool window_active = false;  // This step sends a lossy window candidate.
  std::vector<float> g, window_grad, window_dev;
  int64_t window_steps = 0;
  // Set for the step that closes a window: where in the statistics its
  // window sums (or their sketches, window_sketch_k floats each) go, and
  // the sketch's seed.
  size_t window_sketch_at = 0;
  int64_t window_sketch_k = 0;
  uint64_t window_sketch_seed = 0;
  gravac::Choice window_choice;
  bool has_pending = false;
  gravac::Decision pending;
  // ef, min, candidate, accumulated, sent, then the gain probes'.
  std::vector<double> pending_norms =
      std::vector<double>(reducer_internal::kNumStats, 0.0);
  bool has_last_start = false;
  Clock::time_point last_start;
  double last_own = 0;
  double own_total_at_last_start = 0;
  double bytes_total_at_last_start = 0;
  int64_t bytes = 0;
  // This reducer erased the bucket's residual and stored none since (false
  // after a restore: the checkpoint may hold one).
  bool residual_empty = false;
};

// What this rank sends for a bucket this step.
struct CompressedReducer::Sent {
  bool dense = true;
  Compressor* compressor = nullptr;
  Payload payload;
  std::unique_ptr<RoundState> rounds;   // Protocol B.
  std::vector<float>* local = nullptr;  // Decoded own contribution.
  std::string compressor_name = "none";
  double cf = 1;
  // Bytes this rank put on the wire for the bucket (filled by Communicate).
  int64_t bytes = 0;
  // Dense without residual or probes: reduced in place, `a` left unfilled.
  bool in_place = false;
  // Exchange the statistics (adaptive policies, see Decision::wants_stats).
  bool gather_stats = false;
  // Take this step's norms (||g_ef||^2, ||sent||^2): an adaptive policy's
  // decision wants its statistics and keeps no gain window (whose sums
  // replace them). Otherwise they are 0 on every rank: a pass over the
  // bucket each that nobody reads.
  bool step_norms = false;
};

}  // namespace terse

#endif  // TERSE_ENGINE_COMPRESSED_REDUCER_INTERNAL_H_
