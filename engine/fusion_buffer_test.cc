#include "engine/fusion_buffer.h"

#include <cmath>
#include <vector>

#include "common/half.h"
#include "engine/scale.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

TEST(FusionBufferTest, StagesScalesAndUnfuses) {
  std::vector<float> a = {1, 2}, b = {3, 4, 5}, out_a(2), out_b(3);
  std::vector<FusionMember> m = {{a.data(), out_a.data(), 2},
                                 {nullptr, nullptr, 0},
                                 {b.data(), out_b.data(), 3}};
  FusionBuffer buf;
  float* region = static_cast<float*>(buf.Fuse(m, DataType::kFloat32, 2.0));
  EXPECT_FALSE(buf.fused_in_outputs());
  EXPECT_EQ(std::vector<float>(region, region + 5),
            (std::vector<float>{2, 4, 6, 8, 10}));
  for (int i = 0; i < 5; ++i) region[i] += 1;  // "Reduce".
  buf.Unfuse(m, DataType::kFloat32, 0.5);
  EXPECT_EQ(out_a, (std::vector<float>{1.5, 2.5}));
  EXPECT_EQ(out_b, (std::vector<float>{3.5, 4.5, 5.5}));
  EXPECT_EQ(a, (std::vector<float>{1, 2}));  // Inputs untouched.
}

TEST(FusionBufferTest, MissingInputsContributeZeros) {
  std::vector<double> b = {7};
  std::vector<FusionMember> m = {{nullptr, nullptr, 2},
                                 {b.data(), b.data(), 1}};
  FusionBuffer buf;
  double* region = static_cast<double*>(buf.Fuse(m, DataType::kFloat64, 1.0));
  EXPECT_EQ(std::vector<double>(region, region + 3),
            (std::vector<double>{0, 0, 7}));
}

TEST(FusionBufferTest, AdjacentOutputsAreUsedInPlace) {
  std::vector<float> flat = {1, 2, 3, 4, 5};
  std::vector<float> in_b = {30, 40, 50};
  // a in place at flat[0..2); b copied into flat[2..5).
  std::vector<FusionMember> m = {{flat.data(), flat.data(), 2},
                                 {in_b.data(), flat.data() + 2, 3}};
  FusionBuffer buf;
  void* region = buf.Fuse(m, DataType::kFloat32, 1.0);
  EXPECT_TRUE(buf.fused_in_outputs());
  EXPECT_EQ(region, flat.data());
  EXPECT_EQ(flat, (std::vector<float>{1, 2, 30, 40, 50}));
  buf.Unfuse(m, DataType::kFloat32, 2.0);
  EXPECT_EQ(flat, (std::vector<float>{2, 4, 60, 80, 100}));
  EXPECT_EQ(buf.capacity_bytes(), 0);  // No staging memory.
}

TEST(FusionBufferTest, BufferIsReusedAcrossSteps) {
  std::vector<int32_t> a(100, 1), b(100, 2);
  std::vector<FusionMember> m = {{a.data(), a.data(), 100},
                                 {b.data(), b.data(), 100}};
  m[1].out = b.data();
  FusionBuffer buf;
  void* first = buf.Fuse(m, DataType::kInt32, 1.0);
  buf.Unfuse(m, DataType::kInt32, 1.0);
  void* second = buf.Fuse(m, DataType::kInt32, 1.0);
  EXPECT_EQ(first, second);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % 64, 0u);
}

TEST(ScaleTest, HalfTypesScaleInFloat) {
  std::vector<uint16_t> h = {FloatToHalf(3.0f), FloatToHalf(-1.5f)};
  ScaleInPlace(h.data(), 2, DataType::kFloat16, 0.5);
  EXPECT_EQ(HalfToFloat(h[0]), 1.5f);
  EXPECT_EQ(HalfToFloat(h[1]), -0.75f);
  std::vector<uint16_t> bf = {FloatToBFloat16(8.0f)};
  std::vector<uint16_t> out(1);
  ScaledCopy(out.data(), bf.data(), 1, DataType::kBFloat16, 0.25);
  EXPECT_EQ(BFloat16ToFloat(out[0]), 2.0f);
  std::vector<int64_t> i = {3, -3};
  ScaleInPlace(i.data(), 2, DataType::kInt64, 2.0);
  EXPECT_EQ(i, (std::vector<int64_t>{6, -6}));
}


