// The conformance suite (conformance.h) against the loopback backend.
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "collectives/conformance.h"
#include "collectives/conformance_alltoall.h"
#include "collectives/loopback/loopback.h"
#include "common/half.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

class ConformanceLoopbackTest : public ::testing::TestWithParam<int> {};

TEST_P(ConformanceLoopbackTest, EveryOperationConforms) {
  const int ranks = GetParam();
  std::vector<std::vector<std::string>> failures(ranks);
  absl::Status s = RunLoopbackRanks(ranks, [&](int rank, Communicator* comm) {
    ConformanceOptions options;  // Loopback rounds f16/bf16 once.
    failures[rank] = RunConformance(*comm, options);
    return absl::OkStatus();
  });
  ASSERT_TRUE(s.ok()) << s;
  for (int r = 0; r < ranks; ++r) {
    EXPECT_TRUE(failures[r].empty()) << absl::StrJoin(failures[r], "\n");
  }
}

TEST_P(ConformanceLoopbackTest, AlltoallvAndReduceScatterConform) {
  const int ranks = GetParam();
  std::vector<std::vector<std::string>> failures(ranks);
  absl::Status s = RunLoopbackRanks(ranks, [&](int rank, Communicator* comm) {
    failures[rank] = RunAlltoallConformance(*comm);
    return absl::OkStatus();
  });
  ASSERT_TRUE(s.ok()) << s;
  for (int r = 0; r < ranks; ++r) {
    EXPECT_TRUE(failures[r].empty()) << absl::StrJoin(failures[r], "\n");
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, ConformanceLoopbackTest,
                         ::testing::Values(2, 3, 4));

// A loopback rank with planted bugs, to show the suite catches them.
class BuggyCommunicator : public Communicator {
 public:
  explicit BuggyCommunicator(Communicator* target) : target_(target) {}
  int rank() const override { return target_->rank(); }
  int size() const override { return target_->size(); }
  int local_rank() const override { return target_->local_rank(); }
  int local_size() const override { return target_->local_size(); }
  absl::string_view backend() const override { return "buggy"; }
  absl::Status Allreduce(void* buffer, int64_t count, DataType dtype,
                         ReduceOp op) override {
    if (op == ReduceOp::kAverage && dtype == DataType::kInt32) {
      return absl::OkStatus();  // Bug: accepts average on integers.
    }
    absl::Status s = target_->Allreduce(buffer, count, dtype, op);
    if (!s.ok() || count < 1000 || op != ReduceOp::kSum) return s;
    if (dtype == DataType::kFloat32) {
      static_cast<float*>(buffer)[count - 1] += 0.125f;  // Bug: off by 1/8.
    } else if (dtype == DataType::kFloat16) {
      uint16_t* h = static_cast<uint16_t*>(buffer);
      h[5] = static_cast<uint16_t>(h[5] + 2);  // Bug: two ulps off.
    }
    return s;
  }
  absl::Status Allgather(const void* send, void* recv,
                         int64_t bytes_per_rank) override {
    return target_->Allgather(send, recv, bytes_per_rank);
  }
  absl::Status Allgatherv(const void* send, void* recv,
                          const std::vector<int64_t>& recv_bytes) override {
    absl::Status s = target_->Allgatherv(send, recv, recv_bytes);
    int64_t total = 0;
    for (int64_t b : recv_bytes) total += b;
    if (s.ok() && total > 100) static_cast<uint8_t*>(recv)[total - 1] ^= 1;
    return s;
  }
  absl::Status Broadcast(void* buffer, int64_t bytes, int root) override {
    return target_->Broadcast(buffer, bytes, root);
  }
  absl::Status Barrier() override { return target_->Barrier(); }
  absl::Status BitwiseAnd(uint64_t* words, int64_t count) override {
    return target_->BitwiseOr(words, count);  // Bug: OR instead of AND.
  }
  absl::Status BitwiseOr(uint64_t* words, int64_t count) override {
    return target_->BitwiseOr(words, count);
  }

 private:
  Communicator* target_;
};

TEST(ConformanceSuiteTest, ReportsPlantedBugs) {
  std::vector<std::vector<std::string>> failures(2);
  absl::Status s = RunLoopbackRanks(2, [&](int rank, Communicator* comm) {
    BuggyCommunicator buggy(comm);
    ConformanceOptions options;
    options.sizes = {7, 1000};
    failures[rank] = RunConformance(buggy, options);
    return absl::OkStatus();
  });
  ASSERT_TRUE(s.ok()) << s;
  using ::testing::Contains;
  using ::testing::HasSubstr;
  for (const auto& f : failures) {
    EXPECT_THAT(f, Contains(HasSubstr("allreduce f32 sum count=1000: element "
                                      "999")));
    EXPECT_THAT(f, Contains(HasSubstr("allreduce f16 sum count=1000: element "
                                      "5")));
    EXPECT_THAT(f, Contains(HasSubstr("allgatherv uneven base=1000")));
    EXPECT_THAT(f, Contains(HasSubstr("bitwise_and words=7")));
    EXPECT_THAT(f, Contains(HasSubstr("average on i32: want InvalidArgument")));
    EXPECT_THAT(f, ::testing::Not(Contains(HasSubstr("count=7:"))));
  }
}

}  // namespace
}  // namespace terse
