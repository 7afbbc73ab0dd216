// A stand-in for the engine in tests: runs one step of a compressor's
// protocol (compressor.h) for N in-process "ranks", with plain summation of
// the per-rank buffers in place of an allreduce and concatenation in place
// of an allgather. No communicator is involved.
//
// Summation is float addition in rank order (fp16/bf16 bodies: converted to
// float, summed, rounded once), which is one of the results a real
// allreduce may give. Test-only; not thread-safe (the compressors are used
// from the calling thread only).
#ifndef TERSE_COMPRESSORS_TESTING_SIMULATED_RANKS_H_
#define TERSE_COMPRESSORS_TESTING_SIMULATED_RANKS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compressors/compressor.h"

namespace terse {
namespace testing {

struct SimulatedStep {
  // The reduced bucket (sum over ranks of the decoded contributions), the
  // same on every rank (checked).
  std::vector<float> reduced;
  // Per rank: its own decoded contribution (what it "sent").
  std::vector<std::vector<float>> sent;
  // Per rank: bytes it put on the wire (payload, or all round buffers).
  std::vector<int64_t> bytes;
};

// compressors[r] is rank r's compressor (its own state); inputs[r] its
// bucket (all the same size). ctx is every rank's context, with ctx.rank set
// to r. Errors from the compressors are returned; disagreement between
// ranks (different reduced results or summable headers) is Internal.
absl::StatusOr<SimulatedStep> SimulateStep(
    absl::Span<Compressor* const> compressors,
    const std::vector<std::vector<float>>& inputs, CompressContext ctx);

}  // namespace testing
}  // namespace terse

#endif  // TERSE_COMPRESSORS_TESTING_SIMULATED_RANKS_H_
