// The top-k family: topk (exact), dgc (sampled threshold), redsync
// (threshold search) and threshold (fixed magnitude threshold). Each keeps
// entries of the bucket chosen by magnitude and sends (index, value) pairs in
// the sparse payload format of payload.h (index coding and value precision
// from CompressorOptions). k = KeepCount(d, cf); the entries kept are
//   topk:      exactly k (ties: lowest indices);
//   dgc:       between ceil(0.8k) and k (SampledTopK bounds);
//   redsync:   between k and 2k - 1 (ThresholdSearch bounds);
//   threshold: every |x| >= options.threshold, or the top k of them when
//              more than k qualify.
// Not summable; fixed_size only for topk with u32 indices. Buckets must
// have fewer than 2^32 elements.
#ifndef TERSE_COMPRESSORS_SPARSIFIER_H_
#define TERSE_COMPRESSORS_SPARSIFIER_H_

#include <memory>

#include "compressors/compressor.h"
#include "compressors/options.h"

namespace terse {

// id: kTopK, kDgc, kRedSync or kThreshold.
std::unique_ptr<Compressor> MakeSparsifier(CompressorId id, double cf,
                                           const CompressorOptions& options);

}  // namespace terse

#endif  // TERSE_COMPRESSORS_SPARSIFIER_H_
