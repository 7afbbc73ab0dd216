#include "compressors/cast_compressor.h"

#include <vector>

#include "common/half.h"
#include "compressors/test_util.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

TEST(CastCompressorTest, RoundTripsAndTraits) {
  const std::vector<float> x = GaussianVector(1001, 1, 100.0f);
  for (CompressorId id :
       {CompressorId::kNone, CompressorId::kFp16, CompressorId::kBf16}) {
    std::unique_ptr<Compressor> c = MakeCastCompressor(id);
    EXPECT_TRUE(c->summable());
    EXPECT_TRUE(c->fixed_size());
    EXPECT_FALSE(c->lossy());
    Payload p;
    ASSERT_TRUE(c->Compress(x, {}, &p).ok());
    EXPECT_EQ(static_cast<int64_t>(p.bytes.size()), c->MaxPayloadBytes(1001));
    std::vector<float> out(1001, 1.0f);
    ASSERT_TRUE(c->AccumulateInto(p.bytes, absl::MakeSpan(out)).ok());
    for (size_t i = 0; i < x.size(); ++i) {
      const float cast = id == CompressorId::kNone ? x[i]
                         : id == CompressorId::kFp16
                             ? HalfToFloat(FloatToHalf(x[i]))
                             : BFloat16ToFloat(FloatToBFloat16(x[i]));
      ASSERT_EQ(out[i], 1.0f + cast) << c->name() << " at " << i;
    }
    absl::StatusOr<SummableRegion> region = c->SummableBody(&p);
    ASSERT_TRUE(region.ok()) << region.status();
    EXPECT_EQ(region->count, 1001);
    EXPECT_EQ(region->data, p.bytes.data() + kPayloadHeaderBytes);
    // The dense buffer must match the payload's size.
    std::vector<float> wrong(1000);
    EXPECT_FALSE(c->AccumulateInto(p.bytes, absl::MakeSpan(wrong)).ok());
  }
}

TEST(CastCompressorTest, EmptyBucket) {
  std::unique_ptr<Compressor> c = MakeCastCompressor(CompressorId::kFp16);
  Payload p;
  ASSERT_TRUE(c->Compress({}, {}, &p).ok());
  EXPECT_TRUE(c->AccumulateInto(p.bytes, {}).ok());
}

}  // namespace
}  // namespace terse
