// efsignsgd (Karimireddy et al. 2019, "scaled sign"): per block of B
// elements (options.sign_block_size, 0 = the whole bucket) the mean |x|
// of the block, and one sign bit per element (set = negative, by the sign
// bit, so -0 and NaN with the sign set count as negative). Decoded value:
// +-scale. Meant for error feedback (lossy). Payload: parameters (B as u64,
// 0 stored as d), body = scales (fp32) then ceil(d / 8) bytes of bits.
// Fixed size, not summable; cf is ignored (about 32x). The sum of |x| over
// a block is taken in double in the fixed order of
// kernels/fixed_order_sum.h (32 strided lane sums per 4096-element chunk,
// folded pairwise, chunks in order), which the simulated device and the CUDA
// kernel reproduce bit for bit; the scale is float(sum / count).
#ifndef TERSE_COMPRESSORS_EFSIGNSGD_COMPRESSOR_H_
#define TERSE_COMPRESSORS_EFSIGNSGD_COMPRESSOR_H_

#include <memory>

#include "compressors/compressor.h"
#include "compressors/options.h"

namespace terse {

std::unique_ptr<Compressor> MakeEfSignSgdCompressor(
    double cf, const CompressorOptions& options);

}  // namespace terse

#endif  // TERSE_COMPRESSORS_EFSIGNSGD_COMPRESSOR_H_
