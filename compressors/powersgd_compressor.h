// powersgd: layer-wise PowerSGD (Vogels et al. 2019, as PyTorch DDP's
// powerSGD_hook does it), Protocol B (compressor.h) with one or two allreduce
// rounds.
//
// Plan of a bucket (from CompressContext::segments; empty segments: the
// whole bucket is one segment of unknown shape named StateKey(ctx)):
//  - A segment with a known shape (Segment::shape non-empty) that covers the
//    whole tensor (tensor_offset == 0, count == prod(shape)) with 2+
//    dimensions is a matrix M of n x m, n = shape[0], m = prod(shape[1:]),
//    row-major as stored (a conv kernel is out x in*kh*kw).
//  - A segment of UNKNOWN shape (empty Segment::shape: flat buffers from the
//    C API, older callers) is read as the near-square matrix of
//    PowerSgdShapeFor(count, rank) (zero padded), whatever its tensor_offset:
//    the behaviour before layer-wise PowerSGD, per segment.
//  - The rank of a matrix is r = min(options.powersgd_rank, n, m). A matrix
//    goes UNCOMPRESSED when r*(n+m) >= n*m or when
//    n*m / (r*(n+m)) < options.powersgd_min_compression_rate (both also for
//    the near-square view of unknown shapes). So do 1-D tensors, partial
//    segments of known shape (a tensor split across buckets), and bucket
//    elements no segment covers.
//  - While ctx.step < options.powersgd_start_step the whole bucket goes
//    uncompressed (DDP's start_powerSGD_iter).
//
// Rounds (every rank plans the same buffers from the same segments):
//   round 0 buffer = P_1 .. P_k (P_i = M_i Q_i, n_i x r_i, row-major)
//                    concatenated, then the uncompressed values in bucket
//                    order. The sum is exact for the uncompressed values.
//   EndRound(0): every summed P_i is orthonormalised (Gram-Schmidt in
//                double; a column that vanishes or is not finite becomes 0;
//                deterministic, so identical on every rank), then
//                Q_i = M_i^T P^_i (m_i x r_i).
//   round 1 buffer = Q_1 .. Q_k concatenated (only when k > 0: a bucket
//                    without a compressed matrix has num_rounds() == 1).
//   EndRound(1): every summed Q_i is kept as that tensor's next start Q.
//   AccumulateInto:  dense += P^_i Q_sum_i^T per matrix, plus the summed
//                    uncompressed values (the sum over ranks).
//   AccumulateLocal: dense += P^_i Q_local_i^T per matrix, plus this rank's
//                    own uncompressed values, so that input - share is
//                    PowerSGD's error feedback (zero for uncompressed parts).
// Products M Q, M^T P and P Q^T run in float (Eigen).
//
// Warm start: Q_i is keyed by StateKey(ctx), the segment name and its shape
// (for unknown shapes: tensor_offset and count). The first Q of a key is
// PowerSgdStartQ(ctx.seed, segment name, m_i, r_i), identical on every rank.
//
// Ownership and thread-safety: MakePowerSgdCompressor returns an owned
// compressor. BeginRounds may be called from several threads at once; the
// warm-start table is guarded by a mutex. A RoundState is used by one thread
// and must not outlive its compressor. Errors: Compress (Protocol A) is
// FailedPrecondition; BeginRounds returns InvalidArgument for segments outside
// the bucket, overlapping or with a negative count/offset; RoundState
// follows compressor.h (FailedPrecondition for out-of-order rounds or an
// early Accumulate*, InvalidArgument for a dense size mismatch).
#ifndef TERSE_COMPRESSORS_POWERSGD_COMPRESSOR_H_
#define TERSE_COMPRESSORS_POWERSGD_COMPRESSOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compressors/compressor.h"
#include "compressors/options.h"

namespace terse {

// The near-square view of d elements of unknown shape: cols =
// ceil(sqrt(d)), rows = ceil(d / cols), rank = min(rank, rows, cols) (>= 1
// when d > 0; all zero when d == 0).
struct PowerSgdShape {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t rank = 0;
};
PowerSgdShape PowerSgdShapeFor(int64_t d, int64_t rank);

// The start Q (cols x rank, row-major) of a tensor: standard normal draws
// from a seed mixed from `seed` (TERSE_SEED) and `name`. Deterministic.
std::vector<float> PowerSgdStartQ(uint64_t seed, const std::string& name,
                                  int64_t cols, int64_t rank);

// What the rounds of a bucket carry, in floats (for progress prints: bytes
// on the wire = 4 * (round0 + round1) vs 4 * d dense).
struct PowerSgdRoundSizes {
  int num_rounds = 1;        // 2 when a matrix is compressed.
  int64_t round0 = 0;        // Sum of n_i * r_i, plus `uncompressed`.
  int64_t round1 = 0;        // Sum of m_i * r_i.
  int64_t uncompressed = 0;  // Elements sent as they are.
  int64_t matrices = 0;      // Compressed matrices.
};
// For a bucket of d floats with these segments (empty: one unknown-shape
// segment) at training step `step`. InvalidArgument for bad segments.
absl::StatusOr<PowerSgdRoundSizes> PowerSgdRoundSizesFor(
    int64_t d, absl::Span<const Segment> segments,
    const CompressorOptions& options, uint64_t step);

std::unique_ptr<Compressor> MakePowerSgdCompressor(
    double cf, const CompressorOptions& options);

}  // namespace terse

#endif  // TERSE_COMPRESSORS_POWERSGD_COMPRESSOR_H_
