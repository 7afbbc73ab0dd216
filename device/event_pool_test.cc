// EventPool's logic with fake handles: no device needed.
#include "device/event_pool.h"

#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace terse {
namespace {

// Fake handles: distinct addresses from a counter, with a record of the
// live ones and of each handle's ordinal.
struct FakeEvents {
  intptr_t next = 1;
  std::set<EventPool::Handle> live;
  std::vector<int> ordinals;
  bool fail = false;

  EventPool::CreateFn Create() {
    return [this](int ordinal) -> absl::StatusOr<EventPool::Handle> {
      if (fail) return absl::FailedPreconditionError("no device");
      EventPool::Handle h = reinterpret_cast<EventPool::Handle>(next++);
      live.insert(h);
      ordinals.push_back(ordinal);
      return h;
    };
  }
  EventPool::DestroyFn Destroy() {
    return [this](EventPool::Handle h) { EXPECT_EQ(live.erase(h), 1u); };
  }
};

TEST(EventPoolTest, ReleasedHandlesAreReusedPerOrdinal) {
  FakeEvents fake;
  EventPool pool(fake.Create(), fake.Destroy());
  absl::StatusOr<EventPool::Handle> a = pool.Acquire(0);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(pool.stats().created, 1);
  EXPECT_EQ(pool.stats().reused, 0);
  pool.Release(0, *a);
  EXPECT_EQ(pool.free_count(0), 1);
  // The same handle comes back, without a new one.
  absl::StatusOr<EventPool::Handle> b = pool.Acquire(0);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, *a);
  EXPECT_EQ(pool.stats().created, 1);
  EXPECT_EQ(pool.stats().reused, 1);
  EXPECT_EQ(pool.free_count(0), 0);
  // Another ordinal never takes ordinal 0's handles.
  pool.Release(0, *b);
  absl::StatusOr<EventPool::Handle> c = pool.Acquire(1);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(*c, *a);
  EXPECT_EQ(fake.ordinals, (std::vector<int>{0, 1}));
  EXPECT_EQ(pool.stats().created, 2);
  pool.Release(1, *c);
}

TEST(EventPoolTest, SteadyStateCreatesNothing) {
  FakeEvents fake;
  EventPool pool(fake.Create(), fake.Destroy());
  // Up to three handles out at once: three created, whatever the count of
  // operations.
  for (int op = 0; op < 100; ++op) {
    std::vector<EventPool::Handle> out;
    for (int k = 0; k < 3; ++k) out.push_back(*pool.Acquire(2));
    for (EventPool::Handle h : out) pool.Release(2, h);
  }
  EXPECT_EQ(pool.stats().created, 3);
  EXPECT_EQ(pool.stats().reused, 297);
  EXPECT_EQ(fake.live.size(), 3u);
}

TEST(EventPoolTest, CreateErrorsPassThroughAndCountNothing) {
  FakeEvents fake;
  fake.fail = true;
  EventPool pool(fake.Create(), fake.Destroy());
  absl::StatusOr<EventPool::Handle> h = pool.Acquire(0);
  EXPECT_EQ(h.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(pool.stats().created, 0);
}

TEST(EventPoolTest, DestructorDestroysTheFreeHandles) {
  FakeEvents fake;
  {
    EventPool pool(fake.Create(), fake.Destroy());
    EventPool::Handle a = *pool.Acquire(0), b = *pool.Acquire(1);
    pool.Release(0, a);
    pool.Release(1, b);
    EXPECT_EQ(fake.live.size(), 2u);
  }
  EXPECT_TRUE(fake.live.empty());
}

TEST(EventPoolTest, ConcurrentAcquireAndRelease) {
  int64_t created = 0;
  EventPool pool(
      [&created](int) -> absl::StatusOr<EventPool::Handle> {
        // Called outside the pool's lock: count under our own.
        static absl::Mutex mu;
        absl::MutexLock lock(&mu);
        return reinterpret_cast<EventPool::Handle>(++created);
      },
      [](EventPool::Handle) {});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pool] {
      for (int i = 0; i < 1000; ++i) {
        absl::StatusOr<EventPool::Handle> h = pool.Acquire(0);
        ASSERT_TRUE(h.ok());
        pool.Release(0, *h);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const EventPool::Stats stats = pool.stats();
  EXPECT_EQ(stats.created + stats.reused, 4000);
  EXPECT_LE(stats.created, 4);  // At most one out per thread.
  EXPECT_EQ(pool.free_count(0), stats.created);
}

}  // namespace
}  // namespace terse
