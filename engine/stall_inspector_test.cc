#include "engine/stall_inspector.h"

#include <chrono>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

Coordinator::PendingOp Op(const std::string& name, std::vector<int> ranks,
                          Clock::time_point since) {
  return Coordinator::PendingOp{name, std::move(ranks), since};
}

TEST(StallInspectorTest, WarnsOncePerPeriodNamingMissingRanks) {
  StallInspector inspector(4, 10, 0);
  const auto t0 = Clock::now();
  std::vector<Coordinator::PendingOp> pending = {
      Op("w", {0, 2}, t0), Op("fresh", {1}, t0 + std::chrono::seconds(9))};
  EXPECT_EQ(
      inspector.Inspect(pending, {}, t0 + std::chrono::seconds(5)).warning, "");
  auto v = inspector.Inspect(pending, {3}, t0 + std::chrono::seconds(11));
  EXPECT_THAT(v.warning, HasSubstr("tensor 'w' submitted by ranks 0,2 but not "
                                   "by rank 1 (waiting 11.0 s)"));
  EXPECT_THAT(v.warning, Not(HasSubstr("fresh")));
  EXPECT_TRUE(v.shutdown.ok());
  EXPECT_EQ(
      inspector.Inspect(pending, {3}, t0 + std::chrono::seconds(12)).warning,
      "");  // Throttled.
  EXPECT_THAT(
      inspector.Inspect(pending, {}, t0 + std::chrono::seconds(22)).warning,
      HasSubstr("but not by ranks 1,3"));
}

TEST(StallInspectorTest, ShutdownAfterItsOwnThreshold) {
  StallInspector inspector(2, 1, 3);
  const auto t0 = Clock::now();
  std::vector<Coordinator::PendingOp> pending = {
      Op("__terse.barrier.4", {1}, t0)};
  EXPECT_TRUE(inspector.Inspect(pending, {}, t0 + std::chrono::seconds(2))
                  .shutdown.ok());
  auto v = inspector.Inspect(pending, {}, t0 + std::chrono::seconds(4));
  EXPECT_EQ(v.shutdown.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(v.shutdown.message()),
              HasSubstr("barrier submitted by rank 1 but not by rank 0"));
}

}  // namespace
}  // namespace terse
