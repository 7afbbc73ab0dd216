// cuda_emu: runs a CUDA source file's kernels on the CPU, so that a kernel's
// logic (indexing, barriers, warp votes, grid-wide phases, its fallbacks)
// is tested in CI, where there is no GPU. It is not a simulator of timing
// and catches no race a real GPU would hide or show; it is an executable
// model of the programming model, faithful enough for kernels written to the
// rules below. The GPU tests run the same source on a device.
//
// How a launch runs (cuda_emu.cc): each block is a forked process (so that a
// kernel's function-scope __shared__ variables, which this header turns into
// statics, are per block), each of its threads a fiber (ucontext) that a
// scheduler in the process runs until it waits at a barrier. Global memory
// is one MAP_SHARED arena that every block process sees (cudaMalloc*).
// Barriers: __syncthreads waits for the block's threads; a warp intrinsic
// waits for the warp's 32 lanes and hands each the lanes' values; grid.sync()
// is a barrier of the blocks' first threads in the arena, between two
// __syncthreads. Blocks run in parallel, as processes; threads of a block
// interleave only at barriers, in an order SetThreadOrder picks: the block
// leaves a __syncthreads in that order, and a warp whose lanes meet at a
// shuffle or vote runs on as one (as on a GPU) before other warps do. A
// missing __syncthreads between one thread's write and another's read
// shows only in an order that runs the reader (or, for a write after a
// read, the writer) first: run a kernel under both kAscending and
// kDescending (and kShuffled) to catch it either way (the GPU tests run
// the same source). Atomics are the compiler's __atomic builtins, on either
// kind of memory. cp.async copies at once. A kernel whose threads cannot all
// reach a barrier aborts its block (a deadlock report) instead of hanging.
//
// Ordinary launches (`kernel<<<grid, block, 0, stream>>>(args)`, which the
// build rewrites to cuda_emu::Launcher(grid, block, 0, stream)(a lambda
// calling kernel(args)))
// run their blocks one after another in this process, each block's threads
// as fibers; stream order is program order (every launch and copy is
// synchronous here).
//
// Rules for a kernel to run here: launched with cudaLaunchCooperativeKernel
// (the typed overload) or <<<>>>, at most kMaxThreads threads a block; every
// warp
// intrinsic called by all 32 lanes of the warp with the full mask (a
// converged warp); no textures, no dynamic shared memory, no device-side
// launches; inline PTX only under #ifdef __CUDA_ARCH__.
//
// Include this header first (the build force-includes it) and give it the
// fake <cuda_runtime.h>, <cooperative_groups.h> and <cuda_pipeline.h> of
// cuda_emu/include. Not thread-safe: one launch at a time per process.
#ifndef TERSE_COMPRESSORS_KERNELS_CUDA_EMU_CUDA_EMU_H_
#define TERSE_COMPRESSORS_KERNELS_CUDA_EMU_CUDA_EMU_H_

#include <math.h>  // Device code calls isfinite, sqrt unqualified.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

struct dim3 {
  unsigned x, y, z;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};

using cudaError_t = int;
constexpr cudaError_t cudaSuccess = 0;
constexpr cudaError_t cudaErrorInvalidValue = 1;
constexpr cudaError_t cudaErrorMemoryAllocation = 2;
constexpr cudaError_t cudaErrorLaunchFailure = 719;
constexpr cudaError_t cudaErrorCooperativeLaunchTooLarge = 720;
constexpr cudaError_t cudaErrorNotSupported = 801;
using cudaStream_t = void*;
enum cudaDeviceAttr {
  cudaDevAttrCooperativeLaunch,
  cudaDevAttrMultiProcessorCount,
};

