#include "compressors/sparsifier.h"

#include <cmath>
#include <vector>

#include "common/half.h"
#include "compressors/kernels/topk.h"
#include "compressors/test_util.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

// The decoded payload as (index, value) lists.
void Decode(const Compressor& c, const Payload& p, int64_t d,
            std::vector<uint32_t>* idx, std::vector<float>* val) {
  std::vector<float> dense(d, 0.0f);
  ASSERT_TRUE(c.AccumulateInto(p.bytes, absl::MakeSpan(dense)).ok());
  idx->clear();
  val->clear();
  for (int64_t i = 0; i < d; ++i) {
    if (dense[i] != 0.0f) {
      idx->push_back(static_cast<uint32_t>(i));
      val->push_back(dense[i]);
    }
  }
}

TEST(SparsifierTest, TopKSendsExactlyTheTopKInBf16) {
  const int64_t d = 100003;
  const std::vector<float> x = GaussianVector(d, 1);
  CompressorOptions opt;
  std::unique_ptr<Compressor> c = MakeSparsifier(CompressorId::kTopK, 100, opt);
  EXPECT_TRUE(c->fixed_size());
  EXPECT_FALSE(c->summable());
  Payload p;
  ASSERT_TRUE(c->Compress(x, {}, &p).ok());
  const int64_t k = KeepCount(d, 100);
  EXPECT_EQ(k, 1001);
  EXPECT_EQ(static_cast<int64_t>(p.bytes.size()), c->MaxPayloadBytes(d));
  EXPECT_EQ(p.bytes.size(), kPayloadHeaderBytes + 6 * k);
  std::vector<uint32_t> expected(k);
  kernels::TopK(x.data(), d, k, expected.data());
  std::vector<uint32_t> idx;
  std::vector<float> val;
  Decode(*c, p, d, &idx, &val);
  EXPECT_EQ(idx, expected);
  for (size_t j = 0; j < idx.size(); ++j) {
    EXPECT_EQ(val[j], BFloat16ToFloat(FloatToBFloat16(x[idx[j]])));
  }
}

TEST(SparsifierTest, ValueAndIndexOptions) {
  const int64_t d = 1 << 18;
  const std::vector<float> x = GaussianVector(d, 2);
  const int64_t k = KeepCount(d, 100);
  for (IndexCoding coding :
       {IndexCoding::kU32, IndexCoding::kDelta16, IndexCoding::kVarint}) {
    for (ValueType type :
         {ValueType::kFloat32, ValueType::kFloat16, ValueType::kBFloat16}) {
      CompressorOptions opt;
      opt.index_coding = coding;
      opt.value_type = type;
      std::unique_ptr<Compressor> c =
          MakeSparsifier(CompressorId::kTopK, 100, opt);
      Payload p;
      ASSERT_TRUE(c->Compress(x, {}, &p).ok());
      EXPECT_LE(static_cast<int64_t>(p.bytes.size()), c->MaxPayloadBytes(d));
      const double per_entry =
          static_cast<double>(p.bytes.size() - kPayloadHeaderBytes) / k;
      if (coding == IndexCoding::kU32) {
        EXPECT_EQ(per_entry, 4 + ValueTypeBytes(type));
      } else {
        EXPECT_LE(per_entry, 2 + ValueTypeBytes(type));
      }
      std::vector<uint32_t> idx;
      std::vector<float> val;
      Decode(*c, p, d, &idx, &val);
      EXPECT_EQ(static_cast<int64_t>(idx.size()), k);
      if (type == ValueType::kFloat32) {
        for (size_t j = 0; j < idx.size(); ++j) ASSERT_EQ(val[j], x[idx[j]]);
      }
    }
  }
}

TEST(SparsifierTest, DgcAndRedsyncKeepWithinBounds) {
  const int64_t d = 1 << 18;
  CompressorOptions opt;
  opt.value_type = ValueType::kFloat32;
  for (uint32_t seed = 0; seed < 3; ++seed) {
    const std::vector<float> x = GaussianVector(d, 10 + seed);
    for (double cf : {10.0, 100.0, 1000.0}) {
      const int64_t k = KeepCount(d, cf);
      CompressContext ctx;
      ctx.step = seed;
      std::unique_ptr<Compressor> dgc =
          MakeSparsifier(CompressorId::kDgc, cf, opt);
      Payload p;
      ASSERT_TRUE(dgc->Compress(x, ctx, &p).ok());
      std::vector<uint32_t> idx;
      std::vector<float> val;
      Decode(*dgc, p, d, &idx, &val);
      EXPECT_LE(static_cast<int64_t>(idx.size()), k);
      EXPECT_GE(static_cast<int64_t>(idx.size()), std::ceil(0.8 * k));
      EXPECT_LE(static_cast<int64_t>(p.bytes.size()), dgc->MaxPayloadBytes(d));

      std::unique_ptr<Compressor> red =
          MakeSparsifier(CompressorId::kRedSync, cf, opt);
      ASSERT_TRUE(red->Compress(x, ctx, &p).ok());
      Decode(*red, p, d, &idx, &val);
      EXPECT_GE(static_cast<int64_t>(idx.size()), k);
      EXPECT_LT(static_cast<int64_t>(idx.size()), 2 * k);
      EXPECT_LE(static_cast<int64_t>(p.bytes.size()), red->MaxPayloadBytes(d));
    }
  }
}

TEST(SparsifierTest, ThresholdKeepsAtOrAboveAndCapsAtK) {
  std::vector<float> x(1000, 0.0f);
  x[3] = 0.5f;
  x[10] = -0.02f;
  x[500] = 0.0009f;  // Below the threshold.
  x[999] = 2.0f;
  CompressorOptions opt;
  opt.threshold = 0.001;
  opt.value_type = ValueType::kFloat32;
  std::unique_ptr<Compressor> c =
      MakeSparsifier(CompressorId::kThreshold, 10, opt);  // k = 100
  Payload p;
  ASSERT_TRUE(c->Compress(x, {}, &p).ok());
  std::vector<uint32_t> idx;
  std::vector<float> val;
  Decode(*c, p, 1000, &idx, &val);
  EXPECT_EQ(idx, (std::vector<uint32_t>{3, 10, 999}));
  // k = 2 < 3 qualifying: the two largest.
  c = MakeSparsifier(CompressorId::kThreshold, 500, opt);
  ASSERT_TRUE(c->Compress(x, {}, &p).ok());
  Decode(*c, p, 1000, &idx, &val);
  EXPECT_EQ(idx, (std::vector<uint32_t>{3, 999}));
}

TEST(SparsifierTest, RejectsForeignPayloads) {
  const std::vector<float> x = GaussianVector(1000, 3);
  CompressorOptions opt;
  std::unique_ptr<Compressor> topk =
      MakeSparsifier(CompressorId::kTopK, 10, opt);
  std::unique_ptr<Compressor> dgc = MakeSparsifier(CompressorId::kDgc, 10, opt);
  Payload p;
  ASSERT_TRUE(topk->Compress(x, {}, &p).ok());
  std::vector<float> dense(1000, 0.0f);
  EXPECT_FALSE(dgc->AccumulateInto(p.bytes, absl::MakeSpan(dense)).ok());
  for (float v : dense) ASSERT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace terse
