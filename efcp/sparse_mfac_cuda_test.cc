// Runs on every machine: the option checks, and without a device a clean
// FailedPrecondition instead of a crash.
#include "efcp/sparse_mfac_cuda.h"

#include "common/cuda_probe.h"
#include "gtest/gtest.h"

namespace terse {
namespace efcp {
namespace {

TEST(CudaSparseMfacTest, RejectsBadOptionsBeforeTouchingTheDevice) {
  SparseMfacOptions options;
  options.dim = 0;
  EXPECT_EQ(CudaSparseMfac::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.dim = 100;
  options.density = 1.5;
  EXPECT_EQ(CudaSparseMfac::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.density = 0.1;
  options.damp = 0;
  EXPECT_EQ(CudaSparseMfac::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CudaSparseMfacTest, CreateNeedsADevice) {
  SparseMfacOptions options;
  options.dim = 100;
  options.window = 4;
  options.density = 0.1;
  absl::StatusOr<std::unique_ptr<CudaSparseMfac>> mfac =
      CudaSparseMfac::Create(options, /*device=*/0);
  if (ProbeCuda().device_count == 0) {
    EXPECT_EQ(mfac.status().code(), absl::StatusCode::kFailedPrecondition)
        << mfac.status();
  } else {
    EXPECT_TRUE(mfac.ok()) << mfac.status();
  }
  EXPECT_EQ(CudaSparseMfac::Create(options, /*device=*/-1).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace efcp
}  // namespace terse