// The exact fp16 / bf16 value of x (the scalar conversions, checked against
// the hardware in common/half_test).
float Half(float x) { return HalfToFloat(FloatToHalf(x)); }
float BHalf(float x) { return BFloat16ToFloat(FloatToBFloat16(x)); }

TEST(FusionBufferTest, FuseCastScalesAndRoundsOncePerValue) {
  const std::vector<float> a = {1.0f / 3, -0.0f, 1e-6f, 70000.0f, 2.5f};
  const std::vector<float> b = {-65504.0f, 3.14159f};
  std::vector<float> out_a(5, -1), out_b(2, -1);
  std::vector<FusionMember> m = {{a.data(), out_a.data(), 5},
                                 {nullptr, nullptr, 3},  // Joined rank.
                                 {nullptr, nullptr, 0},
                                 {b.data(), out_b.data(), 2}};
  for (DataType wire : {DataType::kFloat16, DataType::kBFloat16}) {
    auto round = [&](float x) {
      return wire == DataType::kFloat16 ? Half(x) : BHalf(x);
    };
    auto widen = [&](uint16_t h) {
      return wire == DataType::kFloat16 ? HalfToFloat(h) : BFloat16ToFloat(h);
    };
    FusionBuffer buf;
    const uint16_t* region =
        static_cast<const uint16_t*>(buf.FuseCast(m, wire, 0.5));
    EXPECT_FALSE(buf.fused_in_outputs());
    std::vector<float> expected;
    for (float x : a) expected.push_back(round(x * 0.5f));
    for (int i = 0; i < 3; ++i) expected.push_back(0.0f);
    for (float x : b) expected.push_back(round(x * 0.5f));
    for (size_t i = 0; i < expected.size(); ++i) {
      const float got = widen(region[i]);
      EXPECT_TRUE(got == expected[i] && std::signbit(got) ==
                                            std::signbit(expected[i]))
          << DataTypeName(wire) << " element " << i << ": " << got << " vs "
          << expected[i];
    }
    // "Reduce": the region stays as is; widen and scale by 3 into outputs.
    buf.UnfuseCast(m, wire, 3.0);
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(out_a[i], expected[i] * 3.0f) << DataTypeName(wire) << i;
    }
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(out_b[i], expected[8 + i] * 3.0f) << DataTypeName(wire) << i;
    }
  }
  EXPECT_EQ(a[0], 1.0f / 3);  // Inputs untouched.
}

// Buckets above kMinElementsPerThread per thread are split over the kernel
// pool in element ranges that cut through members: every element must land
// where the one-thread reference puts it.
TEST(FusionBufferTest, LargeBucketsSplitOverThreadsMatchTheReference) {
  const std::vector<int64_t> counts = {7, FusionBuffer::kMinElementsPerThread,
                                       0, 3 * FusionBuffer::kMinElementsPerThread + 5,
                                       1};
  std::vector<std::vector<float>> in(counts.size()), out(counts.size());
  std::vector<FusionMember> m;
  int64_t total = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    in[i].resize(counts[i]);
    for (int64_t j = 0; j < counts[i]; ++j) {
      in[i][j] = static_cast<float>((j * 37 + i * 11) % 1001) / 7.0f - 50.0f;
    }
    out[i].assign(counts[i], -1.0f);
    m.push_back({in[i].data(), out[i].data(), counts[i]});
    total += counts[i];
  }
  FusionBuffer buf;
  const float* region =
      static_cast<const float*>(buf.Fuse(m, DataType::kFloat32, 0.25));
  int64_t at = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    for (int64_t j = 0; j < counts[i]; ++j, ++at) {
      ASSERT_EQ(region[at], in[i][j] * 0.25f) << "member " << i << " " << j;
    }
  }
  ASSERT_EQ(at, total);
  buf.Unfuse(m, DataType::kFloat32, 4.0);
  for (size_t i = 0; i < counts.size(); ++i) {
    for (int64_t j = 0; j < counts[i]; ++j) {
      ASSERT_EQ(out[i][j], in[i][j] * 0.25f * 4.0f) << i << " " << j;
    }
  }
  const uint16_t* half =
      static_cast<const uint16_t*>(buf.FuseCast(m, DataType::kFloat16, 0.25));
  at = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    for (int64_t j = 0; j < counts[i]; ++j, ++at) {
      ASSERT_EQ(half[at], FloatToHalf(in[i][j] * 0.25f)) << i << " " << j;
    }
  }
  buf.UnfuseCast(m, DataType::kFloat16, 2.0);
  for (size_t i = 0; i < counts.size(); ++i) {
    for (int64_t j = 0; j < counts[i]; ++j) {
      ASSERT_EQ(out[i][j], Half(in[i][j] * 0.25f) * 2.0f) << i << " " << j;
    }
  }
}

