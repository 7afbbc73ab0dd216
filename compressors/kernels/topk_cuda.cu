// CUDA radix select, the same algorithm as topk.cc: three histogram levels
// (11, 10, 10 bits of the 31-bit magnitude key) with the bin choice made on
// the device, then a tiled collection pass that keeps index order: per-tile
// counts, a scan that hands the tie budget to tiles in index order, and a
// per-tile ordered write (warp ballots + a block scan).
#include <cuda_runtime.h>

#include <cstdint>

#include "compressors/kernels/topk_cuda.h"

namespace terse {
namespace kernels {
namespace cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int64_t kTile = 8192;
constexpr int kMaxBins = 2048;
constexpr int kLevels = 3;
constexpr int64_t kAllTies = INT64_MAX;

struct SelectState {
  uint32_t prefix;  // (key >> shift) == prefix: "equal"; > prefix: taken.
  int32_t shift;
  int32_t done;  // 1: no further histogram level is needed.
  int64_t need;  // How many of the equal entries to take.
};

__host__ __device__ inline int LevelShift(int level) {
  return level == 0 ? 20 : (level == 1 ? 10 : 0);
}
__host__ __device__ inline int LevelBits(int level) {
  return level == 0 ? 11 : 10;
}

__device__ __forceinline__ uint32_t KeyAt(const float* x, int64_t i) {
  return __float_as_uint(x[i]) & 0x7fffffffu;
}

__global__ void InitStateKernel(SelectState* st, uint32_t prefix, int shift,
                                int done, int64_t need) {
  st->prefix = prefix;
  st->shift = shift;
  st->done = done;
  st->need = need;
}

__global__ void HistogramKernel(const float* x, int64_t d, int level,
                                const SelectState* st, uint32_t* hist) {
  __shared__ uint32_t local[kMaxBins];
  if (st->done) return;  // Uniform across the grid.
  const int bins = 1 << LevelBits(level);
  const int shift = LevelShift(level);
  const int high = shift + LevelBits(level);
  const uint32_t mask = static_cast<uint32_t>(bins - 1);
  const uint32_t prefix = st->prefix;
  for (int b = threadIdx.x; b < bins; b += blockDim.x) local[b] = 0;
  __syncthreads();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < d; i += stride) {
    const uint32_t key = KeyAt(x, i);
    if (level == 0 || (key >> high) == prefix) {
      atomicAdd(&local[(key >> shift) & mask], 1u);
    }
  }
  __syncthreads();
  for (int b = threadIdx.x; b < bins; b += blockDim.x) {
    if (local[b] != 0) atomicAdd(&hist[b], local[b]);
  }
}

// One thread: choose the bin holding the need-th largest key.
__global__ void PickKernel(int level, const uint32_t* hist, SelectState* st) {
  if (st->done) return;
  const int bins = 1 << LevelBits(level);
  int64_t need = st->need;
  int64_t above = 0;
  int chosen = bins - 1;
  while (chosen > 0 && above + hist[chosen] < need) above += hist[chosen--];
  need -= above;
  st->prefix = (st->prefix << LevelBits(level)) | static_cast<uint32_t>(chosen);
  st->shift = LevelShift(level);
  st->need = need;
  if (static_cast<int64_t>(hist[chosen]) == need) st->done = 1;
}

__global__ void TileCountKernel(const float* x, int64_t d,
                                const SelectState* st, uint32_t* tile_gt,
                                uint32_t* tile_eq) {
  __shared__ uint32_t gt_sum, eq_sum;
  if (threadIdx.x == 0) gt_sum = eq_sum = 0;
  __syncthreads();
  const int shift = st->shift;
  const uint32_t prefix = st->prefix;
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t end = begin + kTile < d ? begin + kTile : d;
  uint32_t gt = 0, eq = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const uint32_t high = KeyAt(x, i) >> shift;
    gt += high > prefix;
    eq += high == prefix;
  }
  atomicAdd(&gt_sum, gt);
  atomicAdd(&eq_sum, eq);
  __syncthreads();
  if (threadIdx.x == 0) {
    tile_gt[blockIdx.x] = gt_sum;
    tile_eq[blockIdx.x] = eq_sum;
  }
}

