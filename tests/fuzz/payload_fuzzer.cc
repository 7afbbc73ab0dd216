// Fuzz target: every compressor's decoder on bytes as received from a peer.
//
// Input layout (tests/fuzz/make_corpus.cc writes seeds in it):
//   byte 0  compressor: CompressorNames()[b % 11] (powersgd included)
//   byte 1  dense size: kDenseSizes[b % 4]
//   byte 2  powersgd only: rank 1 + b % 4
//   rest    Protocol A: the payload; powersgd: the summed round buffers
//           (float32, little-endian; zeros past the end of the input)
//
// Invariants (DESIGN §4: an untrusted payload is an error Status, never a
// crash or a write out of bounds; ASan/UBSan watch the memory side):
//   - AccumulateInto fails with InvalidArgument and leaves dense bit for bit
//     unchanged, or succeeds and adds what Decompress decodes;
//   - SummableBody of a summable compressor names a region inside the
//     payload, or fails;
//   - powersgd: any round sums (NaN, inf, huge) end in a Status, and the
//     next step warm-started from them too.
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/data_type.h"
#include "compressors/compressor.h"
#include "compressors/registry.h"
#include "tests/fuzz/fuzz_target.h"

namespace terse {
namespace fuzz {
namespace {

constexpr int64_t kDenseSizes[] = {1, 7, 64, 1000};
constexpr int kNumDenseSizes = 4;

CompressorOptions DecoderOptions() {
  CompressorOptions options;
  options.error_feedback = ErrorFeedbackMode::kOff;  // A pure decoder.
  options.num_threads = 1;
  return options;
}

// One decoder per Protocol-A compressor (null for powersgd), built once; a
// Compressor's decode side is const and stateless.
const std::vector<std::unique_ptr<Compressor>>& Decoders() {
  static const auto* decoders = [] {
    auto* v = new std::vector<std::unique_ptr<Compressor>>;
    for (const std::string& name : CompressorNames()) {
      absl::StatusOr<std::unique_ptr<Compressor>> c =
          CreateCompressor(name, 20, DecoderOptions());
      if (!c.ok()) FuzzFail(absl::StrCat("CreateCompressor ", name));
      v->push_back((*c)->num_rounds() == 0 ? std::move(*c) : nullptr);
    }
    return v;
  }();
  return *decoders;
}

// A dense buffer with recognisable, non-zero contents.
std::vector<float> Pattern(int64_t d) {
  std::vector<float> v(d);
  for (int64_t i = 0; i < d; ++i) v[i] = 0.25f * static_cast<float>(i % 97) - 3;
  return v;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), 4 * a.size()) == 0);
}

void CheckProtocolA(const Compressor& c, int64_t d,
                    absl::Span<const uint8_t> payload) {
  const std::vector<float> before = Pattern(d);
  std::vector<float> dense = before;
  const absl::Status st = c.AccumulateInto(payload, absl::MakeSpan(dense));
  if (!st.ok()) {
    if (st.code() != absl::StatusCode::kInvalidArgument) {
      FuzzFail(
          absl::StrCat(c.name(), ": not InvalidArgument: ", st.ToString()));
    }
    if (!SameBits(dense, before)) {
      FuzzFail(absl::StrCat(c.name(), ": failed decode changed dense"));
    }
  } else {
    std::vector<float> decoded(d, -1.0f);
    const absl::Status st2 = c.Decompress(payload, absl::MakeSpan(decoded));
    if (!st2.ok()) {
      FuzzFail(absl::StrCat(c.name(),
                            ": AccumulateInto accepted what "
                            "Decompress rejects: ",
                            st2.ToString()));
    }
    for (int64_t i = 0; i < d; ++i) {
      const double expect = static_cast<double>(before[i]) + decoded[i];
      const double got = dense[i];
      if (!std::isfinite(expect) || !std::isfinite(got)) continue;
      const double tol = 1e-6 * (std::fabs(before[i]) + std::fabs(decoded[i]));
      if (std::fabs(got - expect) > tol + 1e-30) {
        FuzzFail(absl::StrCat(c.name(), ": element ", i, " accumulated ", got,
                              " but decodes to ", decoded[i], " over ",
                              before[i]));
      }
    }
  }
  if (c.summable()) {
    Payload copy;
    copy.bytes.assign(payload.begin(), payload.end());
    absl::StatusOr<SummableRegion> region = c.SummableBody(&copy);
    if (region.ok()) {
      const uint8_t* begin = copy.bytes.data();
      const uint8_t* end = begin + copy.bytes.size();
      const int64_t bytes = region->count * DataTypeSize(region->dtype);
      if (region->count < 0 || region->data < begin ||
          region->data + bytes > end) {
        FuzzFail(absl::StrCat(c.name(), ": summable region outside payload"));
      }
    }
  }
}

// Fills `buffer` from the input (zeros once it is used up).
void FillFloats(InputReader* in, absl::Span<float> buffer) {
  const size_t want = 4 * buffer.size();
  const size_t have = std::min(want, in->rest_size());
  std::memset(buffer.data(), 0, want);
  if (have > 0) std::memcpy(buffer.data(), in->rest(), have);
  in->Skip(have);
}

void CheckPowerSgd(int64_t d, int rank, InputReader* in) {
  CompressorOptions options = DecoderOptions();
  options.powersgd_rank = rank;
  absl::StatusOr<std::unique_ptr<Compressor>> c =
      CreateCompressor("powersgd", 1, options);
  if (!c.ok()) FuzzFail("CreateCompressor powersgd");
  std::vector<float> input = Pattern(d);
  CompressContext ctx;
  // Two steps: the second warm-starts from the first step's (fuzzed) sum.
  for (int step = 0; step < 2; ++step) {
    ctx.step = step;
    absl::StatusOr<std::unique_ptr<RoundState>> state =
        (*c)->BeginRounds(input, ctx);
    if (!state.ok()) {
      FuzzFail(
          absl::StrCat("powersgd BeginRounds: ", state.status().ToString()));
    }
    bool ok = true;
    for (int r = 0; r < (*state)->num_rounds() && ok; ++r) {
      FillFloats(in, (*state)->RoundBuffer(r));
      ok = (*state)->EndRound(r).ok();
    }
    std::vector<float> dense(d, 0.0f);
    (*state)->AccumulateInto(absl::MakeSpan(dense)).IgnoreError();
    (*state)->AccumulateLocal(absl::MakeSpan(dense)).IgnoreError();
  }
}

}  // namespace
}  // namespace fuzz
}  // namespace terse

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace terse;        // NOLINT(build/namespaces)
  using namespace terse::fuzz;  // NOLINT(build/namespaces)
  InputReader in(data, size);
  const auto& decoders = Decoders();
  const size_t which = in.Byte() % decoders.size();
  const int64_t d = kDenseSizes[in.Byte() % kNumDenseSizes];
  if (decoders[which] == nullptr) {
    const int rank = 1 + in.Byte() % 4;
    CheckPowerSgd(d, rank, &in);
  } else {
    CheckProtocolA(*decoders[which], d,
                   absl::MakeConstSpan(in.rest(), in.rest_size()));
  }
  return 0;
}
