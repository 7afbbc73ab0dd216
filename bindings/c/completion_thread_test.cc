#include "bindings/c/completion_thread.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

TEST(CompletionThreadTest, RunsTasksInPostOrderOnItsOwnThread) {
  std::vector<int> order;  // Touched only by the completion thread.
  std::atomic<int> off_thread{0};
  {
    CompletionThread completions;
    EXPECT_FALSE(completions.IsCurrentThread());
    for (int i = 0; i < 100; ++i) {
      completions.Post([&, i] {
        if (completions.IsCurrentThread()) off_thread.fetch_add(1);
        order.push_back(i);
      });
    }
    completions.Stop();  // Drains before joining.
  }
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
  EXPECT_EQ(off_thread.load(), 100);
}

TEST(CompletionThreadTest, PostsFromManyThreadsAllRun) {
  std::atomic<int> ran{0};
  CompletionThread completions;
  std::vector<std::thread> posters;
  for (int t = 0; t < 4; ++t) {
    posters.emplace_back([&] {
      for (int i = 0; i < 250; ++i) completions.Post([&] { ran.fetch_add(1); });
    });
  }
  for (std::thread& t : posters) t.join();
  completions.Stop();
  EXPECT_EQ(ran.load(), 1000);
}

TEST(CompletionThreadTest, TaskMayPostAnotherTask) {
  CompletionThread completions;
  absl::Notification second;
  completions.Post([&] { completions.Post([&] { second.Notify(); }); });
  second.WaitForNotification();
  completions.Stop();
}

TEST(CompletionThreadTest, PostAfterStopRunsOnThePostingThread) {
  CompletionThread completions;
  completions.Stop();
  completions.Stop();  // Idempotent.
  bool ran_here = false;
  const std::thread::id me = std::this_thread::get_id();
  completions.Post([&] { ran_here = std::this_thread::get_id() == me; });
  EXPECT_TRUE(ran_here);
}

TEST(CompletionThreadTest, TasksPostedDuringStopStillRun) {
  std::atomic<int> ran{0};
  {
    CompletionThread completions;
    completions.Post([&] {
      // Posted while Stop() is draining: runs on the thread or inline.
      for (int i = 0; i < 10; ++i) completions.Post([&] { ran.fetch_add(1); });
    });
    completions.Stop();
  }
  EXPECT_EQ(ran.load(), 10);
}

}  // namespace
}  // namespace terse
