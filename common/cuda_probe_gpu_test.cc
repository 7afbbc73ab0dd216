#include <vector>

#include "common/cuda_probe.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

TEST(CudaProbeGpuTest, AxpyKernelRunsOnTheDevice) {
  if (ProbeCuda().device_count == 0) {
    GTEST_SKIP() << "no CUDA device: " << ProbeCuda().why_none;
  }
  const int n = 1000;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) x[i] = i, y[i] = 1;
  ASSERT_TRUE(CudaSmokeAxpy(2.0f, x.data(), y.data(), n).ok());
  for (int i = 0; i < n; ++i) EXPECT_EQ(y[i], 1.0f + 2.0f * i);
}

}  // namespace
}  // namespace terse
