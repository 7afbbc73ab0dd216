// Every compressor's decoder against truncated and corrupted payloads: each
// call must return an error or decode into the buffer, never crash or write
// out of bounds (the buffer has guard elements on both sides).
#include <random>
#include <vector>

#include "compressors/registry.h"
#include "compressors/test_util.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

constexpr int64_t kGuard = 64;
constexpr float kGuardValue = 12345.0f;

class GuardedBuffer {
 public:
  explicit GuardedBuffer(int64_t d)
      : d_(d), data_(d + 2 * kGuard, kGuardValue) {
    std::fill(data_.begin() + kGuard, data_.begin() + kGuard + d, 0.0f);
  }
  absl::Span<float> span() { return absl::MakeSpan(data_.data() + kGuard, d_); }
  bool GuardsIntact() const {
    for (int64_t i = 0; i < kGuard; ++i) {
      if (data_[i] != kGuardValue || data_[kGuard + d_ + i] != kGuardValue) {
        return false;
      }
    }
    return true;
  }

 private:
  int64_t d_;
  std::vector<float> data_;
};

TEST(DecodeFuzzTest, TruncationsAndBitFlipsNeverCrash) {
  const int64_t d = 3000;
  const std::vector<float> x = GaussianVector(d, 1);
  std::mt19937 rng(2);
  for (const std::string& name : CompressorNames()) {
    if (name == "powersgd") continue;  // No payload (allreduce rounds).
    for (IndexCoding coding :
         {IndexCoding::kU32, IndexCoding::kDelta16, IndexCoding::kVarint}) {
      CompressorOptions opt;
      opt.index_coding = coding;
      opt.qsgd_bucket_size = 100;
      opt.sign_block_size = 128;
      auto c = CreateCompressor(name, 20, opt);
      ASSERT_TRUE(c.ok());
      Payload p;
      ASSERT_TRUE((*c)->Compress(x, {}, &p).ok());
      {
        GuardedBuffer buf(d);
        ASSERT_TRUE((*c)->AccumulateInto(p.bytes, buf.span()).ok()) << name;
      }
      for (size_t len = 0; len < p.bytes.size(); ++len) {
        std::vector<uint8_t> cut(p.bytes.begin(), p.bytes.begin() + len);
        GuardedBuffer buf(d);
        EXPECT_FALSE((*c)->AccumulateInto(cut, buf.span()).ok())
            << name << " accepted a truncation to " << len;
        ASSERT_TRUE(buf.GuardsIntact());
      }
      const int trials = 3000;
      for (int t = 0; t < trials; ++t) {
        std::vector<uint8_t> bytes = p.bytes;
        const int flips = 1 + t % 3;
        for (int f = 0; f < flips; ++f) {
          // Half the flips in the header and parameters, where they matter.
          const size_t limit =
              (t & 1) ? std::min<size_t>(bytes.size(), 64) : bytes.size();
          const size_t bit = rng() % (limit * 8);
          bytes[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
        }
        GuardedBuffer buf(d);
        absl::Status st = (*c)->AccumulateInto(bytes, buf.span());
        ASSERT_TRUE(buf.GuardsIntact()) << name;
        if (!st.ok()) {
          EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
        }
      }
      // Random garbage of random sizes.
      for (int t = 0; t < 200; ++t) {
        std::vector<uint8_t> junk(rng() % 200);
        for (uint8_t& b : junk) b = static_cast<uint8_t>(rng());
        GuardedBuffer buf(d);
        (*c)->AccumulateInto(junk, buf.span()).IgnoreError();
        ASSERT_TRUE(buf.GuardsIntact());
      }
    }
  }
}

}  // namespace
}  // namespace terse
