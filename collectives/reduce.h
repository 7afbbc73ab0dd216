// Element-wise reductions on host buffers, shared by the loopback and MPI
// backends (the MPI backend registers ReduceInPlace for f16/bf16 as a
// user-defined MPI op).
//
// All functions are pure and thread-safe; buffers are owned by the caller.
#ifndef TERSE_COLLECTIVES_REDUCE_H_
#define TERSE_COLLECTIVES_REDUCE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "collectives/communicator.h"
#include "common/data_type.h"

namespace terse {

// OK when `op` is defined for `dtype`: Sum/Min/Max/Product for every type
// but bool, Average for floating-point types only.
absl::Status CheckReduceSupported(DataType dtype, ReduceOp op);

// acc[i] = op(acc[i], in[i]) for i < count, in the buffers' own type. Average
// reduces like Sum (the caller divides once at the end). f16/bf16 compute in
// fp32 and round once per element.
void ReduceInPlace(void* acc, const void* in, int64_t count, DataType dtype,
                   ReduceOp op);

// acc[i] = op(acc[i], float(in[i])) for f16/bf16 input into an fp32
// accumulator, so a reduction over many ranks rounds only once at the end.
void AccumulateHalfToFloat(float* acc, const void* in, int64_t count,
                           DataType dtype, ReduceOp op);

// Converts `count` f16/bf16 elements to fp32 and back (bulk, vectorised).
void HalfToFloatInto(const void* in, float* out, int64_t count, DataType dtype);
void FloatToHalfInto(const float* in, void* out, int64_t count, DataType dtype);

// buffer[i] /= divisor for a floating-point buffer (Average).
void DivideInPlace(void* buffer, int64_t count, DataType dtype, int divisor);

}  // namespace terse

#endif  // TERSE_COLLECTIVES_REDUCE_H_
