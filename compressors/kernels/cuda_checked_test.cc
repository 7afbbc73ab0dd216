// Runs everywhere: host pointers never reach a CUDA launch. Without a
// device the check itself fails (FailedPrecondition); with one it is
// InvalidArgument (cuda_checked_gpu_test covers that and the launches).
#include <vector>

#include "common/cuda_probe.h"
#include "compressors/kernels/cuda_checked.h"
#include "gtest/gtest.h"

namespace terse {
namespace kernels {
namespace {

TEST(CudaCheckedTest, HostPointersAreRefusedWithAStatus) {
  std::vector<float> x(100, 1.0f);
  std::vector<uint32_t> idx(10);
  absl::Status s = cuda_checked::TopK(x.data(), 100, 10, idx.data(), nullptr);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cuda TopK: x"), absl::string_view::npos) << s;
  std::vector<float> values(10);
  s = cuda_checked::Gather(x.data(), idx.data(), 10, values.data(), nullptr);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cuda Gather"), absl::string_view::npos) << s;
  // Bad sizes are refused before anything runs (k > d), empty spans pass
  // the pointer check.
  s = cuda_checked::RandomKIndices(1, 5, 10, nullptr, nullptr);
  EXPECT_FALSE(s.ok());
  if (ProbeCuda().device_count == 0) {
    EXPECT_EQ(cuda_checked::TopK(x.data(), 100, 10, idx.data(), nullptr)
                  .code(),
              absl::StatusCode::kFailedPrecondition);
  }
}

}  // namespace
}  // namespace kernels
}  // namespace terse
