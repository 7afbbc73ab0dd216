#include "engine/collective_watchdog.h"

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

bool Has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(CollectiveWatchdogTest, MessageNamesPhaseTensorsAndSilentRanks) {
  // Never started: every peer was last "heard" when it was made.
  auto peers = PeerMonitor::Create(1, 4, 1.0);
  ASSERT_TRUE(peers.ok());
  std::vector<std::string> held = {"fc1.weight", "fc1.bias"};
  CollectiveWatchdog w(
      1, 20, peers->get(), [&] { return held; }, [](const std::string&) {},
      /*poll_seconds=*/3600);
  const Clock::time_point t0 = Clock::now();
  EXPECT_EQ(w.Overdue(t0 + std::chrono::seconds(100)), "");  // Not inside.
  w.Enter("negotiation");
  EXPECT_EQ(w.Overdue(Clock::now() + std::chrono::seconds(10)), "");
  const std::string m = w.Overdue(Clock::now() + std::chrono::seconds(30));
  EXPECT_TRUE(Has(m, "rank 1: negotiation has not completed in 30")) << m;
  EXPECT_TRUE(Has(m, "TERSE_STALL_SHUTDOWN_SECONDS=20")) << m;
  EXPECT_TRUE(Has(m, "holding up 2 tensors: 'fc1.bias', 'fc1.weight'")) << m;
  EXPECT_TRUE(Has(m, "unreachable: rank 0 (not heard for 3")) << m;
  EXPECT_TRUE(Has(m, "rank 2 (not heard")) << m;
  EXPECT_TRUE(Has(m, "rank 3 (not heard")) << m;
  EXPECT_FALSE(Has(m, "rank 1 (not heard")) << m;
  w.Leave();
  EXPECT_EQ(w.Overdue(Clock::now() + std::chrono::seconds(100)), "");
}

TEST(CollectiveWatchdogTest, WarningHalfwayNamesTheSameAndWhenItEnds) {
  auto peers = PeerMonitor::Create(1, 4, 1.0);
  ASSERT_TRUE(peers.ok());
  std::vector<std::string> held = {"fc1.weight", "fc1.bias"};
  CollectiveWatchdog w(
      1, 20, peers->get(), [&] { return held; }, [](const std::string&) {},
      /*poll_seconds=*/3600, [](const std::string&) {});
  w.Enter("negotiation");
  const Clock::time_point t0 = Clock::now();
  EXPECT_EQ(w.Warning(t0 + std::chrono::seconds(5)), "");
  const std::string m = w.Warning(t0 + std::chrono::seconds(12));
  EXPECT_TRUE(Has(m, "rank 1: negotiation has not completed in 12")) << m;
  EXPECT_TRUE(Has(m,
                  "TERSE_STALL_SHUTDOWN_SECONDS=20 ends this process at "
                  "20 s"))
      << m;
  EXPECT_TRUE(Has(m, "holding up 2 tensors: 'fc1.bias', 'fc1.weight'")) << m;
  EXPECT_TRUE(Has(m, "unreachable: rank 0 (not heard for 12")) << m;
  EXPECT_EQ(w.Overdue(t0 + std::chrono::seconds(12)), "");
  // Past the limit it is the action's message, not a warning.
  EXPECT_EQ(w.Warning(t0 + std::chrono::seconds(30)), "");
  EXPECT_NE(w.Overdue(t0 + std::chrono::seconds(30)), "");
}

// The thread warns once per phase that passes half the limit: two slow
// phases that end in time give two warnings and no action. (Notifications
// and reads after the thread joined: what TSan sees of the uninstrumented
// absl.)
TEST(CollectiveWatchdogTest, WarnsOncePerSlowPhase) {
  std::atomic<int> warnings{0};
  std::atomic<int> calls{0};
  std::string message[2];
  absl::Notification warned[2];
  {
    CollectiveWatchdog w(
        0, /*limit_seconds=*/4, nullptr, nullptr,
        [&](const std::string&) { ++calls; },
        /*poll_seconds=*/0.02,
        [&](const std::string& m) {
          const int i = warnings++;
          if (i < 2) {
            message[i] = m;
            warned[i].Notify();
          }
        });
    for (int phase = 0; phase < 2; ++phase) {
      w.Enter(phase == 0 ? "allreduce of bucket 3" : "negotiation");
      ASSERT_TRUE(
          warned[phase].WaitForNotificationWithTimeout(absl::Seconds(60)));
      w.Leave();
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(warnings.load(), 2);
  EXPECT_TRUE(
      Has(message[0], "rank 0: allreduce of bucket 3 has not completed in 2"))
      << message[0];
  EXPECT_TRUE(Has(message[0], "ends this process at 4 s")) << message[0];
  EXPECT_TRUE(Has(message[1], "rank 0: negotiation")) << message[1];
  EXPECT_EQ(calls.load(), 0);
}

TEST(CollectiveWatchdogTest, ActsOnceWhenAPhaseOverstays) {
  absl::Notification fired;
  std::string got;
  int calls = 0;
  {
    CollectiveWatchdog w(
        0, 0.2, nullptr, nullptr,
        [&](const std::string& m) {
          ++calls;
          got = m;
          fired.Notify();
        },
        0.02);
    w.Enter("allreduce of bucket 3");
    ASSERT_TRUE(fired.WaitForNotificationWithTimeout(absl::Seconds(60)));
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(Has(got, "rank 0: allreduce of bucket 3 has not completed"))
      << got;
}

TEST(CollectiveWatchdogTest, PhasesThatEndInTimeAndADisabledLimitNeverAct) {
  int calls = 0;
  {
    CollectiveWatchdog w(
        0, 3600, nullptr, nullptr, [&](const std::string&) { ++calls; }, 0.01);
    for (int i = 0; i < 100; ++i) {
      w.Enter("negotiation");
      w.Leave();
    }
  }
  CollectiveWatchdog off(0, 0, nullptr, nullptr,
                         [&](const std::string&) { ++calls; });
  off.Enter("negotiation");
  EXPECT_EQ(off.Overdue(Clock::now() + std::chrono::hours(1)), "");
  EXPECT_EQ(calls, 0);
}

}  // namespace
}  // namespace terse
