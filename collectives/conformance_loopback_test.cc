// The conformance suite (conformance.h) against the loopback backend.
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "collectives/conformance.h"
#include "collectives/loopback/loopback.h"
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

INSTANTIATE_TEST_SUITE_P(Ranks, ConformanceLoopbackTest,
                         ::testing::Values(2, 3, 4));

}  // namespace
}  // namespace terse
