#include "engine/tensor_queue.h"

#include <algorithm>
#include <string>
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
  q.Release("a");
  EXPECT_TRUE(q.Push(still).ok());
}

TEST(TensorQueueTest, InFlightNamesAreThosePushedAndNotReleased) {
  TensorQueue q;
  for (const char* name : {"b", "a", "c"}) {
    TensorEntry e = Entry(name);
    ASSERT_TRUE(q.Push(e).ok());
  }
  std::vector<TensorEntry> drained;
  q.Drain(&drained);  // Drained ops are still in flight.
  q.Release("b");
  std::vector<std::string> names = q.InFlightNames();
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"a", "c"}));
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

}  // namespace
}  // namespace terse
