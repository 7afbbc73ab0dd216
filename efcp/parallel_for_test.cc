#include "efcp/parallel_for.h"

#include <atomic>
#include <mutex>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace terse {
namespace efcp {
namespace {

// Every index visited exactly once, chunks aligned, for many shapes.
TEST(ParallelForTest, CoversRangeOnceWithAlignedChunks) {
  for (int64_t n : {0, 1, 7, 100, 4096, 10001}) {
    for (int threads : {1, 2, 3, 8}) {
      for (int64_t align : {1, 16, 2048}) {
        std::vector<std::atomic<int>> seen(n);
        std::mutex mu;
        std::vector<std::pair<int64_t, int64_t>> chunks;
        ParallelFor(n, threads, 10, align, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) seen[i]++;
          std::lock_guard<std::mutex> lock(mu);
          chunks.emplace_back(b, e);
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[i].load(), 1);
        EXPECT_LE(static_cast<int>(chunks.size()), std::max(threads, 1));
        for (const auto& c : chunks) {
          EXPECT_EQ(c.first % align, 0);
          EXPECT_LT(c.first, c.second);
        }
      }
    }
  }
}

TEST(ParallelForTest, ResolveNumThreads) {
  EXPECT_GE(ResolveNumThreads(0), 1);
  EXPECT_LE(ResolveNumThreads(0), 8);
  EXPECT_EQ(ResolveNumThreads(3), 3);
  EXPECT_EQ(ResolveNumThreads(1000), 64);
}

}  // namespace
}  // namespace efcp
}  // namespace terse