// One thread: output offsets and tie budgets per tile, in tile order.
__global__ void TileScanKernel(int64_t tiles, const SelectState* st,
                               const uint32_t* tile_gt, const uint32_t* tile_eq,
                               int64_t* tile_offset, int64_t* tile_ties,
                               int64_t* total) {
  int64_t ties_left = st->need;
  int64_t pos = 0;
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t eq = tile_eq[t];
    const int64_t take = eq < ties_left ? eq : ties_left;
    ties_left -= take;
    tile_offset[t] = pos;
    tile_ties[t] = take;
    pos += tile_gt[t] + take;
  }
  *total = pos;
}

__global__ void TileWriteKernel(const float* x, int64_t d,
                                const SelectState* st,
                                const int64_t* tile_offset,
                                const int64_t* tile_ties, uint32_t* out) {
  __shared__ uint32_t warp_eq[kWarps];
  __shared__ uint32_t warp_sel[kWarps];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const uint32_t lanes_below = (1u << lane) - 1u;
  const int shift = st->shift;
  const uint32_t prefix = st->prefix;
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t end = begin + kTile < d ? begin + kTile : d;
  int64_t out_pos = tile_offset[blockIdx.x];
  const int64_t budget = tile_ties[blockIdx.x];
  int64_t eq_seen = 0;
  for (int64_t base = begin; base < end; base += blockDim.x) {
    const int64_t i = base + threadIdx.x;
    const bool valid = i < end;
    const uint32_t high = valid ? (KeyAt(x, i) >> shift) : 0u;
    const bool gt = valid && high > prefix;
    const bool eq = valid && high == prefix;
    const uint32_t eq_mask = __ballot_sync(0xffffffffu, eq);
    if (lane == 0) warp_eq[warp] = __popc(eq_mask);
    __syncthreads();
    int64_t eq_before = eq_seen + __popc(eq_mask & lanes_below);
    int64_t eq_total = 0;
    for (int w = 0; w < kWarps; ++w) {
      if (w < warp) eq_before += warp_eq[w];
      eq_total += warp_eq[w];
    }
    const bool sel = gt || (eq && eq_before < budget);
    const uint32_t sel_mask = __ballot_sync(0xffffffffu, sel);
    if (lane == 0) warp_sel[warp] = __popc(sel_mask);
    __syncthreads();
    int64_t sel_before = __popc(sel_mask & lanes_below);
    int64_t sel_total = 0;
    for (int w = 0; w < kWarps; ++w) {
      if (w < warp) sel_before += warp_sel[w];
      sel_total += warp_sel[w];
    }
    if (sel) out[out_pos + sel_before] = static_cast<uint32_t>(i);
    __syncthreads();  // warp_* are rewritten by the next round.
    eq_seen += eq_total;
    out_pos += sel_total;
  }
}

__global__ void IotaKernel(int64_t d, uint32_t* out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < d; i += stride) {
    out[i] = static_cast<uint32_t>(i);
  }
}

int GridFor(int64_t n) {
  int64_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks > 4096) blocks = 4096;
  return blocks < 1 ? 1 : static_cast<int>(blocks);
}

// Scratch for one selection, carved out of one allocation.
struct Workspace {
  void* base = nullptr;
  SelectState* state = nullptr;
  uint32_t* hist = nullptr;  // kLevels * kMaxBins
  uint32_t* tile_gt = nullptr;
  uint32_t* tile_eq = nullptr;
  int64_t* tile_offset = nullptr;
  int64_t* tile_ties = nullptr;
  int64_t* total = nullptr;
};

cudaError_t AllocWorkspace(int64_t tiles, cudaStream_t s, Workspace* ws) {
  const size_t bytes = 64 + sizeof(uint32_t) * kLevels * kMaxBins +
                       (2 * sizeof(uint32_t) + 2 * sizeof(int64_t)) * tiles +
                       64;
  cudaError_t err = cudaMallocAsync(&ws->base, bytes, s);
  if (err != cudaSuccess) return err;
  char* p = static_cast<char*>(ws->base);
  ws->state = reinterpret_cast<SelectState*>(p);
  ws->total = reinterpret_cast<int64_t*>(p + 32);
  p += 64;
  ws->tile_offset = reinterpret_cast<int64_t*>(p);
  p += sizeof(int64_t) * tiles;
  ws->tile_ties = reinterpret_cast<int64_t*>(p);
  p += sizeof(int64_t) * tiles;
  ws->hist = reinterpret_cast<uint32_t*>(p);
  p += sizeof(uint32_t) * kLevels * kMaxBins;
  ws->tile_gt = reinterpret_cast<uint32_t*>(p);
  p += sizeof(uint32_t) * tiles;
  ws->tile_eq = reinterpret_cast<uint32_t*>(p);
  err = cudaMemsetAsync(ws->hist, 0, sizeof(uint32_t) * kLevels * kMaxBins, s);
  if (err != cudaSuccess) {
    cudaFreeAsync(ws->base, s);
    ws->base = nullptr;
  }
  return err;
}

