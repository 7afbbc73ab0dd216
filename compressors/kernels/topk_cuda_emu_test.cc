// The CUDA top-k (topk_cuda.cu's multi-pass select and topk_filter_cuda.cu's
// sampled-threshold path, the very sources the GPU builds) run on the CPU by
// cuda_emu, against the CPU TopK: CI has no GPU, and this is where the
// kernels' indexing, their grid-wide phases and the fallback are checked on
// every build. kernels_cuda_test runs the same cases on a device, with the
// GPU's own scheduling.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "compressors/kernels/cuda_emu/cuda_emu.h"
#include "compressors/kernels/topk.h"
#include "compressors/kernels/topk_cuda.h"
#include "compressors/kernels/topk_filter_cuda.h"
#include "gtest/gtest.h"

namespace terse {
namespace kernels {
namespace {

// Shapes as kernels_cuda_test's: 0 normal, 1 five values (ties), 2 any bit
// pattern (NaNs included), 3 a quiet half then a loud one, 4 ascending
// magnitudes of alternating sign, 5 all zeros, 6 sparse (1 in 256).
std::vector<float> Inputs(int64_t d, int shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(d, 0.0f);
  for (int64_t i = 0; i < d; ++i) {
    if (shape == 0) x[i] = normal(rng);
    if (shape == 1) x[i] = static_cast<float>(rng() % 5) - 2.0f;
    if (shape == 2) {
      const uint32_t bits = rng();
      std::memcpy(&x[i], &bits, 4);
    }
    if (shape == 3) x[i] = normal(rng) * (i < d / 2 ? 1e-6f : 1.0f);
    if (shape == 4) x[i] = static_cast<float>(i) * ((i & 1) ? -1.0f : 1.0f);
    if (shape == 6 && rng() % 256 == 0) x[i] = normal(rng);
  }
  return x;
}

template <typename T>
T* DeviceCopy(const std::vector<T>& host) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, host.size() * sizeof(T)), cudaSuccess);
  std::memcpy(p, host.data(), host.size() * sizeof(T));
  return static_cast<T*>(p);
}

struct Outcome {
  std::vector<uint32_t> indices;
  int32_t took_fallback = -1;
};

Outcome RunFilter(const float* dx, int64_t d, int64_t k) {
  Outcome out;
  uint32_t* dout = DeviceCopy(std::vector<uint32_t>(k, 0xdeadbeefu));
  auto* probe = DeviceCopy(std::vector<cuda::FilterTopKProbe>(1));
  probe->took_fallback = -1;
  EXPECT_EQ(cuda::TopKByFilter(dx, d, k, dout, nullptr, nullptr, probe),
            cudaSuccess);
  out.indices.assign(dout, dout + k);
  out.took_fallback = probe->took_fallback;
  return out;
}

// Each input shape runs under one of cuda_emu's thread orders, so that
// every order meets both branches (a missing __syncthreads shows only in an
// order that runs the reader first).
cuda_emu::ThreadOrder OrderFor(int i) {
  constexpr cuda_emu::ThreadOrder kOrders[] = {
      cuda_emu::ThreadOrder::kAscending, cuda_emu::ThreadOrder::kDescending,
      cuda_emu::ThreadOrder::kShuffled};
  return kOrders[i % 3];
}

class TopKCudaEmuTest : public ::testing::Test {
 protected:
  void SetUp() override { cuda_emu::SetDeviceShape({2, 2}); }  // 4 blocks.
  void TearDown() override {
    cuda_emu::SetThreadOrder(cuda_emu::ThreadOrder::kAscending);
  }
};

