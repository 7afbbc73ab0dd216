#include "collectives/loopback/loopback.h"

#include <atomic>
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/status.h"

namespace terse {
namespace {

using ::testing::HasSubstr;

// The full op x dtype x size conformance suite runs against every backend in
// collectives/communicator_conformance_test; these cover loopback's own
// mechanics: rendezvous reuse, mismatch detection, abort.

TEST(LoopbackTest, ManyConsecutiveInPlaceAllreducesStayConsistent) {
  absl::Status s = RunLoopbackRanks(3, [](int rank, Communicator* comm) {
    for (int step = 0; step < 200; ++step) {
      std::vector<double> v(5, rank + step);
      absl::Status st = comm->Allreduce(v.data(), 5, DataType::kFloat64,
                                        ReduceOp::kSum);
      if (!st.ok()) return st;
      double expected = 3.0 * step + 3.0;  // (0+1+2) + 3*step
      for (double x : v) {
        if (x != expected) return absl::InternalError("wrong sum");
      }
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
}

TEST(LoopbackTest, MismatchedCallsFailOnEveryRankNamingThem) {
  std::vector<absl::Status> results(2);
  RunLoopbackRanks(2, [&](int rank, Communicator* comm) {
    std::vector<float> v(rank == 0 ? 4 : 5, 1.0f);
    results[rank] = comm->Allreduce(v.data(), v.size(), DataType::kFloat32,
                                    ReduceOp::kSum);
    return absl::OkStatus();
  }).IgnoreError();
  for (const absl::Status& s : results) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("rank 0 called allreduce(count=4"));
    EXPECT_THAT(s.message(), HasSubstr("rank 1 called allreduce(count=5"));
  }
}

TEST(LoopbackTest, AdasumFollowsTheRecursiveDoublingTree) {
  // Rank r holds e_r * (r + 1) (orthogonal): every pairwise step adds, so
  // the result is (1, 2, 3, 4) on every rank. Then all equal: themselves.
  absl::Status s = RunLoopbackRanks(4, [](int rank, Communicator* comm) {
    std::vector<double> v(4, 0.0);
    v[rank] = rank + 1.0;
    TERSE_RETURN_IF_ERROR(
        comm->Allreduce(v.data(), 4, DataType::kFloat64, ReduceOp::kAdasum));
    if (v != std::vector<double>{1.0, 2.0, 3.0, 4.0}) {
      return absl::InternalError("orthogonal adasum is not the sum");
    }
    std::vector<float> same = {1.5f, -2.0f};
    TERSE_RETURN_IF_ERROR(
        comm->Allreduce(same.data(), 2, DataType::kFloat32, ReduceOp::kAdasum));
    if (same != std::vector<float>{1.5f, -2.0f}) {
      return absl::InternalError("adasum of equal vectors changed them");
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
  absl::Status three = RunLoopbackRanks(3, [](int, Communicator* comm) {
    double x = 1.0;
    return comm->Allreduce(&x, 1, DataType::kFloat64, ReduceOp::kAdasum);
  });
  EXPECT_THAT(three.message(), HasSubstr("power-of-two"));
}

TEST(LoopbackTest, AFailingRankReleasesTheOthers) {
  absl::Status s = RunLoopbackRanks(3, [](int rank, Communicator* comm) {
    if (rank == 1) return absl::InternalError("rank 1 gave up");
    return comm->Barrier();
  });
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("rank 1"));
}

// The error returned is the cause (rank 1's), not rank 0's Aborted from the
// group's abort, though rank 0 comes first in rank order.
TEST(LoopbackTest, TheCauseIsReturnedNotTheAbortItLeftOnLowerRanks) {
  absl::Status s = RunLoopbackRanks(3, [](int rank, Communicator* comm) {
    if (rank == 1) return absl::InvalidArgumentError("rank 1's own error");
    return comm->Barrier();
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(s.message(), "rank 1's own error");
}

TEST(LoopbackTest, BadArgumentsAreErrorsNotCrashes) {
  LoopbackGroup group(1);
  Communicator* comm = group.communicator(0);
  EXPECT_EQ(comm->Allreduce(nullptr, 3, DataType::kFloat32, ReduceOp::kSum).code(),
            absl::StatusCode::kInvalidArgument);
  int32_t x = 1;
  EXPECT_THAT(comm->Allreduce(&x, 1, DataType::kInt32, ReduceOp::kAverage).message(),
              HasSubstr("average is not defined for integer type i32"));
  EXPECT_EQ(comm->Broadcast(&x, 4, 3).code(), absl::StatusCode::kInvalidArgument);
}

// Sub-groups (process sets): {0,1} and {2,3} of 4 ranks reduce at the same
// time on their own rendezvous; a non-member gets null; sub-groups of a
// sub-group work too.
TEST(LoopbackTest, SubgroupsReduceAmongTheirMembersOnly) {
  absl::Status s = RunLoopbackRanks(4, [](int rank, Communicator* comm) {
    const std::vector<int> mine =
        rank < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
    std::unique_ptr<Communicator> lower;
    std::unique_ptr<Communicator> upper;
    TERSE_ASSIGN_OR_RETURN(lower, comm->CreateSubgroup({0, 1}));
    TERSE_ASSIGN_OR_RETURN(upper, comm->CreateSubgroup({2, 3}));
    Communicator* sub = rank < 2 ? lower.get() : upper.get();
    Communicator* other = rank < 2 ? upper.get() : lower.get();
    if (sub == nullptr || other != nullptr) {
      return absl::InternalError("membership");
    }
    if (sub->size() != 2 || sub->rank() != rank % 2) {
      return absl::InternalError("sub-group rank/size");
    }
    for (int step = 0; step < 50; ++step) {
      double v = rank + step;
      TERSE_RETURN_IF_ERROR(
          sub->Allreduce(&v, 1, DataType::kFloat64, ReduceOp::kSum));
      if (v != mine[0] + mine[1] + 2.0 * step) {
        return absl::InternalError("sub-group sum");
      }
    }
    // {0} of the sub-group: collective over the sub-group's 2 ranks.
    TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> single,
                           sub->CreateSubgroup({0}));
    if ((single != nullptr) != (sub->rank() == 0)) {
      return absl::InternalError("nested membership");
    }
    return comm->Barrier();
  });
  EXPECT_TRUE(s.ok()) << s;
}

TEST(LoopbackTest, BadSubgroupRanksAreRefusedLocally) {
  LoopbackGroup group(2);
  Communicator* comm = group.communicator(0);
  for (const std::vector<int>& ranks :
       {std::vector<int>{}, std::vector<int>{1, 0}, std::vector<int>{0, 0},
        std::vector<int>{2}}) {
    absl::StatusOr<std::unique_ptr<Communicator>> sub =
        comm->CreateSubgroup(ranks);
    EXPECT_EQ(sub.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(LoopbackTest, SubgroupsOfDifferentRanksFailOnEveryRank) {
  std::vector<absl::Status> results(2);
  RunLoopbackRanks(2, [&](int rank, Communicator* comm) {
    results[rank] =
        comm->CreateSubgroup(rank == 0 ? std::vector<int>{0}
                                       : std::vector<int>{1})
            .status();
    return absl::OkStatus();
  }).IgnoreError();
  for (const absl::Status& r : results) {
    EXPECT_EQ(r.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.message()), HasSubstr("subgroup"));
  }
}

}  // namespace
}  // namespace terse
