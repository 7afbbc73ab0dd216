// Element-wise scaling of host buffers, fused with a copy where possible, for
// the prescale / postscale / average steps of a reduction.
//
// Pure functions; buffers are owned by the caller. A factor of exactly 1 is a
// plain copy (or nothing in place). f16/bf16 are scaled in fp32 and rounded
// once. Integer types are scaled in double and rounded to nearest; the
// engine only passes integer factors of 1 (see Engine enqueue checks).
#ifndef TERSE_ENGINE_SCALE_H_
#define TERSE_ENGINE_SCALE_H_

#include <cstdint>

#include "common/data_type.h"

namespace terse {

// dst[i] = src[i] * factor for i < count. dst and src may be equal, but must
// not otherwise overlap.
void ScaledCopy(void* dst, const void* src, int64_t count, DataType dtype,
                double factor);

// buffer[i] *= factor.
inline void ScaleInPlace(void* buffer, int64_t count, DataType dtype,
                         double factor) {
  ScaledCopy(buffer, buffer, count, dtype, factor);
}

}  // namespace terse

#endif  // TERSE_ENGINE_SCALE_H_
