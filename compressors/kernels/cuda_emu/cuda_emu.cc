// cuda_emu's launch, barriers and global-memory arena (see cuda_emu.h).
#include "compressors/kernels/cuda_emu/cuda_emu.h"

#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <utility>
#include <vector>

#include "common/half.h"

namespace cuda_emu {

dim3 thread_idx;
dim3 block_idx;
dim3 grid_dim;
dim3 block_dim;

namespace {

// The arena: one shared mapping made on first use, before any fork, so that
// every block process sees the parent's global memory and each other's
// writes. Bump allocation; cudaFree does not reuse (tests are short).
constexpr size_t kArenaBytes = size_t{1} << 31;  // Reserved, not committed.
constexpr size_t kFiberStack = size_t{256} << 10;
// Longer than any phase of a test kernel here takes, far shorter than a
// test's timeout.
constexpr int kGridWaitSeconds = 30;

struct Arena {
  char* base = nullptr;
  size_t used = 0;
};

Arena& TheArena() {
  static Arena arena;  // Host side is single-threaded: see the header.
  if (arena.base == nullptr) {
    void* p = mmap(nullptr, kArenaBytes, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      std::perror("cuda_emu: mmap");
      std::abort();
    }
    arena.base = static_cast<char*>(p);
  }
  return arena;
}

DeviceShape& Shape() {
  static DeviceShape shape;
  return shape;
}

struct OrderSetting {
  ThreadOrder order = ThreadOrder::kAscending;
  uint64_t seed = 0;
};
OrderSetting& Order() {
  static OrderSetting setting;  // Host side is single-threaded.
  return setting;
}

uint64_t SplitMix(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The threads in the order of one scheduler pass (see SetThreadOrder).
void PassOrder(uint64_t* rng, std::vector<int>* order) {
  const int n = static_cast<int>(order->size());
  for (int i = 0; i < n; ++i) {
    (*order)[i] = Order().order == ThreadOrder::kDescending ? n - 1 - i : i;
  }
  if (Order().order != ThreadOrder::kShuffled) return;
  for (int i = n - 1; i > 0; --i) {  // Fisher-Yates.
    std::swap((*order)[i], (*order)[SplitMix(rng) % (i + 1)]);
  }
}

// The grid barrier lives in the arena: blocks are processes.
struct GridBarrier {
  std::atomic<uint32_t> arrived;
  std::atomic<uint32_t> generation;
};
GridBarrier* grid_barrier = nullptr;

// A block process's threads are fibers. A fiber runs until it waits at a
// barrier; the scheduler then runs the next runnable one. The last to
// arrive at a barrier makes the others runnable and runs on.
struct Fiber {
  ucontext_t context;
  char* stack = nullptr;
  bool runnable = true;
  bool done = false;
};

struct Barrier {
  int size = 0;
  int arrived = 0;
  std::vector<int> waiting;
};

struct WarpState {
  Barrier barrier;
  uint64_t generation = 0;
  uint64_t values[2][32];  // By generation parity: a released lane may
                           // write its next values before the others read.
};

struct Block {
  ucontext_t scheduler;
  std::vector<Fiber> fibers;
  int current = 0;
  Barrier barrier;
  std::vector<WarpState> warps;
  void (*body)(void*) = nullptr;
  void* ctx = nullptr;
  // Set when __syncthreads released the block: the scheduler starts a new
  // pass, so the threads leave the barrier in the thread order's order.
  bool restart_pass = false;
  // Set when a warp's exchange released its lanes: the scheduler runs that
  // warp's lanes next, so a warp moves through its shuffles as one, as its
  // lanes do on a GPU, before other warps run on.
  int released_warp = -1;
};
Block* block = nullptr;  // This process's block, while it runs.

// Suspends the running fiber until the barrier's last arrival. The last
// to arrive at a warp's barrier runs on, and its warp's lanes run next; the
// last at the block's yields too, so that the whole block resumes in the
// thread order (otherwise the last arrival would always be the first past
// __syncthreads).
void Arrive(Barrier* b) {
  const int self = block->current;
  if (++b->arrived == b->size) {
    b->arrived = 0;
    for (int f : b->waiting) block->fibers[f].runnable = true;
    b->waiting.clear();
    if (b == &block->barrier) {
      block->restart_pass = true;
      swapcontext(&block->fibers[self].context, &block->scheduler);
      thread_idx = dim3(self);
    } else {
      block->released_warp = self / 32;
    }
    return;
  }
  block->fibers[self].runnable = false;
  b->waiting.push_back(self);
  swapcontext(&block->fibers[self].context, &block->scheduler);
  thread_idx = dim3(self);  // The scheduler ran others meanwhile.
}

void FiberMain() {
  block->body(block->ctx);
  block->fibers[block->current].done = true;
  // Returning switches to uc_link, the scheduler.
}

cudaError_t last_error = cudaSuccess;  // Host side: see the header.

// Runs one block in this process; 0 when every thread finished. `stacks`
// holds (and keeps, for the next block) one stack per thread.
int RunBlock(unsigned index, void (*body)(void*), void* ctx,
             std::vector<std::unique_ptr<char[]>>* stacks) {
  block_idx = dim3(index);
  const int threads = static_cast<int>(block_dim.x);
  Block b;
  b.body = body;
  b.ctx = ctx;
  b.barrier.size = threads;
  b.warps.resize(threads / 32);
  for (WarpState& w : b.warps) w.barrier.size = 32;
  b.fibers.resize(threads);
  block = &b;
  stacks->resize(threads);
  for (int t = 0; t < threads; ++t) {
    Fiber& f = b.fibers[t];
    if ((*stacks)[t] == nullptr) (*stacks)[t].reset(new char[kFiberStack]);
    f.stack = (*stacks)[t].get();
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = f.stack;
    f.context.uc_stack.ss_size = kFiberStack;
    f.context.uc_link = &b.scheduler;
    makecontext(&f.context, FiberMain, 0);
  }
  int finished = 0;
  uint64_t rng = Order().seed ^ (uint64_t{index} * 0xd1b54a32d192ed03ull);
  std::vector<int> order(threads);
  std::vector<std::vector<int>> lanes(threads / 32);  // Each warp's, in order.
  auto run = [&](int t) {
    Fiber& f = b.fibers[t];
    if (f.done || !f.runnable) return false;
    b.current = t;
    thread_idx = dim3(t);
    swapcontext(&b.scheduler, &f.context);
    if (f.done) ++finished;
    return true;
  };
  while (finished < threads) {
    bool ran = false;
    PassOrder(&rng, &order);
    for (std::vector<int>& l : lanes) l.clear();
    for (int t : order) lanes[t / 32].push_back(t);
    b.restart_pass = false;
    b.released_warp = -1;
    for (int t : order) {
      if (b.restart_pass) break;
      ran |= run(t);
      while (b.released_warp >= 0 && !b.restart_pass) {
        const int warp = b.released_warp;
        b.released_warp = -1;
        for (int lane : lanes[warp]) {
          if (b.restart_pass) break;
          run(lane);
        }
      }
    }
    if (!ran) {
      std::fprintf(stderr,
                   "cuda_emu: block %u deadlocked: %d of %d threads wait at "
                   "a barrier the others never reach\n",
                   index, threads - finished, threads);
      return 3;
    }
  }
  return 0;
}

}  // namespace

void SetDeviceShape(DeviceShape shape) { Shape() = shape; }
DeviceShape GetDeviceShape() { return Shape(); }

void SetThreadOrder(ThreadOrder order, uint64_t seed) {
  Order() = {order, seed};
}

const char* ThreadOrderName(ThreadOrder order) {
  switch (order) {
    case ThreadOrder::kAscending:
      return "ascending";
    case ThreadOrder::kDescending:
      return "descending";
    case ThreadOrder::kShuffled:
      return "shuffled";
  }
  return "?";
}

void SyncThreads() { Arrive(&block->barrier); }

void WarpExchange(uint64_t value, uint64_t* all) {
  WarpState& w = block->warps[thread_idx.x / 32];
  const uint64_t generation = w.generation;
  w.values[generation & 1][thread_idx.x & 31] = value;
  if (w.barrier.arrived + 1 == w.barrier.size) ++w.generation;
  Arrive(&w.barrier);
  std::memcpy(all, w.values[generation & 1], sizeof(w.values[0]));
}

void GridSync() {
  SyncThreads();  // The block's writes before its arrival.
  if (thread_idx.x == 0) {
    const uint32_t gen = grid_barrier->generation.load();
    if (grid_barrier->arrived.fetch_add(1) + 1 == grid_dim.x) {
      grid_barrier->arrived.store(0);
      grid_barrier->generation.fetch_add(1);
    } else {
      // A kernel whose blocks disagree on how many grid.sync()s they make
      // hangs on a GPU; here the wait gives up and fails the launch.
      const auto start = std::chrono::steady_clock::now();
      for (uint64_t spins = 1; grid_barrier->generation.load() == gen;
           ++spins) {
        sched_yield();
        if (spins % 4096 == 0 && std::chrono::steady_clock::now() - start >
                                     std::chrono::seconds(kGridWaitSeconds)) {
          std::fprintf(stderr,
                       "cuda_emu: block %u waited %d s at grid.sync(): the "
                       "blocks do not all reach it\n",
                       block_idx.x, kGridWaitSeconds);
          _exit(4);
        }
      }
    }
  }
  SyncThreads();
}

cudaError_t Launch(dim3 grid, dim3 block_shape, void (*body)(void*),
                   void* ctx) {
  if (grid.x < 1) return cudaErrorInvalidValue;
  grid_barrier = static_cast<GridBarrier*>(ArenaAlloc(sizeof(GridBarrier)));
  if (grid_barrier == nullptr) return cudaErrorMemoryAllocation;
  new (grid_barrier) GridBarrier{{0}, {0}};
  grid_dim = grid;
  block_dim = block_shape;
  std::fflush(nullptr);  // No buffered output duplicated into the children.
  std::vector<pid_t> children;
  cudaError_t result = cudaSuccess;
  for (unsigned b = 0; b < grid.x; ++b) {
    const pid_t pid = fork();
    if (pid < 0) {
      result = cudaErrorLaunchFailure;
      break;
    }
    if (pid == 0) {
      std::vector<std::unique_ptr<char[]>> stacks;
      _exit(RunBlock(b, body, ctx, &stacks));
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0) {
      result = cudaErrorLaunchFailure;
    }
  }
  return result;
}

cudaError_t RunGrid(dim3 grid, dim3 block_shape, void (*body)(void*),
                    void* ctx) {
  if (grid.x < 1 || block_shape.x < 32 || block_shape.x % 32 != 0 ||
      block_shape.x > static_cast<unsigned>(kMaxThreads)) {
    last_error = cudaErrorInvalidValue;
    return last_error;
  }
  grid_dim = grid;
  block_dim = block_shape;
  std::vector<std::unique_ptr<char[]>> stacks;
  for (unsigned b = 0; b < grid.x; ++b) {
    if (RunBlock(b, body, ctx, &stacks) != 0) {
      last_error = cudaErrorLaunchFailure;
      return last_error;
    }
  }
  return cudaSuccess;
}

uint16_t FloatToHalfBits(float f) { return terse::FloatToHalf(f); }
float HalfBitsToFloat(uint16_t h) { return terse::HalfToFloat(h); }
uint16_t FloatToBFloat16Bits(float f) { return terse::FloatToBFloat16(f); }
float BFloat16BitsToFloat(uint16_t h) { return terse::BFloat16ToFloat(h); }

void* ArenaAlloc(size_t bytes) {
  Arena& arena = TheArena();
  const size_t aligned = (bytes + 255) & ~size_t{255};
  if (arena.used + aligned > kArenaBytes) return nullptr;
  void* p = arena.base + arena.used;
  arena.used += aligned;
  return p;
}

}  // namespace cuda_emu

cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int) {
  *value =
      attr == cudaDevAttrCooperativeLaunch ? 1 : cuda_emu::GetDeviceShape().sms;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  *p = cuda_emu::ArenaAlloc(bytes);
  return *p == nullptr ? cudaErrorMemoryAllocation : cudaSuccess;
}

cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t) {
  return cudaMalloc(p, bytes);
}

cudaError_t cudaFree(void*) { return cudaSuccess; }
cudaError_t cudaFreeAsync(void*, cudaStream_t) { return cudaSuccess; }

cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t) {
  std::memset(p, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes,
                            cudaMemcpyKind, cudaStream_t) {
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  return device == 0 ? cudaSuccess : cudaErrorInvalidValue;
}
cudaError_t cudaGetLastError() {
  const cudaError_t error = cuda_emu::last_error;
  cuda_emu::last_error = cudaSuccess;
  return error;
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure";
    case cudaErrorNotSupported:
      return "operation not supported";
    default:
      return "unknown error";
  }
}
