// DeviceCompression on a CUDA device (tag gpu): fp16, bf16, topk, dgc,
// threshold (RedSync's CUDA threshold search may pick another set in rare
// cases: not compared here), powersgd, randomk, efsignsgd and qsgd on
// device buffers against the CompressedReducer (the CPU path), 1 rank and
// 2 ranks (threads) sharing GPU 0 with host-staged collectives. Bitwise
// equality is expected (distinct indices per ScatterAdd launch, IEEE casts,
// the CPU's selection and sign-scale order) except for PowerSGD, whose
// products sum in another order (within 1e-3 of the largest value); the
// squared norm differs only inside the statistics trailer, which does not
// touch the results. Skipped, never passed, without
// a device.
#include <string>

#include "common/cuda_probe.h"
#include "device/cuda_runtime.h"
#include "engine/device_compression_testing.h"
#include "gtest/gtest.h"

namespace terse {
namespace testing {
namespace {

class DeviceCompressionCudaTest : public ::testing::TestWithParam<std::string> {
};

TEST_P(DeviceCompressionCudaTest, EqualsTheCpuPathBitForBit) {
  if (ProbeCuda().device_count == 0) {
    GTEST_SKIP() << "skipped: no device (no CUDA device: "
                 << ProbeCuda().why_none << ")";
  }
  CudaRuntime cuda;
  const std::string compression = GetParam();
  for (int size : {1, 2}) {
    Outcome run;
    absl::Status st = RunDeviceAndCpu(size, compression, "50", 3, &run, &cuda,
                                      [](int) { return 0; });
    ASSERT_TRUE(st.ok()) << st;
    // PowerSGD's CUDA products sum in another order than Eigen (and
    // contract to FMA): close, not bitwise. Everything else is bitwise.
    st = compression == "powersgd"
             ? ExpectClose(run, compression + " on cuda:0", 1e-3)
             : ExpectBitwiseEqual(run, compression + " on cuda:0");
    EXPECT_TRUE(st.ok()) << st;
  }
}

INSTANTIATE_TEST_SUITE_P(Compressors, DeviceCompressionCudaTest,
                         ::testing::Values("fp16", "bf16", "topk", "dgc",
                                           "threshold", "powersgd", "randomk",
                                           "efsignsgd", "qsgd"),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           return i.param;
                         });

}  // namespace
}  // namespace testing
}  // namespace terse
