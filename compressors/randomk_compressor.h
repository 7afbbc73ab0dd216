// randomk: keeps k = KeepCount(d, cf) entries at positions drawn from the
// shared seed (kernels::RandomKIndices with MixSeed(ctx.seed, ctx.step,
// ctx.stream)), so every rank keeps the same positions for the same bucket
// and step. The payload carries the mixed seed (8 bytes of parameters) and
// the k values only (no indices: the decoder regenerates them), which makes
// it summable by an allreduce. Values are not rescaled (meant for use with
// error feedback). Fixed size; lossy.
#ifndef TERSE_COMPRESSORS_RANDOMK_COMPRESSOR_H_
#define TERSE_COMPRESSORS_RANDOMK_COMPRESSOR_H_

#include <memory>

#include "compressors/compressor.h"
#include "compressors/options.h"

namespace terse {

std::unique_ptr<Compressor> MakeRandomKCompressor(
    double cf, const CompressorOptions& options);

}  // namespace terse

#endif  // TERSE_COMPRESSORS_RANDOMK_COMPRESSOR_H_
