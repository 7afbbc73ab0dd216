// Runs on every machine: the option checks, and without a device a clean
// FailedPrecondition instead of a crash.
#include "efcp/dense_mfac_cuda.h"

#include "common/cuda_probe.h"
#include "gtest/gtest.h"

namespace terse {
namespace efcp {
namespace {

TEST(CudaDenseMfacTest, RejectsBadOptions) {
  DenseMfacOptions options;
  options.dim = 0;
  EXPECT_EQ(CudaDenseMfac::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.dim = 10;
  options.window = 0;
  EXPECT_EQ(CudaDenseMfac::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.window = 2;
  options.damp = -1;
  EXPECT_EQ(CudaDenseMfac::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CudaDenseMfacTest, CreateNeedsADevice) {
  DenseMfacOptions options;
  options.dim = 10;
  options.window = 2;
  absl::StatusOr<std::unique_ptr<CudaDenseMfac>> mfac =
      CudaDenseMfac::Create(options);
  if (ProbeCuda().device_count == 0) {
    EXPECT_EQ(mfac.status().code(), absl::StatusCode::kFailedPrecondition)
        << mfac.status();
  } else {
    EXPECT_TRUE(mfac.ok()) << mfac.status();
  }
  EXPECT_EQ(CudaDenseMfac::Create(options, /*device=*/99).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace efcp
}  // namespace terse
