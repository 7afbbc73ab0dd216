#include "compressors/randomk_compressor.h"

#include <vector>

#include "compressors/kernels/randomk.h"
#include "compressors/test_util.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

TEST(RandomKCompressorTest, SameSeedSamePositionsOnEveryRank) {
  const int64_t d = 50000;
  CompressorOptions opt;
  std::unique_ptr<Compressor> rank0 = MakeRandomKCompressor(100, opt);
  std::unique_ptr<Compressor> rank1 = MakeRandomKCompressor(100, opt);
  CompressContext ctx;
  ctx.seed = 1234;
  ctx.step = 9;
  ctx.stream = 2;
  Payload p0, p1;
  ASSERT_TRUE(rank0->Compress(GaussianVector(d, 1), ctx, &p0).ok());
  ctx.rank = 1;
  ASSERT_TRUE(rank1->Compress(GaussianVector(d, 2), ctx, &p1).ok());
  // Same header and seed: only the values differ.
  ASSERT_EQ(p0.bytes.size(), p1.bytes.size());
  const size_t head = kPayloadHeaderBytes + 8;
  EXPECT_TRUE(
      std::equal(p0.bytes.begin(), p0.bytes.begin() + head, p1.bytes.begin()));
  EXPECT_EQ(static_cast<int64_t>(p0.bytes.size()), rank0->MaxPayloadBytes(d));
  EXPECT_EQ(p0.bytes.size(), head + 4 * 500);
  // Decoding puts the values at the shared positions.
  std::vector<uint32_t> positions;
  kernels::RandomKIndices(kernels::MixSeed(1234, 9, 2), d, 500, &positions);
  const std::vector<float> x = GaussianVector(d, 1);
  std::vector<float> dense(d, 0.0f);
  ASSERT_TRUE(rank1->AccumulateInto(p0.bytes, absl::MakeSpan(dense)).ok());
  std::vector<float> expected(d, 0.0f);
  for (uint32_t i : positions) expected[i] = x[i];
  EXPECT_EQ(dense, expected);
  // Another step draws other positions.
  ctx.step = 10;
  Payload p2;
  ASSERT_TRUE(rank0->Compress(x, ctx, &p2).ok());
  EXPECT_FALSE(
      std::equal(p0.bytes.begin(), p0.bytes.begin() + head, p2.bytes.begin()));
}

TEST(RandomKCompressorTest, SummableRegionIsTheValues) {
  std::unique_ptr<Compressor> c = MakeRandomKCompressor(10, {});
  EXPECT_TRUE(c->summable());
  Payload p;
  ASSERT_TRUE(c->Compress(GaussianVector(1000, 3), {}, &p).ok());
  absl::StatusOr<SummableRegion> region = c->SummableBody(&p);
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ(region->count, 100);
  EXPECT_EQ(region->dtype, DataType::kFloat32);
  EXPECT_EQ(region->data + 400, p.bytes.data() + p.bytes.size());
}

}  // namespace
}  // namespace terse
