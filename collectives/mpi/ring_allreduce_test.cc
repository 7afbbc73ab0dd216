// The ring's pure parts: how a buffer is cut into blocks and when the ring is
// chosen. The exchange itself runs under mpirun in mpi_conformance_main
// ("ring allreduce" run, 2 and 4 ranks), against the suite's fp64 reference.
#include "collectives/mpi/ring_allreduce.h"

#include "gtest/gtest.h"

namespace terse {
namespace {

TEST(RingBlockTest, BlocksTileTheBufferAndDifferByAtMostOne) {
  for (int64_t count : {0, 1, 3, 7, 8, 1000, 100003}) {
    for (int blocks : {1, 2, 3, 4, 7}) {
      int64_t next = 0, smallest = count, largest = 0;
      for (int b = 0; b < blocks; ++b) {
        const RingBlock block = RingBlockOf(count, blocks, b);
        EXPECT_EQ(block.begin, next) << count << " / " << blocks << " #" << b;
        EXPECT_LE(block.begin, block.end);
        next = block.end;
        smallest = std::min(smallest, block.end - block.begin);
        largest = std::max(largest, block.end - block.begin);
      }
      EXPECT_EQ(next, count) << count << " / " << blocks;
      EXPECT_LE(largest - smallest, 1) << count << " / " << blocks;
      // Block 0 is a largest one: the scratch buffer is sized by it.
      const RingBlock first = RingBlockOf(count, blocks, 0);
      EXPECT_EQ(first.end - first.begin, largest);
    }
  }
}

TEST(RingChoiceTest, AutoTakesTheRingOnlyAcrossHostsAndForLargeBuffers) {
  const int64_t kMin = 2 << 20;
  using A = MpiAllreduceAlgorithm;
  // One host: Open MPI's own algorithms, whatever the size.
  EXPECT_FALSE(RingAllreduceChosen(A::kAuto, 4, 4, int64_t{1} << 30, kMin));
  // Several hosts: the ring from min_bytes on.
  EXPECT_FALSE(RingAllreduceChosen(A::kAuto, 4, 1, kMin - 1, kMin));
  EXPECT_TRUE(RingAllreduceChosen(A::kAuto, 4, 1, kMin, kMin));
  EXPECT_TRUE(RingAllreduceChosen(A::kAuto, 4, 3, kMin, kMin));
  // Forced either way.
  EXPECT_TRUE(RingAllreduceChosen(A::kRing, 4, 4, 8, kMin));
  EXPECT_FALSE(RingAllreduceChosen(A::kLibrary, 4, 1, int64_t{1} << 30, kMin));
  // One rank has nothing to exchange.
  EXPECT_FALSE(RingAllreduceChosen(A::kRing, 1, 1, int64_t{1} << 30, kMin));
}

}  // namespace
}  // namespace terse
