#include "compressors/compressor.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace terse {

absl::Status Compressor::Compress(absl::Span<const float> input,
                                  const CompressContext& ctx,
                                  Payload* payload) {
  return absl::FailedPreconditionError(
      absl::StrCat(name(), " uses allreduce rounds: call BeginRounds"));
}

absl::Status Compressor::AccumulateInto(absl::Span<const uint8_t> payload,
                                        absl::Span<float> dense) const {
  return absl::FailedPreconditionError(
      absl::StrCat(name(), " uses allreduce rounds: no payload to decode"));
}

absl::Status Compressor::Decompress(absl::Span<const uint8_t> payload,
                                    absl::Span<float> dense) const {
  std::fill(dense.begin(), dense.end(), 0.0f);
  return AccumulateInto(payload, dense);
}

absl::StatusOr<SummableRegion> Compressor::SummableBody(
    Payload* payload) const {
  return absl::FailedPreconditionError(
      absl::StrCat(name(), " payloads cannot be summed by an allreduce"));
}

absl::StatusOr<std::unique_ptr<RoundState>> Compressor::BeginRounds(
    absl::Span<const float> input, const CompressContext& ctx) {
  return absl::FailedPreconditionError(
      absl::StrCat(name(), " sends one payload: call Compress"));
}

int64_t KeepCount(int64_t d, double cf) {
  if (d <= 0) return 0;
  if (!(cf >= 1.0)) return d;
  const double k = std::ceil(static_cast<double>(d) / cf);
  return std::min<int64_t>(d, std::max<int64_t>(1, static_cast<int64_t>(k)));
}

std::string StateKey(const CompressContext& ctx) {
  if (!ctx.key.empty()) return ctx.key;
  return absl::StrCat("bucket:", ctx.stream);
}

}  // namespace terse
