#include "compressors/error_feedback.h"

#include <cmath>
#include <vector>

#include "compressors/cast_compressor.h"
#include "compressors/powersgd_compressor.h"
#include "compressors/qsgd_compressor.h"
#include "compressors/randomk_compressor.h"
#include "compressors/sparsifier.h"
#include "compressors/test_util.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

// Runs T steps through `ef` (Protocol A or B, one rank) and checks the
// conservation law: residual + sum of decoded sends == sum of inputs.
// Per step, residual_t + sent_t == input_t + residual_{t-1} in float
// (exact when `exact`), and cumulatively within `tol` in double.
void CheckConservation(ErrorFeedback* ef, int64_t d, int steps, bool exact,
                       double tol) {
  std::vector<double> inputs(d, 0.0), sent(d, 0.0);
  std::vector<float> residual(d, 0.0f);
  CompressContext ctx;
  ctx.key = "t";
  for (int t = 0; t < steps; ++t) {
    ctx.step = t;
    const std::vector<float> g = GaussianVector(d, 100 + t);
    std::vector<float> decoded(d, 0.0f);
    if (ef->num_rounds() == 0) {
      Payload p;
      ASSERT_TRUE(ef->Compress(g, ctx, &p).ok());
      ASSERT_TRUE(ef->Decompress(p.bytes, absl::MakeSpan(decoded)).ok());
    } else {
      auto st = ef->BeginRounds(g, ctx);
      ASSERT_TRUE(st.ok());
      for (int r = 0; r < (*st)->num_rounds(); ++r) {
        ASSERT_TRUE((*st)->EndRound(r).ok());  // One rank: sum == own.
      }
      ASSERT_TRUE((*st)->AccumulateLocal(absl::MakeSpan(decoded)).ok());
    }
    const std::vector<float> now = ef->Residual("t", 0, d);
    for (int64_t i = 0; i < d; ++i) {
      const float a = g[i] + residual[i];
      if (exact) {
        ASSERT_EQ(now[i] + decoded[i], a) << "step " << t << " i " << i;
      } else {
        ASSERT_NEAR(now[i] + decoded[i], a, 1e-5 * (1 + std::fabs(a)));
      }
      inputs[i] += g[i];
      sent[i] += decoded[i];
    }
    residual = now;
  }
  for (int64_t i = 0; i < d; ++i) {
    ASSERT_NEAR(residual[i] + sent[i], inputs[i], tol) << i;
  }
}

TEST(ErrorFeedbackTest, ConservationTopKFp32IsExact) {
  CompressorOptions opt;
  opt.value_type = ValueType::kFloat32;
  ErrorFeedback ef(MakeSparsifier(CompressorId::kTopK, 20, opt));
  CheckConservation(&ef, 5000, 30, /*exact=*/true, 1e-3);
  // Every entry was eventually sent: the residual stays bounded.
  double max_residual = 0;
  for (float r : ef.Residual("t", 0, 5000)) {
    max_residual = std::max<double>(max_residual, std::fabs(r));
  }
  EXPECT_LT(max_residual, 30.0);
}

TEST(ErrorFeedbackTest, ConservationOtherCompressors) {
  CompressorOptions opt;
  {
    ErrorFeedback ef(MakeSparsifier(CompressorId::kTopK, 20, opt));  // bf16
    CheckConservation(&ef, 3000, 20, false, 1e-3);
  }
  {
    ErrorFeedback ef(MakeSparsifier(CompressorId::kDgc, 50, opt));
    CheckConservation(&ef, 3000, 20, false, 1e-3);
  }
  {
    ErrorFeedback ef(MakeRandomKCompressor(10, opt));
    CheckConservation(&ef, 3000, 20, true, 1e-3);
  }
  {
    ErrorFeedback ef(MakeQsgdCompressor(8, opt));
    CheckConservation(&ef, 3000, 20, false, 1e-3);
  }
  {
    ErrorFeedback ef(MakePowerSgdCompressor(1, opt));
    CheckConservation(&ef, 900, 10, false, 1e-3);
  }
}

