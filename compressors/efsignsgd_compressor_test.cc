#include "compressors/efsignsgd_compressor.h"

#include <cmath>
#include <vector>

#include "compressors/test_util.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

TEST(EfSignSgdCompressorTest, ScaledSignPerBlock) {
  const int64_t d = 1003;
  const std::vector<float> x = GaussianVector(d, 1);
  for (int64_t block : {int64_t{0}, int64_t{100}, int64_t{1}}) {
    CompressorOptions opt;
    opt.sign_block_size = block;
    std::unique_ptr<Compressor> c = MakeEfSignSgdCompressor(32, opt);
    Payload p;
    ASSERT_TRUE(c->Compress(x, {}, &p).ok());
    EXPECT_EQ(static_cast<int64_t>(p.bytes.size()), c->MaxPayloadBytes(d));
    std::vector<float> out(d, 0.0f);
    ASSERT_TRUE(c->AccumulateInto(p.bytes, absl::MakeSpan(out)).ok());
    const int64_t b = block == 0 ? d : block;
    for (int64_t start = 0; start < d; start += b) {
      const int64_t end = std::min(d, start + b);
      double sum = 0;
      for (int64_t i = start; i < end; ++i) sum += std::fabs(x[i]);
      const float scale = static_cast<float>(sum / (end - start));
      for (int64_t i = start; i < end; ++i) {
        ASSERT_EQ(out[i], x[i] < 0 ? -scale : scale) << i;
      }
    }
  }
  // About 32x smaller than fp32 for the whole-bucket scale.
  std::unique_ptr<Compressor> c = MakeEfSignSgdCompressor(32, {});
  EXPECT_LT(c->MaxPayloadBytes(1 << 20), (4 << 20) / 31);
}

}  // namespace
}  // namespace terse
