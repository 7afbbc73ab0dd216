#include "collectives/mpi/call_signature.h"

#include <vector>

#include "gtest/gtest.h"

namespace terse {
namespace {

std::vector<int64_t> Gathered(const std::vector<CallSignature>& per_rank) {
  std::vector<int64_t> all;
  for (const CallSignature& s : per_rank)
    all.insert(all.end(), s.begin(), s.end());
  return all;
}

TEST(CallSignatureTest, EqualCallsPass) {
  const CallSignature s = {kCallAllreduce, 8, 0, 0, -1, 0};
  EXPECT_TRUE(CompareSignatures(Gathered({s, s, s}), 3, 1).ok());
  EXPECT_TRUE(CompareSignatures(Gathered({s}), 1, 0).ok());
}

// The first rank that differs from rank 0 is named, with both calls and the
// rank that saw it.
TEST(CallSignatureTest, MismatchNamesBothCallsAndTheRank) {
  const CallSignature allreduce = {kCallAllreduce, 8, 0, 0, -1, 0};
  const CallSignature broadcast = {kCallBroadcast, 32, -1, -1, 1, 0};
  const CallSignature longer = {kCallAllreduce, 9, 0, 0, -1, 0};
  absl::Status s = CompareSignatures(
      Gathered({allreduce, allreduce, broadcast, longer}), 4, 3);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "mpi: mismatched collective calls: rank 0 called "
            "allreduce(count=8, dtype=f32, op=sum), rank 2 called "
            "broadcast(count=32, root=1) (seen on rank 3)");
  s = CompareSignatures(Gathered({allreduce, longer}), 2, 0);
  EXPECT_NE(s.message().find("rank 1 called allreduce(count=9"),
            absl::string_view::npos)
      << s;
}

// Allgatherv's per-rank sizes travel as a hash: different sizes with the
// same total still differ.
TEST(CallSignatureTest, AllgathervSizesAreCompared) {
  const CallSignature a = {kCallAllgatherv, 12, -1, -1, -1, HashSizes({4, 8})};
  const CallSignature b = {kCallAllgatherv, 12, -1, -1, -1, HashSizes({8, 4})};
  EXPECT_NE(HashSizes({4, 8}), HashSizes({8, 4}));
  absl::Status s = CompareSignatures(Gathered({a, b}), 2, 0);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("allgatherv(total_bytes=12"),
            absl::string_view::npos)
      << s;
  EXPECT_NE(s.message().find("recv_bytes hash="), absl::string_view::npos);
}

TEST(CallSignatureTest, WrongLengthIsAnError) {
  EXPECT_EQ(CompareSignatures(std::vector<int64_t>(7), 1, 0).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CompareSignatures({}, 0, 0).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace terse
