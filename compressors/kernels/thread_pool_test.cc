#include "compressors/kernels/thread_pool.h"

#include <atomic>
#include <thread>
#include <vector>

#include "compressors/kernels/parallel.h"
#include "gtest/gtest.h"

namespace terse {
namespace kernels {
namespace {

TEST(ThreadPoolTest, RunsEveryIndexOnce) {
  for (int workers : {0, 1, 3}) {
    ThreadPool pool(workers);
    for (int n : {1, 2, 3, 7, 40}) {
      std::vector<int> hits(n, 0);
      pool.Run(n, [&](int t) { ++hits[t]; });
      for (int t = 0; t < n; ++t) {
        EXPECT_EQ(hits[t], 1) << "workers " << workers << " n " << n;
      }
    }
  }
}

TEST(ThreadPoolTest, GrowsForLargerRequests) {
  ThreadPool pool(0);
  pool.Run(3, [](int) {});
  EXPECT_EQ(pool.workers(), 2);
  pool.Run(1000, [](int) {});
  EXPECT_EQ(pool.workers(), ThreadPool::kMaxThreads - 1);
}

TEST(ThreadPoolTest, ConcurrentAndNestedCallers) {
  ThreadPool pool(2);
  std::vector<std::thread> callers;
  std::vector<std::vector<int>> sums(4, std::vector<int>(5, 0));
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&, c] {
      for (int rep = 0; rep < 50; ++rep) {
        pool.Run(5, [&](int t) {
          // Nested: each outer index runs an inner job on the same pool.
          std::atomic<int> inner{0};
          pool.Run(3, [&](int u) { inner += u + 1; });
          sums[c][t] += inner.load();
        });
      }
    });
  }
  for (std::thread& t : callers) t.join();
  for (const auto& s : sums) {
    for (int v : s) EXPECT_EQ(v, 50 * 6);
  }
}

TEST(ThreadPoolTest, DestructorJoinsIdleWorkers) {
  for (int i = 0; i < 20; ++i) {
    ThreadPool pool(3);
    std::atomic<int> n{0};
    pool.Run(4, [&](int) { ++n; });
    EXPECT_EQ(n.load(), 4);
  }
}

TEST(ThreadPoolTest, DefaultThreadsDividesAmongLocalRanks) {
  EXPECT_EQ(DefaultThreadsFor(16, nullptr), 8);  // At most 8.
  EXPECT_EQ(DefaultThreadsFor(16, "4"), 4);
  EXPECT_EQ(DefaultThreadsFor(2, "4"), 1);  // At least 1.
  EXPECT_EQ(DefaultThreadsFor(2, "1"), 2);
  EXPECT_EQ(DefaultThreadsFor(6, "bad"), 6);
  EXPECT_EQ(DefaultThreadsFor(6, "0"), 6);
  EXPECT_EQ(DefaultThreadsFor(0, nullptr), 1);
  EXPECT_GE(DefaultThreads(), 1);
  EXPECT_EQ(ResolveThreads(0, 1 << 30, 1), DefaultThreads());
  EXPECT_EQ(ResolveThreads(5, 1 << 30, 1), 5);  // Explicit wins.
}

TEST(ThreadPoolTest, ParallelForUsesChunksIndependentOfThreads) {
  // The same n gives the same chunked result whatever runs the chunks.
  const int64_t d = 100003;
  std::vector<int64_t> a(7), b(7);
  auto chunk_sum = [&](std::vector<int64_t>* out) {
    ParallelFor(7, [&](int t) {
      int64_t s = 0;
      for (int64_t i = ChunkBegin(d, 7, t); i < ChunkBegin(d, 7, t + 1); ++i) {
        s += i * i % 97;
      }
      (*out)[t] = s;
    });
  };
  chunk_sum(&a);
  ThreadPool solo(0);
  solo.Run(7, [&](int t) {
    int64_t s = 0;
    for (int64_t i = ChunkBegin(d, 7, t); i < ChunkBegin(d, 7, t + 1); ++i) {
      s += i * i % 97;
    }
    b[t] = s;
  });
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace kernels
}  // namespace terse
