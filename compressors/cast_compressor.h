// none / fp16 / bf16: the whole bucket, as fp32 or cast to 16 bits (round to
// nearest even). Summable (the body is the d values), fixed size, not lossy
// in the error-feedback sense (a precision cast). A fp16 cast overflows to
// +-inf above 65504; bf16 keeps the fp32 range.
#ifndef TERSE_COMPRESSORS_CAST_COMPRESSOR_H_
#define TERSE_COMPRESSORS_CAST_COMPRESSOR_H_

#include <memory>

#include "compressors/compressor.h"

namespace terse {

// id: kNone, kFp16 or kBf16.
std::unique_ptr<Compressor> MakeCastCompressor(CompressorId id);

}  // namespace terse

#endif  // TERSE_COMPRESSORS_CAST_COMPRESSOR_H_