// Counts per tile and scans; leaves the total in ws->total (device).
cudaError_t CountAndScan(const float* x, int64_t d, int64_t tiles,
                         const Workspace& ws, cudaStream_t s) {
  TileCountKernel<<<static_cast<unsigned>(tiles), kThreads, 0, s>>>(
      x, d, ws.state, ws.tile_gt, ws.tile_eq);
  TileScanKernel<<<1, 1, 0, s>>>(tiles, ws.state, ws.tile_gt, ws.tile_eq,
                                 ws.tile_offset, ws.tile_ties, ws.total);
  return cudaGetLastError();
}

// Key >= `key`: every equal entry is "taken" (need = all).
cudaError_t ThresholdPass(const float* x, int64_t d, uint32_t key, int64_t cap,
                          uint32_t* indices, int64_t* count, cudaStream_t s) {
  *count = 0;
  if (d <= 0) return cudaSuccess;
  const int64_t tiles = (d + kTile - 1) / kTile;
  Workspace ws;
  cudaError_t err = AllocWorkspace(tiles, s, &ws);
  if (err != cudaSuccess) return err;
  InitStateKernel<<<1, 1, 0, s>>>(ws.state, key, 0, 1, kAllTies);
  err = CountAndScan(x, d, tiles, ws, s);
  if (err == cudaSuccess) {
    err = cudaMemcpyAsync(count, ws.total, sizeof(int64_t),
                          cudaMemcpyDeviceToHost, s);
  }
  if (err == cudaSuccess) err = cudaStreamSynchronize(s);
  if (err == cudaSuccess && indices != nullptr && *count <= cap) {
    TileWriteKernel<<<static_cast<unsigned>(tiles), kThreads, 0, s>>>(
        x, d, ws.state, ws.tile_offset, ws.tile_ties, indices);
    err = cudaGetLastError();
  }
  cudaError_t free_err = cudaFreeAsync(ws.base, s);
  return err != cudaSuccess ? err : free_err;
}

}  // namespace

int TopK(const float* x, int64_t d, int64_t k, uint32_t* indices,
         void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (k <= 0) return cudaSuccess;
  if (k >= d) {
    IotaKernel<<<GridFor(d), kThreads, 0, s>>>(d, indices);
    return static_cast<int>(cudaGetLastError());
  }
  const int64_t tiles = (d + kTile - 1) / kTile;
  Workspace ws;
  cudaError_t err = AllocWorkspace(tiles, s, &ws);
  if (err != cudaSuccess) return static_cast<int>(err);
  InitStateKernel<<<1, 1, 0, s>>>(ws.state, 0u, 20, 0, k);
  for (int level = 0; level < kLevels; ++level) {
    uint32_t* hist = ws.hist + level * kMaxBins;
    HistogramKernel<<<GridFor(d), kThreads, 0, s>>>(x, d, level, ws.state,
                                                    hist);
    PickKernel<<<1, 1, 0, s>>>(level, hist, ws.state);
  }
  err = CountAndScan(x, d, tiles, ws, s);
  if (err == cudaSuccess) {
    TileWriteKernel<<<static_cast<unsigned>(tiles), kThreads, 0, s>>>(
        x, d, ws.state, ws.tile_offset, ws.tile_ties, indices);
    err = cudaGetLastError();
  }
  cudaError_t free_err = cudaFreeAsync(ws.base, s);
  return static_cast<int>(err != cudaSuccess ? err : free_err);
}

int SelectAtLeast(const float* x, int64_t d, uint32_t key, int64_t cap,
                  uint32_t* indices, int64_t* count, void* stream) {
  return static_cast<int>(ThresholdPass(x, d, key, cap, indices, count,
                                        static_cast<cudaStream_t>(stream)));
}

int CountAtLeast(const float* x, int64_t d, uint32_t key, int64_t* count,
                 void* stream) {
  return static_cast<int>(ThresholdPass(x, d, key, 0, nullptr, count,
                                        static_cast<cudaStream_t>(stream)));
}

const char* CudaErrorString(int error) {
  return cudaGetErrorString(static_cast<cudaError_t>(error));
}

}  // namespace cuda
}  // namespace kernels
}  // namespace terse
