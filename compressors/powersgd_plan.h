// PowerSGD's plan of a bucket and its orthonormalisation, shared by the CPU
// compressor (compressors/powersgd_compressor.h) and the device path
// (engine/device_powersgd.h), so that both compress the same matrices with
// the same warm-start keys.
//
// A bucket is planned segment by segment: a segment that is a whole tensor
// of 2+ dimensions is its own rows x cols matrix (shape[0] x the rest); one
// without a shape gets PowerSgdShapeFor's near-square view (zero padded); a
// matrix goes uncompressed when rank * (rows + cols) >= rows * cols or its
// compression rate is under powersgd_min_compression_rate, or before the
// start step (`compress` false). Pure functions, thread-safe.
#ifndef TERSE_COMPRESSORS_POWERSGD_PLAN_H_
#define TERSE_COMPRESSORS_POWERSGD_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compressors/compressor.h"
#include "compressors/options.h"

namespace terse {

// One compressed matrix of a bucket.
struct PowerSgdMatrix {
  std::string name;      // Segment name (seeds the start Q).
  std::string warm_key;  // Warm-start key.
  int64_t offset = 0;    // In the bucket.
  int64_t count = 0;     // Bucket elements (< rows * cols: zero padded).
  int64_t rows = 0, cols = 0, rank = 0;
  int64_t m_offset = 0;  // In a copy of the matrices (rows * cols each).
  int64_t p_offset = 0;  // In the P's (rows * rank each).
  int64_t q_offset = 0;  // In the Q's (cols * rank each).
};

struct PowerSgdRange {
  int64_t offset = 0;
  int64_t count = 0;
};

struct PowerSgdPlan {
  std::vector<PowerSgdMatrix> matrices;
  std::vector<PowerSgdRange> dense;  // Uncompressed, ascending, merged.
  int64_t m_floats = 0, p_floats = 0, q_floats = 0, dense_floats = 0;
};

// The plan of a bucket of `d` floats whose tensors are `segments` (empty:
// the bucket is one segment named `state_key`). `state_key` prefixes the
// warm-start keys. InvalidArgument for a segment outside the bucket or
// overlapping another.
absl::StatusOr<PowerSgdPlan> MakePowerSgdPlan(
    int64_t d, absl::Span<const Segment> segments, const std::string& state_key,
    const CompressorOptions& options, bool compress);

// Orthonormalises the r columns of the rows x r row-major matrix p in place
// (modified Gram-Schmidt in double; `basis` is scratch). A column that
// vanishes (a rank-deficient sum) or is not finite becomes zero.
void OrthonormalizeColumns(int64_t rows, int64_t r, float* p,
                           std::vector<double>* basis);

}  // namespace terse

#endif  // TERSE_COMPRESSORS_POWERSGD_PLAN_H_
