#include "engine/tensor_queue.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace terse {
namespace {

TensorEntry Entry(const std::string& name) {
  TensorEntry e;
  e.name = name;
  return e;
}

TEST(TensorQueueTest, NamesAreUniqueWhileInFlight) {
  TensorQueue q;
  TensorEntry a = Entry("a");
  ASSERT_TRUE(q.Push(a).ok());
  TensorEntry again = Entry("a");
  EXPECT_EQ(q.Push(again).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(again.name, "a");  // Left untouched on error.
  std::vector<TensorEntry> drained;
  q.Drain(&drained);
  ASSERT_EQ(drained.size(), 1u);
  TensorEntry still = Entry("a");
  EXPECT_FALSE(q.Push(still).ok());  // Drained but not released.
  q.Release(0, "a");
  EXPECT_TRUE(q.Push(still).ok());
}

TEST(TensorQueueTest, PushAllQueuesAGroupWholeOrNotAtAll) {
  TensorQueue q;
  TensorEntry busy = Entry("busy");
  ASSERT_TRUE(q.Push(busy).ok());
  // A name in flight, or one given twice: nothing of the group is queued.
  std::vector<TensorEntry> clash = {Entry("g.0"), Entry("busy")};
  EXPECT_EQ(q.PushAll(clash).code(), absl::StatusCode::kInvalidArgument);
  std::vector<TensorEntry> twice = {Entry("g.0"), Entry("g.0")};
  EXPECT_EQ(q.PushAll(twice).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(twice[1].name, "g.0");  // Left untouched on error.
  EXPECT_EQ(q.InFlightNames(), std::vector<std::string>{"busy"});
  std::vector<TensorEntry> group = {Entry("g.0"), Entry("g.1")};
  ASSERT_TRUE(q.PushAll(group).ok());
  std::vector<TensorEntry> drained;
  q.Drain(&drained);
  ASSERT_EQ(drained.size(), 3u);  // In push order, the group together.
  EXPECT_EQ(drained[1].name, "g.0");
  EXPECT_EQ(drained[2].name, "g.1");
  q.Close(absl::CancelledError("closed"));
  std::vector<TensorEntry> late = {Entry("late")};
  EXPECT_EQ(q.PushAll(late).code(), absl::StatusCode::kCancelled);
}

TEST(TensorQueueTest, InFlightNamesAreThosePushedAndNotReleased) {
  TensorQueue q;
  for (const char* name : {"b", "a", "c"}) {
    TensorEntry e = Entry(name);
    ASSERT_TRUE(q.Push(e).ok());
  }
  std::vector<TensorEntry> drained;
  q.Drain(&drained);  // Drained ops are still in flight.
  q.Release(0, "b");
  std::vector<std::string> names = q.InFlightNames();
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"a", "c"}));
}

TEST(TensorQueueTest, NamesArePerProcessSet) {
  TensorQueue q;
  TensorEntry global = Entry("w");
  ASSERT_TRUE(q.Push(global).ok());
  TensorEntry on_set = Entry("w");
  on_set.process_set = 2;
  ASSERT_TRUE(q.Push(on_set).ok());  // Another set: another name space.
  TensorEntry again = Entry("w");
  again.process_set = 2;
  absl::Status refused = q.Push(again);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("on process set 2"), std::string::npos);
  std::vector<std::string> names = q.InFlightNames();
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"w", "w (process set 2)"}));
  q.Release(2, "w");
  EXPECT_TRUE(q.Push(again).ok());
}

TEST(TensorQueueTest, ClosedQueueRefusesWithTheFirstCause) {
  TensorQueue q;
  q.Close(absl::DeadlineExceededError("stalled"));
  q.Close(absl::AbortedError("later"));
  TensorEntry e = Entry("x");
  absl::Status s = q.Push(e);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(q.closed_status().message(), "stalled");
  EXPECT_FALSE(q.shutdown_requested());
  q.RequestShutdown();
  EXPECT_TRUE(q.shutdown_requested());
}