TEST_F(TopKCudaEmuTest, MatchesCpuOnEveryShape) {
  const int64_t d = (int64_t{1} << 18) + 4101;  // A partial last tile.
  for (int shape = 0; shape < 7; ++shape) {
    const std::vector<float> x = Inputs(d, shape, 11 + shape);
    const float* dx = DeviceCopy(x);
    cuda_emu::SetThreadOrder(OrderFor(shape), shape);
    for (int64_t k : {int64_t{1}, d / 1000, d / 100, d / 32}) {
      ASSERT_TRUE(cuda::FilterTopKApplies(d, k));
      std::vector<uint32_t> cpu(k);
      TopK(x.data(), d, k, cpu.data(), 1);
      const Outcome got = RunFilter(dx, d, k);
      ASSERT_EQ(got.indices, cpu)
          << "shape " << shape << " k " << k << ", threads "
          << cuda_emu::ThreadOrderName(OrderFor(shape));
      // The one-pass branch where the sample guides it; the select over x
      // where it cannot (ties, zeros, fewer nonzeros than k).
      if (shape == 0 || shape == 4) {
        EXPECT_EQ(got.took_fallback, 0) << k;
      }
      if (shape == 1 || shape == 5) {
        EXPECT_EQ(got.took_fallback, 1) << k;
      }
      if (shape == 6 && k == d / 100) {
        EXPECT_EQ(got.took_fallback, 1);
      }
    }
  }
}

// Other grids: one block (every barrier a block's own), and three blocks
// for a tile count they do not divide; an input not 16-byte aligned.
TEST_F(TopKCudaEmuTest, MatchesCpuOnOtherGridsAndOffsets) {
  const int64_t d = (int64_t{1} << 18) + 1;
  const std::vector<float> all = Inputs(d + 3, 0, 5);
  const float* dall = DeviceCopy(all);
  int run = 0;
  for (cuda_emu::DeviceShape shape :
       {cuda_emu::DeviceShape{1, 1}, cuda_emu::DeviceShape{3, 1}}) {
    cuda_emu::SetDeviceShape(shape);
    for (int64_t offset : {int64_t{0}, int64_t{3}}) {
      const int64_t k = d / 100;
      std::vector<uint32_t> cpu(k);
      TopK(all.data() + offset, d, k, cpu.data(), 1);
      cuda_emu::SetThreadOrder(OrderFor(run), run);
      const Outcome got = RunFilter(dall + offset, d, k);
      ASSERT_EQ(got.indices, cpu)
          << shape.sms << " SMs, offset " << offset << ", threads "
          << cuda_emu::ThreadOrderName(OrderFor(run));
      EXPECT_EQ(got.took_fallback, 0);
      ++run;
    }
  }
}

// The public entry point: the multi-pass select below the filter path's
// sizes (and for k > d / 32), at float offsets that leave x unaligned for
// its float4 loads; the filter path above.
TEST_F(TopKCudaEmuTest, PublicTopKMatchesCpu) {
  const int64_t most = (int64_t{1} << 18) + 3;
  for (int shape : {0, 1, 2}) {
    const std::vector<float> all = Inputs(most + 3, shape, 21 + shape);
    const float* dall = DeviceCopy(all);
    cuda_emu::SetThreadOrder(OrderFor(shape), shape);
    for (int64_t d :
         {int64_t{1}, int64_t{1000}, int64_t{8192 * 3 + 17}, most}) {
      for (int64_t offset : {int64_t{0}, int64_t{1}}) {
        for (int64_t k : {int64_t{0}, int64_t{1}, d / 100, d / 2, d}) {
          std::vector<uint32_t> cpu(k);
          TopK(all.data() + offset, d, k, cpu.data(), 1);
          uint32_t* dout =
              DeviceCopy(std::vector<uint32_t>(std::max<int64_t>(k, 1)));
          ASSERT_EQ(cuda::TopK(dall + offset, d, k, dout, nullptr), 0);
          ASSERT_EQ(std::vector<uint32_t>(dout, dout + k), cpu)
              << "shape " << shape << " d " << d << " offset " << offset
              << " k " << k << ", threads "
              << cuda_emu::ThreadOrderName(OrderFor(shape));
        }
      }
    }
  }
}

TEST_F(TopKCudaEmuTest, RefusesWhatItDoesNotTake) {
  EXPECT_FALSE(cuda::FilterTopKApplies((int64_t{1} << 18) - 1, 10));
  EXPECT_FALSE(cuda::FilterTopKApplies(int64_t{1} << 20, 0));
  EXPECT_FALSE(
      cuda::FilterTopKApplies(int64_t{1} << 20, (int64_t{1} << 20) / 32 + 1));
  EXPECT_EQ(
      cuda::TopKByFilter(nullptr, 100, 1, nullptr, nullptr, nullptr, nullptr),
      cudaErrorNotSupported);
}

}  // namespace
}  // namespace kernels
}  // namespace terse
