// cuda_emu's own contract: barriers order a block's threads, warp exchanges
// hand every lane the others' values, and the thread order a test picks
// shows a missing __syncthreads (SetThreadOrder). The kernels here are
// written in this file, as a .cu would write them.
#include "compressors/kernels/cuda_emu/cuda_emu.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace {

constexpr int kThreads = 256;

// Thread t + 1 (`next`) or t - 1, the ends reading their own.
__device__ int Neighbour(int t, bool next) {
  return next ? (t + 1 < kThreads ? t + 1 : t) : (t > 0 ? t - 1 : t);
}

// Each thread writes its slot, then reads its neighbour's (`next`: thread
// t + 1's, else t - 1's), `barrier` whether a __syncthreads
// stands between the write and the read. `salt` differs per launch, so that
// a slot left from an earlier launch (__shared__ is static here) reads wrong.
__global__ void NeighbourKernel(int salt, bool next, bool barrier, int* out) {
  __shared__ int slots[kThreads];
  const int t = static_cast<int>(threadIdx.x);
  slots[t] = salt + t;
  if (barrier) __syncthreads();
  out[t] = slots[Neighbour(t, next)];
}

// The right answer for every thread, or false.
bool RunNeighbour(int salt, bool next, bool barrier) {
  std::vector<int> out(kThreads, -1);
  std::tuple<int, bool, bool, int*> args(salt, next, barrier, out.data());
  cuda_emu::RunGrid(
      dim3(1), dim3(kThreads),
      [](void* c) {
        auto* a = static_cast<std::tuple<int, bool, bool, int*>*>(c);
        NeighbourKernel(std::get<0>(*a), std::get<1>(*a), std::get<2>(*a),
                        std::get<3>(*a));
      },
      &args);
  for (int t = 0; t < kThreads; ++t) {
    if (out[t] != salt + Neighbour(t, next)) return false;
  }
  return true;
}

// A warp sum by shuffles, then lane 0 of each warp adds into the block's
// total through shared memory.
__global__ void WarpSumKernel(const int* x, int* total) {
  __shared__ int partial[kThreads / 32];
  const int t = static_cast<int>(threadIdx.x);
  int v = x[t];
  for (int offset = 16; offset > 0; offset /= 2) {
    v += __shfl_down_sync(0xffffffffu, v, offset);
  }
  if ((t & 31) == 0) partial[t / 32] = v;
  __syncthreads();
  if (t == 0) {
    int sum = 0;
    for (int w = 0; w < kThreads / 32; ++w) sum += partial[w];
    *total = sum;
  }
}

// Every thread of several blocks updates shared and global words: thread t
// of block b offers (t * 7919 + b * 104729) % 1000003 to a block-wide
// shared maximum, whose first thread takes it into the global one and sets
// its block's bit; every thread adds 2^32 - 1 (carries into the high word).
__global__ void AtomicsKernel(uint32_t* max, uint32_t* bits,
                              unsigned long long* sum) {
  __shared__ uint32_t block_max;
  if (threadIdx.x == 0) block_max = 0;
  __syncthreads();
  atomicMax(&block_max,
            (threadIdx.x * 7919u + blockIdx.x * 104729u) % 1000003u);
  __syncthreads();
  if (threadIdx.x == 0) {
    atomicMax(max, block_max);
    atomicOr(bits, 1u << blockIdx.x);
  }
  atomicAdd(sum, 0xffffffffull);
}

class CudaEmuOrderTest
    : public ::testing::TestWithParam<cuda_emu::ThreadOrder> {
 protected:
  void SetUp() override { cuda_emu::SetThreadOrder(GetParam(), 7); }
  void TearDown() override {
    cuda_emu::SetThreadOrder(cuda_emu::ThreadOrder::kAscending);
  }
};

TEST_P(CudaEmuOrderTest, BarrierOrdersWritesBeforeReads) {
  for (int salt : {1000, 2000}) {
    EXPECT_TRUE(RunNeighbour(salt, /*next=*/true, /*barrier=*/true));
    EXPECT_TRUE(RunNeighbour(salt + 1, /*next=*/false, /*barrier=*/true));
  }
}

TEST_P(CudaEmuOrderTest, WarpShufflesAndBarriersSum) {
  std::vector<int> x(kThreads);
  for (int t = 0; t < kThreads; ++t) x[t] = t * t - 7 * t;
  int64_t want = 0;
  for (int v : x) want += v;
  int total = 0;
  std::tuple<const int*, int*> args(x.data(), &total);
  cuda_emu::RunGrid(
      dim3(1), dim3(kThreads),
      [](void* c) {
        auto* a = static_cast<std::tuple<const int*, int*>*>(c);
        WarpSumKernel(std::get<0>(*a), std::get<1>(*a));
      },
      &args);
  EXPECT_EQ(total, want);
}

TEST_P(CudaEmuOrderTest, AtomicsAcrossThreadsAndBlocks) {
  constexpr unsigned kBlocks = 5, kBlockThreads = 96;
  uint32_t max = 0, bits = 0;
  unsigned long long sum = 0;
  using Args = std::tuple<uint32_t*, uint32_t*, unsigned long long*>;
  Args args(&max, &bits, &sum);
  cuda_emu::RunGrid(
      dim3(kBlocks), dim3(kBlockThreads),
      [](void* c) {
        auto* a = static_cast<Args*>(c);
        AtomicsKernel(std::get<0>(*a), std::get<1>(*a), std::get<2>(*a));
      },
      &args);
  uint32_t want = 0;
  for (unsigned b = 0; b < kBlocks; ++b) {
    for (unsigned t = 0; t < kBlockThreads; ++t) {
      want = std::max(want, (t * 7919u + b * 104729u) % 1000003u);
    }
  }
  EXPECT_EQ(max, want);
  EXPECT_EQ(bits, (1u << kBlocks) - 1);
  EXPECT_EQ(sum, 0xffffffffull * kBlocks * kBlockThreads);
}

