// powersgd (Vogels et al. 2019), Protocol B with two allreduce rounds.
//
// The bucket of d floats is read as a rows x cols matrix M, row-major, with
// cols = ceil(sqrt(d)), rows = ceil(d / cols) and zero padding; the rank is
// r = min(options.powersgd_rank, rows, cols). Per step:
//   BeginRounds: P = M Q (rows x r); RoundBuffer(0) = P.
//   [engine sums P over ranks]
//   EndRound(0): P^ = orthonormalised columns of the summed P (Gram-Schmidt
//                in double; a column that vanishes becomes 0), then
//                Q_local = M^T P^ (cols x r); RoundBuffer(1) = Q_local.
//   [engine sums Q over ranks]
//   EndRound(1): Q_sum is kept as the next step's Q (warm start).
//   AccumulateInto:  dense += P^ Q_sum^T   (the sum over ranks, rank-r)
//   AccumulateLocal: dense += P^ Q_local^T (this rank's share; for error
//                    feedback, so residual + share = input on every rank).
// Q starts as a standard normal matrix drawn from MixSeed(ctx.seed, hash of
// the state key) and then warm-starts from the previous step of the same
// state key (StateKey(ctx)) and shape: identical on every rank. At full rank
// (r == rows <= cols) and a full-rank sum, AccumulateInto reproduces the dense
// sum up to rounding. Summable (the factors), fixed size, lossy.
//
// Thread-safety: the warm-start table is guarded by a mutex; a RoundState is
// used by one thread and must not outlive the compressor.
#ifndef TERSE_COMPRESSORS_POWERSGD_COMPRESSOR_H_
#define TERSE_COMPRESSORS_POWERSGD_COMPRESSOR_H_

#include <cstdint>
#include <memory>

#include "compressors/compressor.h"
#include "compressors/options.h"

namespace terse {

struct PowerSgdShape {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t rank = 0;
};
PowerSgdShape PowerSgdShapeFor(int64_t d, int64_t rank);

std::unique_ptr<Compressor> MakePowerSgdCompressor(
    double cf, const CompressorOptions& options);

}  // namespace terse

#endif  // TERSE_COMPRESSORS_POWERSGD_COMPRESSOR_H_
