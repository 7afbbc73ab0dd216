// The ring's pure parts: how a buffer is cut into blocks, when the ring is
// chosen, and the pipelined schedule, run here on ranks simulated in one
// thread. The exchange itself runs under mpirun in mpi_conformance_main
// ("ring allreduce" run, 2 and 4 ranks), against the suite's fp64 reference.
#include "collectives/mpi/ring_allreduce.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

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

TEST(RingScheduleTest, SegmentsTileEachBlockWithinTheBound) {
  for (int64_t count : {1, 7, 1000, 100003}) {
    for (int64_t segment : {1, 3, 64, 1 << 20}) {
      const RingSchedule schedule(count, /*rank=*/1, /*size=*/4, segment);
      for (int64_t k = 0; k < schedule.messages(); ++k) {
        const RingBlock out = schedule.SendRange(k);
        const RingBlock in = schedule.RecvRange(k);
        EXPECT_LE(out.end - out.begin, segment);
        EXPECT_LE(in.end - in.begin, segment);
        // A step's segments follow each other through one block.
        if (k % schedule.segments() != 0) {
          EXPECT_EQ(out.begin, schedule.SendRange(k - 1).end);
          EXPECT_EQ(in.begin, schedule.RecvRange(k - 1).end);
        }
      }
    }
  }
}

// Runs the schedule on `size` simulated ranks in one thread, each message
// passed in order along its link, and each sender's data read as late as
// possible (when the receiver takes the message): were a buffer region
// overwritten while a send of it was still in flight, or forwarded before
// it was received, the sums would come out wrong. Also fails on a
// deadlock (no rank can move). The ranks move in a random order, each as
// far as it can, so some run well ahead of their neighbours. Integer data:
// the oracle is exact.
void SimulateRing(int size, int64_t count, int64_t segment, uint32_t seed) {
  SCOPED_TRACE(testing::Message()
               << size << " ranks, " << count << " elements, segments of "
               << segment << ", seed " << seed);
  std::mt19937 rng(seed);
  std::vector<RingSchedule> schedules;
  std::vector<std::vector<int64_t>> data(size, std::vector<int64_t>(count));
  std::vector<int64_t> expected(count, 0);
  for (int r = 0; r < size; ++r) {
    schedules.emplace_back(count, r, size, segment);
    for (int64_t i = 0; i < count; ++i) {
      data[r][i] = (r + 1) * 1'000'003 + i * 7;
      expected[i] += data[r][i];
    }
  }
  const int64_t total = schedules[0].messages();
  // received[r]: messages rank r has taken from its left, in order; a
  // message of r counts as sent once its right neighbour took it.
  std::vector<int64_t> received(size, 0);
  auto sent = [&](int r) { return received[(r + 1) % size]; };
  std::vector<int> order(size);
  for (int r = 0; r < size; ++r) order[r] = r;
  bool moved = true;
  while (moved) {
    moved = false;
    std::shuffle(order.begin(), order.end(), rng);
    for (int step = 0; step < size * static_cast<int>(total + 1); ++step) {
      const int r = order[step / static_cast<int>(total + 1)];
      const int left = (r + size - 1) % size;
      const int64_t k = received[r];
      if (k == total) continue;
      // The left rank may send k once it has the data k forwards (MPI
      // posts within the window; the schedule's dependency is what counts).
      if (schedules[left].ForwardsReceived(k) >= received[left]) continue;
      // This rank may land k once its send of the region k overwrites is
      // done.
      if (schedules[r].OverwritesSent(k) >= sent(r)) continue;
      const RingBlock out = schedules[left].SendRange(k);
      const RingBlock in = schedules[r].RecvRange(k);
      ASSERT_EQ(out.begin, in.begin) << "message " << k;
      ASSERT_EQ(out.end, in.end) << "message " << k;
      for (int64_t i = in.begin; i < in.end; ++i) {
        data[r][i] = schedules[r].Reduces(k) ? data[r][i] + data[left][i]
                                             : data[left][i];
      }
      ++received[r];
      moved = true;
    }
  }
  for (int r = 0; r < size; ++r) {
    ASSERT_EQ(received[r], total) << "deadlock at rank " << r;
    EXPECT_EQ(data[r], expected) << "rank " << r;
  }
}

TEST(RingScheduleTest, SimulatedRanksEndWithTheSum) {
  for (int size : {2, 3, 4, 5}) {
    for (int64_t count : {0, 1, 5, 17, 1000}) {
      for (int64_t segment : {1, 3, 1000}) {
        for (uint32_t seed : {1u, 2u, 3u}) {
          SimulateRing(size, count, segment, seed);
        }
      }
    }
  }
}

}  // namespace
}  // namespace terse
