#include "engine/handle_table.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace terse {
namespace {

TEST(HandleTableTest, PollWaitRelease) {
  HandleTable t;
  const Handle h = t.Allocate(false);
  EXPECT_FALSE(*t.Poll(h));
  t.Complete(h, absl::DataLossError("x"));
  t.Complete(h, absl::OkStatus());  // The first completion wins.
  EXPECT_TRUE(*t.Poll(h));
  EXPECT_EQ(t.Wait(h).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(t.Poll(h).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(t.size(), 0);
}

TEST(HandleTableTest, AllgatherResultIsTakenOnce) {
  HandleTable t;
  const Handle h = t.Allocate(true);
  EXPECT_EQ(t.TakeAllgatherResult(h).status().code(),
            absl::StatusCode::kFailedPrecondition);
  AllgatherResult r;
  r.data = {1, 2, 3};
  t.Complete(h, absl::OkStatus(), r);
  EXPECT_TRUE(t.Wait(h).ok());
  auto taken = t.TakeAllgatherResult(h);
  ASSERT_TRUE(taken.ok());
  EXPECT_EQ(taken->data.size(), 3u);
  EXPECT_EQ(t.TakeAllgatherResult(h).status().code(),
            absl::StatusCode::kNotFound);
  const Handle plain = t.Allocate(false);
  EXPECT_EQ(t.TakeAllgatherResult(plain).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(HandleTableTest, WaitersOnSeveralThreadsAllWakeUp) {
  HandleTable t;
  const Handle h = t.Allocate(false);
  std::vector<std::thread> waiters;
  std::vector<absl::Status> seen(4);
  for (int i = 0; i < 4; ++i) {
    waiters.emplace_back([&, i] { seen[i] = t.Wait(h); });
  }
  t.Complete(h, absl::OkStatus());
  for (auto& w : waiters) w.join();
  // One waiter released it; the others saw OK or (if they arrived after the
  // release) NotFound, never a hang or a crash.
  int ok = 0;
  for (const auto& s : seen) {
    EXPECT_TRUE(s.ok() || s.code() == absl::StatusCode::kNotFound) << s;
    ok += s.ok();
  }
  EXPECT_GE(ok, 1);
}

}  // namespace
}  // namespace terse
