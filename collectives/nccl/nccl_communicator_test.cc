// NcclCommunicator on any machine: argument checks and the no-device path.
// The operations themselves run in nccl_communicator_gpu_test.
#include "collectives/nccl/nccl_communicator.h"

#include <vector>

#include "collectives/loopback/loopback.h"
#include "common/cuda_probe.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

using ::testing::HasSubstr;

TEST(NcclCommunicatorTest, NullControlIsInvalidArgument) {
  auto comm = NcclCommunicator::Create(nullptr, 0);
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(NcclCommunicatorTest, WithoutADeviceEveryRankFailsCleanly) {
  if (ProbeCuda().device_count > 0) GTEST_SKIP() << "a CUDA device answers";
  std::vector<absl::Status> results(3);
  absl::Status s = RunLoopbackRanks(3, [&](int rank, Communicator* control) {
    results[rank] = NcclCommunicator::Create(control, 0).status();
    // The control plane is still in step afterwards.
    return control->Barrier();
  });
  ASSERT_TRUE(s.ok()) << s;
  for (const absl::Status& r : results) {
    EXPECT_EQ(r.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(r.message(), HasSubstr("no CUDA device"));
  }
}

TEST(NcclCommunicatorTest, OneRankWithoutItsDeviceFailsEveryRank) {
  int devices = ProbeCuda().device_count;
  std::vector<absl::Status> results(2);
  absl::Status s = RunLoopbackRanks(2, [&](int rank, Communicator* control) {
    // Rank 1 names a device that does not exist.
    results[rank] =
        NcclCommunicator::Create(control, rank == 1 ? devices + 5 : 0).status();
    return absl::OkStatus();
  });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(results[0].code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(results[1].code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(results[1].message(), HasSubstr("rank 1"));
  if (devices > 0) {
    EXPECT_THAT(results[0].message(), HasSubstr("another rank"));
  }
}

}  // namespace
}  // namespace terse