INSTANTIATE_TEST_SUITE_P(
    Orders, CudaEmuOrderTest,
    ::testing::Values(cuda_emu::ThreadOrder::kAscending,
                      cuda_emu::ThreadOrder::kDescending,
                      cuda_emu::ThreadOrder::kShuffled),
    [](const ::testing::TestParamInfo<cuda_emu::ThreadOrder>& info) {
      return std::string(cuda_emu::ThreadOrderName(info.param));
    });

// Without the barrier, the read of a neighbour that has not run yet sees the
// last launch's value: ascending order catches a read of thread t + 1's
// slot, descending one of t - 1's, a shuffled order both.
TEST(CudaEmuTest, EachOrderShowsTheMissingBarrierItRunsTheReaderFirstFor) {
  using cuda_emu::ThreadOrder;
  cuda_emu::SetThreadOrder(ThreadOrder::kAscending);
  EXPECT_FALSE(RunNeighbour(3000, /*next=*/true, /*barrier=*/false));
  EXPECT_TRUE(RunNeighbour(3100, /*next=*/false, /*barrier=*/false));
  cuda_emu::SetThreadOrder(ThreadOrder::kDescending);
  EXPECT_TRUE(RunNeighbour(3200, /*next=*/true, /*barrier=*/false));
  EXPECT_FALSE(RunNeighbour(3300, /*next=*/false, /*barrier=*/false));
  cuda_emu::SetThreadOrder(ThreadOrder::kShuffled, 11);
  EXPECT_FALSE(RunNeighbour(3400, /*next=*/true, /*barrier=*/false));
  EXPECT_FALSE(RunNeighbour(3500, /*next=*/false, /*barrier=*/false));
  cuda_emu::SetThreadOrder(ThreadOrder::kAscending);
}

// Each thread takes a ticket after a barrier, then after a warp shuffle:
// the block leaves __syncthreads in the thread order, and a warp runs
// through its shuffles as one before the next warp starts.
__global__ void TicketKernel(uint32_t* counters, uint32_t* after_barrier,
                             uint32_t* after_shuffle) {
  const int t = static_cast<int>(threadIdx.x);
  (void)__shfl_down_sync(0xffffffffu, t, 1);  // Warps reach the barrier
  __syncthreads();                            // as one.
  after_barrier[t] = atomicAdd(&counters[0], 1u);
  (void)__shfl_down_sync(0xffffffffu, t, 1);
  (void)__shfl_down_sync(0xffffffffu, t, 2);
  after_shuffle[t] = atomicAdd(&counters[1], 1u);
}

TEST(CudaEmuTest, ThreadsLeaveBarriersInTheThreadOrderAndWarpsAsOne) {
  for (cuda_emu::ThreadOrder order : {cuda_emu::ThreadOrder::kAscending,
                                      cuda_emu::ThreadOrder::kDescending}) {
    cuda_emu::SetThreadOrder(order);
    uint32_t counters[2] = {0, 0};
    std::vector<uint32_t> barrier(kThreads), shuffle(kThreads);
    std::tuple<uint32_t*, uint32_t*, uint32_t*> args(counters, barrier.data(),
                                                     shuffle.data());
    cuda_emu::RunGrid(
        dim3(1), dim3(kThreads),
        [](void* c) {
          auto* a =
              static_cast<std::tuple<uint32_t*, uint32_t*, uint32_t*>*>(c);
          TicketKernel(std::get<0>(*a), std::get<1>(*a), std::get<2>(*a));
        },
        &args);
    const bool up = order == cuda_emu::ThreadOrder::kAscending;
    // The block leaves the barrier in the thread order.
    for (int t = 0; t < kThreads; ++t) {
      EXPECT_EQ(barrier[t], static_cast<uint32_t>(up ? t : kThreads - 1 - t))
          << "thread " << t << ", " << cuda_emu::ThreadOrderName(order);
    }
    // A warp's lanes take their second tickets one after another.
    for (int w = 0; w < kThreads / 32; ++w) {
      uint32_t lo = UINT32_MAX, hi = 0;
      for (int l = 0; l < 32; ++l) {
        lo = std::min(lo, shuffle[w * 32 + l]);
        hi = std::max(hi, shuffle[w * 32 + l]);
      }
      EXPECT_EQ(hi - lo, 31u)
          << "warp " << w << ", " << cuda_emu::ThreadOrderName(order);
    }
  }
  cuda_emu::SetThreadOrder(cuda_emu::ThreadOrder::kAscending);
}

TEST(CudaEmuTest, AtomicMaxReturnsTheOldValue) {
  uint32_t word = 10;
  EXPECT_EQ(atomicMax(&word, 7u), 10u);
  EXPECT_EQ(word, 10u);
  EXPECT_EQ(atomicMax(&word, 12u), 10u);
  EXPECT_EQ(word, 12u);
}

}  // namespace
