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
// both from SplitMix64 of (seed, i) (count_sketch::Hash,
// count_sketch_common.h): S(v)[j] = sum over h(i) == j of s(i) v[i].
//
// Arithmetic: the bucket sums are EXACT sums of fixed-point integers
// (count_sketch_common.h), so that they do not depend on the order of
// the additions and a GPU adding in parallel (DeviceOps::CountSketch) gets
// the CPU's bits. Per call, with M = max |v[i]| over the finite v[i] and
// n = v.size(), each term is rounded to a multiple of 2^-E, where
// 2^(61 - ceil(log2 n)) <= M * 2^E < 2^(62 - ceil(log2 n)), and summed in
// int64 (no overflow in any order); each bucket's sum then takes one
// rounding to double (and one more as it is added into `sketch`). So the
// sum added is within n_j * 2^-(E + 1) + one double rounding of the exact
// one (n_j: the terms the bucket received), 2^-E being at most
// M * 2^(ceil(log2 n) - 61): at least 61 - ceil(log2 n) bits relative to M
// (34 at n = 2^27), far finer than the sketch's own statistical error,
// sqrt(2 / k). A term of magnitude below M * 2^(ceil(log2 n) - 62) may
// round to zero.
//
// Non-finite values: a bucket that receives a NaN, or infinities of both
// signs (after s(i)), becomes NaN (the bits of std::numeric_limits<double>::
// quiet_NaN(), whatever NaN came in); one that receives infinities of one
// sign becomes that infinity (or NaN if it held the opposite one). The
// other buckets are as if those values were 0. A bucket whose integer sum
// is zero and that received no non-finite value is left exactly as it was
// (-0.0 included).
//
// Deterministic and reentrant. Two calls on pieces of a vector (first_index)
// scale each piece by its own E: the result is within the rounding above
// of one call on the whole, not bitwise the same.
#ifndef TERSE_COMPRESSORS_KERNELS_COUNT_SKETCH_H_
#define TERSE_COMPRESSORS_KERNELS_COUNT_SKETCH_H_

#include <cstdint>

#include "absl/types/span.h"

namespace terse {
namespace kernels {

// Adds S(v) into `sketch` (k = sketch.size() buckets; nothing when k or
// v.size() is 0), for the indices first_index .. first_index + v.size() - 1
// of the sketched vector. Two passes over v: the largest magnitude, then
// the sums.
void AddCountSketch(uint64_t seed, int64_t first_index,
                    absl::Span<const float> v, absl::Span<double> sketch);

}  // namespace kernels
}  // namespace terse

#endif  // TERSE_COMPRESSORS_KERNELS_COUNT_SKETCH_H_
