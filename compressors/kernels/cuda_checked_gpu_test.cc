// The checked CUDA entry points on a device (tag gpu): a host pointer is
// InvalidArgument and leaves the context usable; device pointers give the
// CPU TopK's indices. Skipped without a device.
#include <cuda_runtime.h>

#include <vector>

#include "common/cuda_probe.h"
#include "compressors/kernels/cuda_checked.h"
#include "compressors/kernels/topk.h"
#include "gtest/gtest.h"

namespace terse {
namespace kernels {
namespace {

TEST(CudaCheckedGpuTest, HostPointerIsInvalidArgumentThenTopKStillWorks) {
  if (ProbeCuda().device_count == 0) {
    GTEST_SKIP() << "no CUDA device: " << ProbeCuda().why_none;
  }
  const int64_t d = 10000, k = 100;
  std::vector<float> x(d);
  for (int64_t i = 0; i < d; ++i) x[i] = static_cast<float>((i * 7919) % 1013) - 500.0f;
  std::vector<uint32_t> host_idx(k);
  absl::Status bad =
      cuda_checked::TopK(x.data(), d, k, host_idx.data(), nullptr);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument) << bad;

  float* dx = nullptr;
  uint32_t* didx = nullptr;
  ASSERT_EQ(cudaMalloc(&dx, d * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&didx, k * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dx, x.data(), d * 4, cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_TRUE(cuda_checked::TopK(dx, d, k, didx, nullptr).ok());
  std::vector<uint32_t> got(k), want(k);
  ASSERT_EQ(cudaMemcpy(got.data(), didx, k * 4, cudaMemcpyDeviceToHost),
            cudaSuccess);
  TopK(x.data(), d, k, want.data());
  EXPECT_EQ(got, want);
  cudaFree(dx);
  cudaFree(didx);
}

}  // namespace
}  // namespace kernels
}  // namespace terse