TEST(ErrorFeedbackTest, ResidualFollowsTheTensorAcrossBuckets) {
  CompressorOptions opt;
  opt.value_type = ValueType::kFloat32;
  ErrorFeedback ef(MakeSparsifier(CompressorId::kTopK, 4, opt));
  // Step 1: bucket = [A(6) | B(4)].
  std::vector<float> bucket1 = {1, 2, 3, 4, 5, 6, 10, 20, 30, 40};
  std::vector<Segment> seg1 = {{"A", 0, 6, 0}, {"B", 6, 4, 0}};
  CompressContext ctx;
  ctx.segments = seg1;
  Payload p;
  ASSERT_TRUE(ef.Compress(bucket1, ctx, &p).ok());
  // k = 3: 40, 30, 20 sent; B keeps {10, 0, 0, 0}; A keeps everything.
  EXPECT_EQ(ef.Residual("A", 0, 6), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(ef.Residual("B", 0, 4), (std::vector<float>{10, 0, 0, 0}));
  EXPECT_EQ(ef.num_residuals(), 2);
  // Step 2: B moves to the front of another bucket, A is absent.
  std::vector<float> bucket2 = {0, 0, 0, 0, 7, 7};
  std::vector<Segment> seg2 = {{"B", 0, 4, 0}, {"C", 4, 2, 0}};
  ctx.segments = seg2;
  ASSERT_TRUE(ef.Compress(bucket2, ctx, &p).ok());  // k = 2
  std::vector<float> decoded(6, 0.0f);
  ASSERT_TRUE(ef.Decompress(p.bytes, absl::MakeSpan(decoded)).ok());
  // a = {10, 0, 0, 0, 7, 7}: B's residual 10 was added and sent.
  EXPECT_EQ(decoded, (std::vector<float>{10, 0, 0, 0, 7, 0}));
  EXPECT_EQ(ef.Residual("B", 0, 4), (std::vector<float>{0, 0, 0, 0}));
  EXPECT_EQ(ef.Residual("C", 0, 2), (std::vector<float>{0, 7}));
  EXPECT_EQ(ef.Residual("A", 0, 6), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  // A tensor split over buckets: segments keyed by tensor offset.
  std::vector<Segment> seg3 = {{"A", 0, 3, 3}};
  ctx.segments = seg3;
  std::vector<float> bucket3 = {0, 0, 0};
  ASSERT_TRUE(ef.Compress(bucket3, ctx, &p).ok());
  EXPECT_EQ(ef.num_residuals(), 4);
  ef.Clear();
  EXPECT_EQ(ef.num_residuals(), 0);
}

TEST(ErrorFeedbackTest, RejectsBadSegments) {
  ErrorFeedback ef(MakeSparsifier(CompressorId::kTopK, 4, {}));
  std::vector<float> bucket(10, 1.0f);
  Payload p;
  CompressContext ctx;
  std::vector<Segment> outside = {{"A", 8, 4, 0}};
  ctx.segments = outside;
  EXPECT_FALSE(ef.Compress(bucket, ctx, &p).ok());
  std::vector<Segment> overlap = {{"A", 0, 5, 0}, {"B", 4, 2, 0}};
  ctx.segments = overlap;
  EXPECT_FALSE(ef.Compress(bucket, ctx, &p).ok());
  std::vector<Segment> negative = {{"A", -1, 2, 0}};
  ctx.segments = negative;
  EXPECT_FALSE(ef.Compress(bucket, ctx, &p).ok());
}

TEST(ErrorFeedbackTest, DelegatesTraits) {
  ErrorFeedback ef(MakeCastCompressor(CompressorId::kFp16));
  EXPECT_EQ(ef.id(), CompressorId::kFp16);
  EXPECT_TRUE(ef.summable());
  ErrorFeedback ps(MakePowerSgdCompressor(1, {}));
  EXPECT_EQ(ps.num_rounds(), 2);
}

}  // namespace
}  // namespace terse
