// qsgd (Alistarh et al. 2017): per bucket of B elements (options
// qsgd_bucket_size) the L2 norm n, and per element sign(x) and a level in
// [0, s] rounded stochastically so that E[decode] = x: with a = |x| / n * s,
// level = floor(a) + Bernoulli(a - floor(a)). The rounding draws come from
// MixSeed(ctx.seed, ctx.step, ctx.stream) mixed with ctx.rank and the bucket
// index: reproducible, different on every rank. Each element takes
// 1 + ceil(log2(s + 1)) bits; s comes from options.qsgd_levels or, when 0,
// from cf: floor(32 / cf) bits clamped to [2, 16], s = 2^(bits-1) - 1.
// Payload: parameters (s, B as u32), body = norms (fp32) then the packed
// codes (code = level << 1 | sign, little-endian bit order). Fixed size, not
// summable, lossy. A bucket whose norm is not finite decodes to NaN. The
// norm is float(sqrt(sum x^2)), the sum taken in double in the fixed order
// of kernels/fixed_order_sum.h (32 strided lane sums per 4096-element chunk,
// folded pairwise, chunks in order), which the simulated device and the CUDA
// kernel reproduce bit for bit.
#ifndef TERSE_COMPRESSORS_QSGD_COMPRESSOR_H_
#define TERSE_COMPRESSORS_QSGD_COMPRESSOR_H_

#include <memory>

#include "compressors/compressor.h"
#include "compressors/options.h"

namespace terse {

std::unique_ptr<Compressor> MakeQsgdCompressor(
    double cf, const CompressorOptions& options);

// The level count s used for (cf, options).
int QsgdLevels(double cf, const CompressorOptions& options);

}  // namespace terse

#endif  // TERSE_COMPRESSORS_QSGD_COMPRESSOR_H_