namespace cuda_emu {

constexpr int kMaxThreads = 1024;

// The launch geometry the emulated device reports: SMs and blocks per SM
// (the occupancy query's answer). Tests pick small grids so that every
// block-partitioning branch of a kernel runs with several blocks.
struct DeviceShape {
  int sms = 2;
  int blocks_per_sm = 2;
};
void SetDeviceShape(DeviceShape shape);
DeviceShape GetDeviceShape();

// The order in which a block's scheduler runs its runnable threads, each
// until its next barrier: by ascending or descending thread index, or in a
// fresh pseudo-random order at every pass (from `seed` and the block
// index, so a failure repeats). A kernel that is right under the rules
// gives the same result under every order; one that reads another thread's
// write without a barrier between them does not. Default kAscending.
enum class ThreadOrder { kAscending, kDescending, kShuffled };
void SetThreadOrder(ThreadOrder order, uint64_t seed = 0);
const char* ThreadOrderName(ThreadOrder order);

// Per block process; thread_idx is the running fiber's.
extern dim3 thread_idx;
extern dim3 block_idx;
extern dim3 grid_dim;
extern dim3 block_dim;

void SyncThreads();
// Warp exchange: every lane passes `value`; returns all 32 lanes' values.
void WarpExchange(uint64_t value, uint64_t* all);
void GridSync();

// Runs `body()` as a cooperative launch: grid.x blocks (processes) of
// block.x threads. Returns cudaSuccess, or cudaErrorLaunchFailure when a
// block process did not exit cleanly.
cudaError_t Launch(dim3 grid, dim3 block, void (*body)(void*), void* ctx);
// Runs `body()` as an ordinary launch: the blocks one after another in this
// process. The result is also what cudaGetLastError returns next.
cudaError_t RunGrid(dim3 grid, dim3 block, void (*body)(void*), void* ctx);

// The launch a `kernel<<<grid, block, shared, stream>>>(args)` became:
// Launcher(grid, block, shared, stream)([&] { kernel(args); }), each thread
// evaluating the arguments for itself (launch arguments are plain values).
struct GridLaunch {
  dim3 grid, block;
  template <typename F>
  void operator()(F body) const {
    RunGrid(
        grid, block, [](void* c) { (*static_cast<F*>(c))(); }, &body);
  }
};
inline GridLaunch Launcher(dim3 grid, dim3 block, size_t /*shared_bytes*/ = 0,
                           void* /*stream*/ = nullptr) {
  return {grid, block};
}

// Global memory: `bytes` of the arena that every block process shares.
void* ArenaAlloc(size_t bytes);

}  // namespace cuda_emu

#define threadIdx (::cuda_emu::thread_idx)
#define blockIdx (::cuda_emu::block_idx)
#define gridDim (::cuda_emu::grid_dim)
#define blockDim (::cuda_emu::block_dim)

inline void __syncthreads() { cuda_emu::SyncThreads(); }
inline void __syncwarp(uint32_t /*mask*/ = 0xffffffffu) {
  uint64_t all[32];
  cuda_emu::WarpExchange(0, all);
}

struct alignas(16) float4 {
  float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) {
  return {x, y, z, w};
}
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

inline uint32_t __ballot_sync(uint32_t /*mask*/, bool pred) {
  uint64_t all[32];
  cuda_emu::WarpExchange(pred ? 1 : 0, all);
  uint32_t bits = 0;
  for (int l = 0; l < 32; ++l) bits |= static_cast<uint32_t>(all[l]) << l;
  return bits;
}
inline bool __any_sync(uint32_t mask, bool pred) {
  return __ballot_sync(mask, pred) != 0;
}
inline uint32_t __match_any_sync(uint32_t /*mask*/, uint32_t value) {
  uint64_t all[32];
  cuda_emu::WarpExchange(value, all);
  uint32_t bits = 0;
  for (int l = 0; l < 32; ++l) bits |= (all[l] == value ? 1u : 0u) << l;
  return bits;
}
namespace cuda_emu {
// Every lane of the warp passes `value`; returns lane `src`'s, or `value`
// itself when `src` is outside the warp (what the shuffles below return for
// lanes with no source).
template <typename T>
T ShuffleFrom(T value, int src) {
  static_assert(sizeof(T) <= 8, "64-bit values at most");
  uint64_t mine = 0, all[32];
  std::memcpy(&mine, &value, sizeof(T));
  WarpExchange(mine, all);
  if (src < 0 || src >= 32) return value;
  T out;
  std::memcpy(&out, &all[src], sizeof(T));
  return out;
}
}  // namespace cuda_emu
template <typename T>
T __shfl_up_sync(uint32_t /*mask*/, T value, unsigned delta) {
  return cuda_emu::ShuffleFrom(
      value, static_cast<int>(threadIdx.x & 31) - static_cast<int>(delta));
}
template <typename T>
T __shfl_down_sync(uint32_t /*mask*/, T value, unsigned delta) {
  return cuda_emu::ShuffleFrom(
      value, static_cast<int>(threadIdx.x & 31) + static_cast<int>(delta));
}
template <typename T>
T __shfl_sync(uint32_t /*mask*/, T value, int src) {
  return cuda_emu::ShuffleFrom(value, src & 31);
}

