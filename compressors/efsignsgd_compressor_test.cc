#include "compressors/efsignsgd_compressor.h"

#include <cmath>
#include <limits>
#include <vector>

#include "compressors/kernels/fixed_order_sum.h"
#include "compressors/test_util.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

// The scale of x[start, end) in the documented order
// (kernels/fixed_order_sum.h), which the device kernels reproduce.
float FixedOrderScale(const std::vector<float>& x, int64_t start, int64_t end) {
  const double sum = kernels::FixedOrderSum(end - start, [&](int64_t i) {
    return std::fabs(static_cast<double>(x[start + i]));
  });
  return static_cast<float>(sum / static_cast<double>(end - start));
}

TEST(EfSignSgdCompressorTest, ScaledSignPerBlock) {
  // 9003 elements: the whole-bucket block spans three 4096-element chunks
  // of the fixed summation order; 100 and 5000 leave a partial last block.
  const int64_t d = 9003;
  const std::vector<float> x = GaussianVector(d, 1);
  for (int64_t block :
       {int64_t{0}, int64_t{100}, int64_t{5000}, int64_t{1}, int64_t{20000}}) {
    CompressorOptions opt;
    opt.sign_block_size = block;
    std::unique_ptr<Compressor> c = MakeEfSignSgdCompressor(32, opt);
    Payload p;
    ASSERT_TRUE(c->Compress(x, {}, &p).ok());
    EXPECT_EQ(static_cast<int64_t>(p.bytes.size()), c->MaxPayloadBytes(d));
    std::vector<float> out(d, 0.0f);
    ASSERT_TRUE(c->AccumulateInto(p.bytes, absl::MakeSpan(out)).ok());
    const int64_t b = block == 0 || block > d ? d : block;
    for (int64_t start = 0; start < d; start += b) {
      const int64_t end = std::min(d, start + b);
      const float scale = FixedOrderScale(x, start, end);
      // The fp64 mean, taken in long double: within one float ulp.
      long double exact = 0;
      for (int64_t i = start; i < end; ++i) exact += std::fabs(x[i]);
      const float mean = static_cast<float>(exact / (end - start));
      EXPECT_GE(scale, std::nextafter(mean, 0.0f)) << start;
      EXPECT_LE(scale, std::nextafter(mean, INFINITY)) << start;
      for (int64_t i = start; i < end; ++i) {
        ASSERT_EQ(out[i], x[i] < 0 ? -scale : scale) << i;
      }
    }
  }
  // About 32x smaller than fp32 for the whole-bucket scale.
  std::unique_ptr<Compressor> c = MakeEfSignSgdCompressor(32, {});
  EXPECT_LT(c->MaxPayloadBytes(1 << 20), (4 << 20) / 31);
}

TEST(EfSignSgdCompressorTest, NonFiniteBlocks) {
  // Block 1 holds an infinity (scale +inf), block 2 a NaN (scale NaN);
  // block 0 is finite. The sign bits stay the elements' own.
  std::vector<float> x = GaussianVector(300, 2);
  x[150] = -std::numeric_limits<float>::infinity();
  x[250] = NAN;
  CompressorOptions opt;
  opt.sign_block_size = 100;
  std::unique_ptr<Compressor> c = MakeEfSignSgdCompressor(32, opt);
  Payload p;
  ASSERT_TRUE(c->Compress(x, {}, &p).ok());
  std::vector<float> out(300, 0.0f);
  ASSERT_TRUE(c->AccumulateInto(p.bytes, absl::MakeSpan(out)).ok());
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(out[i], x[i] < 0 ? -FixedOrderScale(x, 0, 100)
                               : FixedOrderScale(x, 0, 100));
  }
  for (int i = 100; i < 200; ++i) EXPECT_TRUE(std::isinf(out[i])) << i;
  EXPECT_LT(out[150], 0);
  for (int i = 200; i < 300; ++i) EXPECT_TRUE(std::isnan(out[i])) << i;
}

}  // namespace
}  // namespace terse
