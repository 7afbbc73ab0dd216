#include "engine/fusion_buffer.h"

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

}  // namespace
}  // namespace terse
