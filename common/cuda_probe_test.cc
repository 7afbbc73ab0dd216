#include "common/cuda_probe.h"

#include <vector>

#include "gtest/gtest.h"

namespace terse {
namespace {

// Runs everywhere: the CUDA runtime and NCCL are linked and answer, with a
// device or without.
TEST(CudaProbeTest, RuntimeAndNcclAnswer) {
  CudaInfo info = ProbeCuda();
  EXPECT_GE(info.device_count, 0);
  if (info.device_count == 0) {
    EXPECT_FALSE(info.why_none.empty());
  }
  EXPECT_GE(info.nccl_version, 20000) << "NCCL 2.x is linked";
  std::printf("CUDA devices: %d (%s), NCCL %d\n", info.device_count,
              info.why_none.c_str(), info.nccl_version);
}

}  // namespace
}  // namespace terse