TEST(TensorQueueTest, WaitForPushWakesOnWorkCloseOrDeadline) {
  TensorQueue q;
  std::vector<TensorEntry> drained;
  // Nothing queued: returns false once the deadline has passed.
  const Clock::time_point deadline =
      Clock::now() + std::chrono::milliseconds(5);
  EXPECT_FALSE(q.WaitForPush(deadline));
  EXPECT_GE(Clock::now(), deadline);
  // A name seen for the first time waits for the tick (its bucket is
  // decided by the cycle it is negotiated in).
  TensorEntry x = Entry("x");
  ASSERT_TRUE(q.Push(x).ok());
  EXPECT_FALSE(q.WaitForPush(Clock::now() + std::chrono::milliseconds(5)));
  q.Drain(&drained);
  q.Release(0, "x");
  // The same name again, from another thread, wakes the idle engine (a far
  // deadline would hang the test, not fail it: the test's timeout catches
  // a lost wake-up).
  std::thread pusher([&] {
    TensorEntry e = Entry("x");
    EXPECT_TRUE(q.Push(e).ok());
  });
  EXPECT_TRUE(q.WaitForPush(Clock::now() + std::chrono::hours(1)));
  pusher.join();
  // Still queued: returns at once.
  EXPECT_TRUE(q.WaitForPush(Clock::now() + std::chrono::hours(1)));
  q.Drain(&drained);
  EXPECT_EQ(drained.size(), 2u);
  // The engine holds "x": another known name waits for the deadline.
  TensorEntry y = Entry("y");
  ASSERT_TRUE(q.Push(y).ok());
  q.Drain(&drained);
  q.Release(0, "y");
  TensorEntry y2 = Entry("y");
  ASSERT_TRUE(q.Push(y2).ok());
  EXPECT_FALSE(q.WaitForPush(Clock::now() + std::chrono::milliseconds(5)));
  // "x" done: the engine holds nothing, the queued "y" wakes it at once.
  q.Release(0, "x");
  EXPECT_TRUE(q.WaitForPush(Clock::now() + std::chrono::hours(1)));
  q.Drain(&drained);
  EXPECT_EQ(drained.size(), 4u);
  // A shutdown request wakes it whatever is queued.
  q.RequestShutdown();
  EXPECT_TRUE(q.WaitForPush(Clock::now() + std::chrono::hours(1)));
}

// While the engine holds an op, the awaited names (the rest of its bucket)
// wake it when the last of them is pushed, from another thread, not at the
// tick; one of them missing waits for the tick; names already queued count;
// Drain forgets the list.
TEST(TensorQueueTest, WaitForPushWakesWhenTheAwaitedNamesArrive) {
  TensorQueue q;
  std::vector<TensorEntry> drained;
  TensorEntry a = Entry("a");
  ASSERT_TRUE(q.Push(a).ok());
  q.Drain(&drained);  // The engine holds "a".
  TensorEntry b = Entry("b");
  ASSERT_TRUE(q.Push(b).ok());  // Queued before the engine awaits it.
  q.Await({{0, "b"}, {0, "c"}, {1, "c"}});
  EXPECT_FALSE(q.WaitForPush(Clock::now() + std::chrono::milliseconds(5)));
  TensorEntry c = Entry("c");
  ASSERT_TRUE(q.Push(c).ok());  // (1, "c") still missing.
  EXPECT_FALSE(q.WaitForPush(Clock::now() + std::chrono::milliseconds(5)));
  std::thread pusher([&] {
    TensorEntry c1 = Entry("c");
    c1.process_set = 1;
    EXPECT_TRUE(q.Push(c1).ok());
  });
  EXPECT_TRUE(q.WaitForPush(Clock::now() + std::chrono::hours(1)));
  pusher.join();
  q.Drain(&drained);
  EXPECT_EQ(drained.size(), 4u);
  // Drained: nothing is awaited, and a known name waits for the tick while
  // the engine holds others.
  q.Release(0, "b");
  TensorEntry b2 = Entry("b");
  ASSERT_TRUE(q.Push(b2).ok());
  EXPECT_FALSE(q.WaitForPush(Clock::now() + std::chrono::milliseconds(5)));
  // Every awaited name already queued: at once. An empty list awaits nothing.
  q.Await({{0, "b"}});
  EXPECT_TRUE(q.WaitForPush(Clock::now() + std::chrono::hours(1)));
  q.Await({});
  EXPECT_FALSE(q.WaitForPush(Clock::now() + std::chrono::milliseconds(5)));
}

}  // namespace
}  // namespace terse
