#include "compressors/qsgd_compressor.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "compressors/kernels/fixed_order_sum.h"
#include "compressors/test_util.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

TEST(QsgdCompressorTest, LevelsFromCf) {
  CompressorOptions opt;
  EXPECT_EQ(QsgdLevels(4, opt), 127);    // 8 bits.
  EXPECT_EQ(QsgdLevels(8, opt), 7);      // 4 bits.
  EXPECT_EQ(QsgdLevels(100, opt), 1);    // 2 bits minimum.
  EXPECT_EQ(QsgdLevels(1, opt), 32767);  // 16 bits maximum.
  opt.qsgd_levels = 3;
  EXPECT_EQ(QsgdLevels(100, opt), 3);
}

TEST(QsgdCompressorTest, DecodedValuesAreOnTheGridAndSizeIsFixed) {
  const int64_t d = 1000;
  const std::vector<float> x = GaussianVector(d, 1);
  CompressorOptions opt;
  opt.qsgd_bucket_size = 128;
  std::unique_ptr<Compressor> c = MakeQsgdCompressor(8, opt);  // s = 7
  Payload p;
  ASSERT_TRUE(c->Compress(x, {}, &p).ok());
  EXPECT_EQ(static_cast<int64_t>(p.bytes.size()), c->MaxPayloadBytes(d));
  // 8 norms + 1000 * 4 bits.
  EXPECT_EQ(p.bytes.size(), kPayloadHeaderBytes + 8 + 4 * 8 + 500);
  std::vector<float> out(d, 0.0f);
  ASSERT_TRUE(c->AccumulateInto(p.bytes, absl::MakeSpan(out)).ok());
  for (int64_t b = 0; b * 128 < d; ++b) {
    double sq = 0;
    for (int64_t i = b * 128; i < std::min<int64_t>(d, (b + 1) * 128); ++i) {
      sq += static_cast<double>(x[i]) * x[i];
    }
    const float unit = static_cast<float>(std::sqrt(sq)) / 7.0f;
    for (int64_t i = b * 128; i < std::min<int64_t>(d, (b + 1) * 128); ++i) {
      const float level = std::fabs(out[i]) / unit;
      EXPECT_NEAR(level, std::round(level), 1e-4);
      EXPECT_LE(std::round(level), 7);
      // Rounded to a neighbour level of |x| / unit.
      EXPECT_LE(std::fabs(std::fabs(out[i]) - std::fabs(x[i])), unit * 1.0001f);
      if (out[i] != 0) {
        EXPECT_EQ(std::signbit(out[i]), std::signbit(x[i]));
      }
    }
  }
}

TEST(QsgdCompressorTest, UnbiasedOverSeeds) {
  const int64_t d = 64;
  const std::vector<float> x = GaussianVector(d, 2);
  CompressorOptions opt;
  std::unique_ptr<Compressor> c = MakeQsgdCompressor(16, opt);  // s = 1
  const int trials = 4000;
  std::vector<double> mean(d, 0.0);
  double norm = 0;
  for (float v : x) norm += static_cast<double>(v) * v;
  norm = std::sqrt(norm);
  for (int t = 0; t < trials; ++t) {
    CompressContext ctx;
    ctx.step = t;
    Payload p;
    ASSERT_TRUE(c->Compress(x, ctx, &p).ok());
    std::vector<float> out(d, 0.0f);
    ASSERT_TRUE(c->AccumulateInto(p.bytes, absl::MakeSpan(out)).ok());
    for (int64_t i = 0; i < d; ++i) mean[i] += out[i] / trials;
  }
  for (int64_t i = 0; i < d; ++i) {
    // Per-draw sd <= norm / 2; 6 sd of the mean.
    EXPECT_NEAR(mean[i], x[i], 6 * 0.5 * norm / std::sqrt(trials)) << i;
  }
}

TEST(QsgdCompressorTest, RanksDrawDifferentNoise) {
  const std::vector<float> x = GaussianVector(4096, 3);
  std::unique_ptr<Compressor> c = MakeQsgdCompressor(16, {});
  CompressContext ctx;
  Payload a, b, a2;
  ASSERT_TRUE(c->Compress(x, ctx, &a).ok());
  ASSERT_TRUE(c->Compress(x, ctx, &a2).ok());
  ctx.rank = 1;
  ASSERT_TRUE(c->Compress(x, ctx, &b).ok());
  EXPECT_EQ(a.bytes, a2.bytes);  // Reproducible.
  EXPECT_NE(a.bytes, b.bytes);
}

TEST(QsgdCompressorTest, NormsInTheFixedSummationOrder) {
  // The norms are float(sqrt(sum x^2)) with the sum in the documented order
  // (kernels/fixed_order_sum.h) that the device kernels reproduce, bit for
  // bit; within one float ulp of the exact norm. Buckets of 100 (one chunk,
  // a partial last one) and 10000 (three chunks, then a partial bucket).
  const int64_t d = 12345;
  const std::vector<float> x = GaussianVector(d, 5);
  for (int64_t bucket : {int64_t{100}, int64_t{10000}}) {
    CompressorOptions opt;
    opt.qsgd_bucket_size = bucket;
    std::unique_ptr<Compressor> c = MakeQsgdCompressor(8, opt);
    Payload p;
    ASSERT_TRUE(c->Compress(x, {}, &p).ok());
    const uint8_t* norms = p.bytes.data() + kPayloadHeaderBytes + 8;
    for (int64_t b = 0; b * bucket < d; ++b) {
      const int64_t begin = b * bucket, end = std::min(d, begin + bucket);
      const double sq = kernels::FixedOrderSum(end - begin, [&](int64_t i) {
        return static_cast<double>(x[begin + i]) * x[begin + i];
      });
      float norm;
      std::memcpy(&norm, norms + 4 * b, 4);
      EXPECT_EQ(norm, static_cast<float>(std::sqrt(sq))) << bucket << " " << b;
      long double exact = 0;
      for (int64_t i = begin; i < end; ++i) {
        exact += static_cast<long double>(x[i]) * x[i];
      }
      const float want = static_cast<float>(std::sqrt(exact));
      EXPECT_GE(norm, std::nextafter(want, 0.0f));
      EXPECT_LE(norm, std::nextafter(want, INFINITY));
    }
  }
}

TEST(QsgdCompressorTest, ZeroAndNonFiniteBuckets) {
  // Bucket 0 is zero: zeros. Bucket 2 holds a NaN: its norm is NaN and the
  // whole bucket decodes to NaN (the NaN propagates, nothing crashes).
  std::vector<float> x(300, 0.0f);
  for (int i = 100; i < 300; ++i) x[i] = 0.5f;
  x[250] = NAN;
  CompressorOptions opt;
  opt.qsgd_bucket_size = 100;
  std::unique_ptr<Compressor> c = MakeQsgdCompressor(8, opt);
  Payload p;
  ASSERT_TRUE(c->Compress(x, {}, &p).ok());
  std::vector<float> out(300, 0.0f);
  ASSERT_TRUE(c->AccumulateInto(p.bytes, absl::MakeSpan(out)).ok());
  for (int i = 0; i < 100; ++i) EXPECT_EQ(out[i], 0.0f);
  for (int i = 100; i < 200; ++i) EXPECT_TRUE(std::isfinite(out[i]));
  for (int i = 200; i < 300; ++i) EXPECT_TRUE(std::isnan(out[i]));
}

}  // namespace
}  // namespace terse
