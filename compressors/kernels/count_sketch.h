// Count sketch (Charikar, Chen, Farach-Colton 2002) of a float vector: a
// linear map S from R^d to R^k with E ||S v||^2 = ||v||^2.
//
// Why: the portfolio's window gain (gravac/portfolio_policy.h) compares the
// norms of sums over ALL ranks, ||sum_r x_r||^2, which no rank can compute
// from its own x_r. S is linear and the same on every rank (the hashes
// depend only on the seed and the index), so summing the ranks' k-element
// sketches gives S(sum_r x_r), and ||S(sum_r x_r)||^2 estimates the norm
// with a relative standard deviation of about sqrt(2 / k) for vectors whose
// energy is spread over many more than k coordinates (less when a few
// coordinates hold it all: the sketch is exact for up to about sqrt(k)
// coordinates that do not collide). k doubles cross the wire instead of d.
//
// Each index i goes to bucket h(i) in [0, k) with sign s(i) in {-1, +1},
// both from SplitMix64 of (seed, i): S(v)[j] = sum over h(i) == j of
// s(i) v[i]. Deterministic and reentrant; accumulates in double.
#ifndef TERSE_COMPRESSORS_KERNELS_COUNT_SKETCH_H_
#define TERSE_COMPRESSORS_KERNELS_COUNT_SKETCH_H_

#include <cstdint>

#include "absl/types/span.h"

namespace terse {
namespace kernels {

// Adds S(v) into `sketch` (k = sketch.size() >= 1 buckets), for the indices
// first_index .. first_index + v.size() - 1 of the sketched vector (so that
// a vector can be sketched in pieces).
void AddCountSketch(uint64_t seed, int64_t first_index,
                    absl::Span<const float> v, absl::Span<double> sketch);

}  // namespace kernels
}  // namespace terse

#endif  // TERSE_COMPRESSORS_KERNELS_COUNT_SKETCH_H_
