// Element-wise reductions on host buffers, shared by the loopback and MPI
// backends (the MPI backend registers ReduceInPlace for f16/bf16 as a
// user-defined MPI op).
//
// All functions are pure and thread-safe; buffers are owned by the caller.
#ifndef TERSE_COLLECTIVES_REDUCE_H_
#define TERSE_COLLECTIVES_REDUCE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "collectives/communicator.h"
#include "common/data_type.h"

namespace terse {

// OK when `op` is defined for `dtype`: Sum/Min/Max/Product for every type
// but bool, Average for floating-point types only.
absl::Status CheckReduceSupported(DataType dtype, ReduceOp op);

// Adasum's pairwise operator (Maleki et al., "Adasum: Adaptive Summation of
// Gradients for Deep Learning Optimization", 2021) on two vectors of `count`
// elements of a floating-point type:
//   a <- (1 - a.b / (2|a|^2)) a + (1 - a.b / (2|b|^2)) b,
// dot products and arithmetic in double, the result rounded once to dtype.
// A vector whose squared norm is below 1e-8 gets coefficient 1. Symmetric
// in a and b up to rounding; callers pass the lower rank's vector as `a`
// so every rank computes the same bits.
void AdasumCombine(void* a, const void* b, int64_t count, DataType dtype);

// OK unless `op` is Adasum and `size` is not a power of two (InvalidArgument
// naming `backend`, as Horovod refuses it on the CPU).
absl::Status CheckAdasumRanks(ReduceOp op, int size, absl::string_view backend);

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