inline int __popc(uint32_t v) { return __builtin_popcount(v); }
inline uint64_t __umul64hi(uint64_t a, uint64_t b) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(a) * b) >> 64);
}
inline int __ffs(uint32_t v) { return __builtin_ffs(static_cast<int>(v)); }
inline uint32_t __float_as_uint(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
template <typename T>
T __ldcg(const T* p) {
  return __atomic_load_n(p, __ATOMIC_RELAXED);
}
inline uint32_t atomicAdd(uint32_t* p, uint32_t v) {
  return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
inline int atomicAdd(int* p, int v) {
  return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
inline unsigned long long atomicAdd(unsigned long long* p,
                                    unsigned long long v) {
  return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
inline double atomicAdd(double* p, double v) {
  uint64_t old_bits =
      __atomic_load_n(reinterpret_cast<uint64_t*>(p), __ATOMIC_SEQ_CST);
  for (;;) {
    double old;
    std::memcpy(&old, &old_bits, 8);
    const double sum = old + v;
    uint64_t new_bits;
    std::memcpy(&new_bits, &sum, 8);
    if (__atomic_compare_exchange_n(reinterpret_cast<uint64_t*>(p), &old_bits,
                                    new_bits, false, __ATOMIC_SEQ_CST,
                                    __ATOMIC_SEQ_CST)) {
      return old;
    }
  }
}
inline uint32_t atomicOr(uint32_t* p, uint32_t v) {
  return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST);
}
inline uint32_t atomicMax(uint32_t* p, uint32_t v) {
  uint32_t old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  while (old < v &&
         !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST,
                                      __ATOMIC_SEQ_CST)) {
  }
  return old;
}

// Arithmetic with the rounding named (round to nearest: the host's mode;
// build with -ffp-contract=off so that no product is fused into an add).
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __dsqrt_rn(double a) { return std::sqrt(a); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }

// fp16 and bf16 as their bits; conversions round to nearest even.
struct __half {
  uint16_t bits;
};
struct __nv_bfloat16 {
  uint16_t bits;
};
namespace cuda_emu {
uint16_t FloatToHalfBits(float f);
float HalfBitsToFloat(uint16_t h);
uint16_t FloatToBFloat16Bits(float f);
float BFloat16BitsToFloat(uint16_t h);
}  // namespace cuda_emu
inline __half __float2half_rn(float f) {
  return {cuda_emu::FloatToHalfBits(f)};
}
inline float __half2float(__half h) {
  return cuda_emu::HalfBitsToFloat(h.bits);
}
inline uint16_t __half_as_ushort(__half h) { return h.bits; }
inline __half __ushort_as_half(uint16_t u) { return {u}; }
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  return {cuda_emu::FloatToBFloat16Bits(f)};
}
inline float __bfloat162float(__nv_bfloat16 h) {
  return cuda_emu::BFloat16BitsToFloat(h.bits);
}
inline uint16_t __bfloat16_as_ushort(__nv_bfloat16 h) { return h.bits; }
inline __nv_bfloat16 __ushort_as_bfloat16(uint16_t u) { return {u}; }

inline void __pipeline_memcpy_async(void* dst, const void* src, size_t n) {
  std::memcpy(dst, src, n);
}
inline void __pipeline_commit() {}
inline void __pipeline_wait_prior(size_t) {}

namespace cooperative_groups {
struct grid_group {
  void sync() { cuda_emu::GridSync(); }
};
inline grid_group this_grid() { return {}; }
}  // namespace cooperative_groups

// The host API the kernels' launchers use.
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaMalloc(void** p, size_t bytes);
cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t stream);
cudaError_t cudaFree(void* p);
cudaError_t cudaFreeAsync(void* p, cudaStream_t stream);
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes,
                            cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
enum cudaMemcpyKind {
  cudaMemcpyHostToHost,
  cudaMemcpyHostToDevice,
  cudaMemcpyDeviceToHost,
  cudaMemcpyDeviceToDevice,
  cudaMemcpyDefault,
};
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes,
                            cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetLastError();
const char* cudaGetErrorString(cudaError_t error);

enum cudaFuncAttribute { cudaFuncAttributePreferredSharedMemoryCarveout };
constexpr int cudaSharedmemCarveoutMaxShared = 100;
template <typename Kernel>
cudaError_t cudaFuncSetAttribute(Kernel, cudaFuncAttribute, int) {
  return cudaSuccess;
}
template <typename Kernel>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, Kernel,
                                                          int, size_t) {
  *blocks = cuda_emu::GetDeviceShape().blocks_per_sm;
  return cudaSuccess;
}

namespace cuda_emu {
template <typename P>
struct KernelCall {
  void (*kernel)(P);
  P* params;
  static void Run(void* ctx) {
    auto* call = static_cast<KernelCall*>(ctx);
    call->kernel(*call->params);
  }
};
}  // namespace cuda_emu

// The typed overload of cuda_runtime.h, for kernels of one by-value
// parameter.
template <typename P>
cudaError_t cudaLaunchCooperativeKernel(void (*kernel)(P), dim3 grid,
                                        dim3 block, void** args,
                                        size_t shared_bytes,
                                        cudaStream_t /*stream*/) {
  if (shared_bytes != 0 || block.x < 1 ||
      block.x > static_cast<unsigned>(cuda_emu::kMaxThreads) ||
      block.x % 32 != 0) {
    return cudaErrorInvalidValue;
  }
  cuda_emu::KernelCall<P> call{kernel, static_cast<P*>(args[0])};
  return cuda_emu::Launch(grid, block, &cuda_emu::KernelCall<P>::Run, &call);
}

#endif  // TERSE_COMPRESSORS_KERNELS_CUDA_EMU_CUDA_EMU_H_
