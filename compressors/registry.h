// Making compressors from TERSE_COMPRESSION words, and the per-tensor choice
// (TERSE_COMPRESSION_RULES, TERSE_MIN_COMPRESS_BYTES).
//
// Words: none fp16 bf16 topk randomk dgc redsync threshold powersgd qsgd
// efsignsgd are compressors; gravac and accordion are policies (the policy
// package chooses a compressor and cf per bucket and calls CreateCompressor
// with its choice). Pure functions; thread-safe.
#ifndef TERSE_COMPRESSORS_REGISTRY_H_
#define TERSE_COMPRESSORS_REGISTRY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/config.h"
#include "compressors/compressor.h"
#include "compressors/options.h"

namespace terse {

// The compressor words, in the order of CompressorId.
const std::vector<std::string>& CompressorNames();

// The id of a compressor word; InvalidArgument for a policy word ("gravac is
// a policy, not a compressor") or an unknown word (listing the accepted).
absl::StatusOr<CompressorId> CompressorIdFromName(absl::string_view name);

// Whether `name` is a policy word (gravac, accordion).
bool IsPolicyName(absl::string_view name);

// A compressor for `name` at compression factor cf (>= 1; ignored by
// none/fp16/bf16/efsignsgd/powersgd), wrapped in ErrorFeedback when
// options.error_feedback is kOn, or kDefault and the compressor is lossy.
absl::StatusOr<std::unique_ptr<Compressor>> CreateCompressor(
    absl::string_view name, double cf, const CompressorOptions& options);

// Options from the TERSE_* table (powersgd rank); the rest stay default.
CompressorOptions OptionsFromConfig(const Config& config);

// TERSE_MIN_COMPRESS_BYTES: whether a bucket of `bytes` is large enough to
// compress (smaller ones go dense).
bool ShouldCompress(int64_t bytes, const Config& config);

// The compressor (or policy) word and cf a tensor gets: the first rule of
// TERSE_COMPRESSION_RULES whose glob matches the name (cf 0 in a rule means
// TERSE_CF), else TERSE_COMPRESSION at TERSE_CF.
struct CompressionChoice {
  std::string name;
  double cf = 0;
  bool is_policy = false;
  int rule = -1;  // Index of the matching rule, -1 for the default.
};
CompressionChoice ChooseCompression(absl::string_view tensor_name,
                                    const Config& config);

// The choice for a tensor whose operation carries the compression spec
// `spec` (allreduce(compression=...), see ParseCompressionSpec): that spec
// (cf 0 in it means TERSE_CF) when non-empty and valid, else
// ChooseCompression(tensor_name, config). Specs reaching the reducer were
// validated at enqueue and agreed across ranks.
CompressionChoice ChooseCompressionFor(absl::string_view tensor_name,
                                       absl::string_view spec,
                                       const Config& config);

// Glob match over the whole name: '*' any run (also empty), '?' one char.
bool GlobMatch(absl::string_view glob, absl::string_view name);

}  // namespace terse

#endif  // TERSE_COMPRESSORS_REGISTRY_H_