// Staged a piece at a time, each range lands at the start of one
// piece-sized buffer, and a "reduction" of each piece there reaches exactly
// the outputs the whole-bucket path gives: ranges cut through members, the
// last is short, an absent input contributes zeros, an absent output drops
// its part; the 16-bit cast form the same.
TEST(FusionBufferTest, PiecesAreStagedInOnePieceSizedBuffer) {
  const std::vector<int64_t> counts = {5, 1, 0, 9, 4, 6};
  const int64_t piece = 4;
  std::vector<std::vector<float>> in(counts.size()), out(counts.size());
  std::vector<FusionMember> m;
  for (size_t i = 0; i < counts.size(); ++i) {
    for (int64_t j = 0; j < counts[i]; ++j) {
      in[i].push_back(static_cast<float>(i * 100 + j));
    }
    out[i].assign(counts[i], -1.0f);
    m.push_back({in[i].data(), out[i].data(), counts[i]});
  }
  m[1].in = nullptr;   // Zeros.
  m[4].out = nullptr;  // Dropped.
  const int64_t total = 25;
  // Each piece: x -> 2 * x + 1 (a stand-in reduction), then scaled by 0.5.
  auto expect = [&](size_t i, int64_t j) {
    const float x = i == 1 ? 0.0f : in[i][j];
    return (2.0f * (x * 3.0f) + 1.0f) * 0.5f;
  };

  FusionBuffer buf;
  float* region =
      static_cast<float*>(buf.Prepare(m, DataType::kFloat32, piece));
  EXPECT_TRUE(buf.staged_in_pieces());
  EXPECT_EQ(buf.capacity_bytes(), piece * 4);
  std::vector<float> fused;  // What each piece held, in order.
  for (int64_t begin = 0; begin < total; begin += piece) {
    const int64_t end = std::min(total, begin + piece);
    buf.FuseRange(m, DataType::kFloat32, 3.0, begin, end);
    for (int64_t k = 0; k < end - begin; ++k) {
      fused.push_back(region[k]);
      region[k] = 2.0f * region[k] + 1.0f;
    }
    buf.UnfuseRange(m, DataType::kFloat32, 0.5, begin, end);
  }
  std::vector<float> want_fused;
  for (size_t i = 0; i < counts.size(); ++i) {
    for (int64_t j = 0; j < counts[i]; ++j) {
      want_fused.push_back(i == 1 ? 0.0f : in[i][j] * 3.0f);
      if (i != 4) {
        EXPECT_EQ(out[i][j], expect(i, j)) << i << " " << j;
      }
    }
  }
  EXPECT_EQ(fused, want_fused);
  EXPECT_EQ(out[4], std::vector<float>(4, -1.0f));

  // The cast form: 16-bit pieces, at the start of the (reused) buffer.
  uint16_t* half =
      static_cast<uint16_t*>(buf.PrepareCast(m, DataType::kBFloat16, piece));
  EXPECT_TRUE(buf.staged_in_pieces());
  EXPECT_EQ(static_cast<void*>(half), static_cast<void*>(region));
  for (int64_t begin = 0; begin < total; begin += piece) {
    const int64_t end = std::min(total, begin + piece);
    buf.FuseCastRange(m, DataType::kBFloat16, 1.0, begin, end);
    buf.UnfuseCastRange(m, DataType::kBFloat16, 1.0, begin, end);
  }
  for (size_t i = 0; i < counts.size(); ++i) {
    if (i == 4) continue;
    for (int64_t j = 0; j < counts[i]; ++j) {
      const float x = i == 1 ? 0.0f : in[i][j];
      EXPECT_EQ(out[i][j], BFloat16ToFloat(FloatToBFloat16(x))) << i << j;
    }
  }

  // A piece no smaller than the bucket stages the whole bucket.
  buf.Prepare(m, DataType::kFloat32, total);
  EXPECT_FALSE(buf.staged_in_pieces());
}

}  // namespace
}  // namespace terse
