#include "compressors/testing/simulated_ranks.h"

#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/half.h"
#include "common/status.h"

namespace terse {
namespace testing {
namespace {

float LoadElement(const uint8_t* p, DataType dtype, int64_t i) {
  switch (dtype) {
    case DataType::kFloat16: {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      return HalfToFloat(h);
    }
    case DataType::kBFloat16: {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      return BFloat16ToFloat(h);
    }
    default: {
      float f;
      std::memcpy(&f, p + 4 * i, 4);
      return f;
    }
  }
}

void StoreElement(uint8_t* p, DataType dtype, int64_t i, float v) {
  switch (dtype) {
    case DataType::kFloat16: {
      const uint16_t h = FloatToHalf(v);
      std::memcpy(p + 2 * i, &h, 2);
      return;
    }
    case DataType::kBFloat16: {
      const uint16_t h = FloatToBFloat16(v);
      std::memcpy(p + 2 * i, &h, 2);
      return;
    }
    default:
      std::memcpy(p + 4 * i, &v, 4);
  }
}

absl::Status SameOnEveryRank(const std::vector<std::vector<float>>& results) {
  for (size_t r = 1; r < results.size(); ++r) {
    if (std::memcmp(results[r].data(), results[0].data(),
                    results[0].size() * sizeof(float)) != 0) {
      return absl::InternalError(
          absl::StrCat("rank ", r, " reduced to a different result"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<SimulatedStep> RunRounds(
    absl::Span<Compressor* const> compressors,
    const std::vector<std::vector<float>>& inputs, CompressContext ctx) {
  const size_t n = compressors.size();
  const size_t d = inputs[0].size();
  SimulatedStep out;
  std::vector<std::unique_ptr<RoundState>> states;
  for (size_t r = 0; r < n; ++r) {
    ctx.rank = static_cast<int>(r);
    TERSE_ASSIGN_OR_RETURN(std::unique_ptr<RoundState> state,
                           compressors[r]->BeginRounds(inputs[r], ctx));
    states.push_back(std::move(state));
  }
  out.bytes.assign(n, 0);
  const int rounds = states[0]->num_rounds();
  for (int round = 0; round < rounds; ++round) {
    std::vector<float> sum(states[0]->RoundBuffer(round).size(), 0.0f);
    for (size_t r = 0; r < n; ++r) {
      absl::Span<float> buf = states[r]->RoundBuffer(round);
      if (buf.size() != sum.size()) {
        return absl::InternalError("round buffers differ in size");
      }
      for (size_t i = 0; i < buf.size(); ++i) sum[i] += buf[i];
      out.bytes[r] += static_cast<int64_t>(buf.size() * sizeof(float));
    }
    for (size_t r = 0; r < n; ++r) {
      absl::Span<float> buf = states[r]->RoundBuffer(round);
      std::copy(sum.begin(), sum.end(), buf.begin());
      TERSE_RETURN_IF_ERROR(states[r]->EndRound(round));
    }
  }
  std::vector<std::vector<float>> reduced(n, std::vector<float>(d, 0.0f));
  out.sent.assign(n, std::vector<float>(d, 0.0f));
  for (size_t r = 0; r < n; ++r) {
    TERSE_RETURN_IF_ERROR(
        states[r]->AccumulateInto(absl::MakeSpan(reduced[r])));
    TERSE_RETURN_IF_ERROR(
        states[r]->AccumulateLocal(absl::MakeSpan(out.sent[r])));
  }
  TERSE_RETURN_IF_ERROR(SameOnEveryRank(reduced));
  out.reduced = std::move(reduced[0]);
  return out;
}

}  // namespace

absl::StatusOr<SimulatedStep> SimulateStep(
    absl::Span<Compressor* const> compressors,
    const std::vector<std::vector<float>>& inputs, CompressContext ctx) {
  const size_t n = compressors.size();
  if (n == 0 || inputs.size() != n) {
    return absl::InvalidArgumentError("one input per rank, at least one rank");
  }
  const size_t d = inputs[0].size();
  for (const auto& in : inputs) {
    if (in.size() != d) return absl::InvalidArgumentError("input sizes differ");
  }
  if (compressors[0]->num_rounds() > 0)
    return RunRounds(compressors, inputs, ctx);

  SimulatedStep out;
  std::vector<Payload> payloads(n);
  out.sent.assign(n, std::vector<float>(d, 0.0f));
  for (size_t r = 0; r < n; ++r) {
    ctx.rank = static_cast<int>(r);
    TERSE_RETURN_IF_ERROR(
        compressors[r]->Compress(inputs[r], ctx, &payloads[r]));
    out.bytes.push_back(static_cast<int64_t>(payloads[r].bytes.size()));
    TERSE_RETURN_IF_ERROR(compressors[r]->Decompress(
        payloads[r].bytes, absl::MakeSpan(out.sent[r])));
  }
  std::vector<std::vector<float>> reduced(n, std::vector<float>(d, 0.0f));
  if (compressors[0]->summable()) {
    // Allreduce: sum the bodies elementwise; the rest must agree.
    std::vector<SummableRegion> regions;
    for (size_t r = 0; r < n; ++r) {
      TERSE_ASSIGN_OR_RETURN(SummableRegion region,
                             compressors[r]->SummableBody(&payloads[r]));
      regions.push_back(region);
      const size_t head = region.data - payloads[r].bytes.data();
      if (payloads[r].bytes.size() != payloads[0].bytes.size() ||
          std::memcmp(payloads[r].bytes.data(), payloads[0].bytes.data(),
                      head) != 0) {
        return absl::InternalError(
            absl::StrCat("rank ", r, ": summable payload header differs"));
      }
    }
    const DataType dtype = regions[0].dtype;
    for (int64_t i = 0; i < regions[0].count; ++i) {
      float sum = 0.0f;
      for (size_t r = 0; r < n; ++r)
        sum += LoadElement(regions[r].data, dtype, i);
      for (size_t r = 0; r < n; ++r)
        StoreElement(regions[r].data, dtype, i, sum);
    }
    for (size_t r = 0; r < n; ++r) {
      TERSE_RETURN_IF_ERROR(compressors[r]->AccumulateInto(
          payloads[r].bytes, absl::MakeSpan(reduced[r])));
    }
  } else {
    // Allgather: every rank decodes every payload, in rank order.
    for (size_t r = 0; r < n; ++r) {
      for (size_t src = 0; src < n; ++src) {
        TERSE_RETURN_IF_ERROR(compressors[r]->AccumulateInto(
            payloads[src].bytes, absl::MakeSpan(reduced[r])));
      }
    }
  }
  TERSE_RETURN_IF_ERROR(SameOnEveryRank(reduced));
  out.reduced = std::move(reduced[0]);
  return out;
}

}  // namespace testing
}  // namespace terse
