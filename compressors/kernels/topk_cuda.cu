// CUDA radix select for the inputs the sampled-threshold path
// (topk_filter_cuda.cu) does not take, the same algorithm as topk.cc: three
// histogram levels (11, 10, 10 bits of the 31-bit magnitude key) with the bin
// choice made on the device, then a tiled collection pass that keeps index
// order: per-tile counts, a scan that hands the tie budget to tiles in index
// order, and a per-tile ordered write (warp ballots + a block scan).
//
// Six kernels a call: histogram level 0, candidate compaction, levels 1
// and 2, tile count, tile write. Each reads x once, except that levels 1 and
// 2 read the compacted candidates instead when level 0's bin is small
// (kCandidateDivisor), and kernels after a level that settles the selection
// return at once: 4 passes over x in the common case, 5 at most. The steps
// between passes (bin pick, tile scan) are small and serial in nature, so
// the last block of the pass before runs them, block wide, instead of a
// launch of their own (LastBlockDone).
#include <cuda_runtime.h>

#include <cstdint>

#include "compressors/kernels/topk_cuda.h"
#include "compressors/kernels/topk_cuda_common.h"
#include "compressors/kernels/topk_filter_cuda.h"

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
// Histogram grid: enough blocks to fill every SM (kHistBlocksPerSm blocks of
// kThreads each), but no more than gives each thread kHistMinPerThread
// float4s: every block zeroes and flushes a full shared histogram, which
// costs more than its share of the input when blocks are plentiful.
constexpr int kHistBlocksPerSm = 8;
constexpr int64_t kHistMinPerThread = 4;
// The last block of TileCountKernel scans the tiles, kScanItems consecutive
// tiles per thread and round.
constexpr int kScanItems = 8;
// Levels 1 and 2 only count the keys in level 0's chosen bin. When that bin
// holds at most d / kCandidateDivisor entries, one pass copies their keys
// (4 bytes each) out of x and levels 1 and 2 read those instead of x: a
// pass over x in place of two. (topk.cc has the same cut-off.)
constexpr int64_t kCandidateDivisor = 8;

struct SelectState {
  uint32_t prefix;  // (key >> shift) == prefix: "equal"; > prefix: taken.
  int32_t shift;
  int32_t done;       // 1: no further histogram level is needed.
  int32_t compacted;  // 1: levels 1 and 2 read the candidate keys, not x.
  int64_t need;       // How many of the equal entries to take.
};

__host__ __device__ inline int LevelShift(int level) {
  return level == 0 ? 20 : (level == 1 ? 10 : 0);
}
__host__ __device__ inline int LevelBits(int level) {
  return level == 0 ? 11 : 10;
}

__global__ void InitStateKernel(SelectState* st, uint32_t prefix, int shift,
                                int done, int64_t need) {
  st->prefix = prefix;
  st->shift = shift;
  st->done = done;
  st->need = need;
}

// Called by every thread of a block, after its last global write or atomic
// of the kernel: true in exactly one block, the last of the grid to arrive,
// which then sees every block's writes (read them through L2: __ldcg). This
// folds the serial step after a pass (bin pick, tile scan) into the pass's
// kernel instead of a kernel launch of its own. `ticket` starts at 0.
__device__ __forceinline__ bool LastBlockDone(uint32_t* ticket) {
  __shared__ bool is_last;
  __threadfence();  // This thread's writes before the ticket, device-wide.
  __syncthreads();
  if (threadIdx.x == 0) is_last = atomicAdd(ticket, 1u) == gridDim.x - 1;
  __syncthreads();
  __threadfence();  // Reads after the ticket.
  return is_last;
}

// Called by every thread of a kThreads block: chooses the bin holding the
// need-th largest key (ChooseBin) and narrows *st to it.
__device__ __forceinline__ void PickBin(int level, int64_t need,
                                        const uint32_t* hist, SelectState* st) {
  const BinChoice c =
      ChooseBin<kThreads, kMaxBins>(hist, 1 << LevelBits(level), need);
  if (threadIdx.x == 0) {
    // need - above >= 1 (above < need): the next level's need stays >= 1.
    const int64_t left = need - c.above;
    st->prefix = (st->prefix << LevelBits(level)) | c.bin;
    st->shift = LevelShift(level);
    st->need = left;
    if (c.count == left) st->done = 1;
  }
}

// Calls f(key, valid) for every entry of x, by the whole grid, in rounds
// with a block-uniform bound, so that warps stay converged for warp-wide
// intrinsics in f (invalid lanes pass valid = false). Reads x as float4
// where it is 16-byte aligned; the (at most 3 + 3) unaligned head and tail
// entries go to block 0's first threads through fh(key), which may not use
// warp-wide intrinsics.
template <typename F, typename FH>
__device__ __forceinline__ void ForEachKey(const float* x, int64_t d, F f,
                                           FH fh) {
  // Entries before the first 16-byte boundary, whole float4s, the rest.
  const int64_t misalign =
      static_cast<int64_t>((16 - (reinterpret_cast<uintptr_t>(x) & 15)) & 15) /
      4;
  const int64_t head = misalign < d ? misalign : d;
  const int64_t n4 = (d - head) / 4;
  const int64_t rest = head + 4 * n4;
  const float4* x4 = reinterpret_cast<const float4*>(x + head);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.x; base < n4;
       base += stride) {
    const int64_t j = base + threadIdx.x;
    const bool valid = j < n4;
    const float4 v = valid ? x4[j] : make_float4(0.f, 0.f, 0.f, 0.f);
    f(KeyOf(v.x), valid);
    f(KeyOf(v.y), valid);
    f(KeyOf(v.z), valid);
    f(KeyOf(v.w), valid);
  }
  if (blockIdx.x == 0) {
    // Head entries are [0, head), tail entries [rest, d): at most 6 threads.
    const int64_t t = threadIdx.x;
    const int64_t i = t < head ? t : rest + (t - head);
    if (i < d && (t < head || i >= rest)) fh(KeyAt(x, i));
  }
}

// Level `level` histogram of the keys whose higher bits equal st->prefix (all
// keys at level 0), added into `hist`; the grid's last block then picks the
// bin (PickBin). `k` is the need at level 0, where *st is still all zero.
// Level 0's pick also sets st->compacted: whether its bin holds at most
// `cand_cap` entries. If so, CompactKernel gathers their keys into `cand`
// (*cand_count of them) and levels 1 and 2 count those instead of x: the
// same keys, since level 0's bin holds every key a later level counts.
__global__ void __launch_bounds__(kThreads)
    HistogramKernel(const float* x, int64_t d, int level, int64_t k,
                    SelectState* st, uint32_t* hist, uint32_t* ticket,
                    const uint32_t* cand, const uint32_t* cand_count,
                    int64_t cand_cap) {
  __shared__ uint32_t local[kMaxBins];
  if (st->done) return;  // Uniform across the grid.
  const int bins = 1 << LevelBits(level);
  const int shift = LevelShift(level);
  const int high = shift + LevelBits(level);
  const uint32_t mask = static_cast<uint32_t>(bins - 1);
  const uint32_t prefix = st->prefix;
  const int lane = threadIdx.x & 31;
  for (int b = threadIdx.x; b < bins; b += blockDim.x) local[b] = 0;
  __syncthreads();
  const auto counted = [&](uint32_t key) {
    return level == 0 || (key >> high) == prefix;
  };
  if (level > 0 && st->compacted) {  // Uniform across the grid.
    const int64_t n = *cand_count;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.x; base < n;
         base += stride) {  // Block-uniform bound, as ForEachKey.
      const int64_t j = base + threadIdx.x;
      const bool valid = j < n;
      const uint32_t key = valid ? cand[j] : 0u;
      WarpAddToBin(local, valid && counted(key), (key >> shift) & mask, lane);
    }
  } else {
    ForEachKey(
        x, d,
        [&](uint32_t key, bool valid) {
          WarpAddToBin(local, valid && counted(key), (key >> shift) & mask,
                       lane);
        },
        [&](uint32_t key) {
          if (counted(key)) atomicAdd(&local[(key >> shift) & mask], 1u);
        });
  }
  __syncthreads();
  for (int b = threadIdx.x; b < bins; b += blockDim.x) {
    if (local[b] != 0) atomicAdd(&hist[b], local[b]);
  }
  // Every block read st (done, prefix, compacted) at its start, before its
  // ticket: the last block may rewrite it.
  if (LastBlockDone(ticket)) {
    PickBin(level, level == 0 ? k : st->need, hist, st);
    if (level == 0 && threadIdx.x == 0) {
      // PickBin's thread 0 wrote st->prefix: level 0's chosen bin.
      st->compacted =
          static_cast<int64_t>(__ldcg(&hist[st->prefix])) <= cand_cap;
    }
  }
}

// After level 0, unless it settled the selection or its bin is too large
// (st->compacted == 0): appends the key of every entry in level 0's bin to
// `cand`, in no particular order (later levels only count them). Each warp
// gathers its hits in a shared buffer and reserves room in `cand` for a
// whole buffer at once: one atomic on *cand_count per hit or per warp and
// round would serialise on that one address (most warps have a hit in
// most rounds).
constexpr int kWarpBuffer = 512;  // Keys; a multiple of 32, at least 64.
__global__ void __launch_bounds__(kThreads)
    CompactKernel(const float* x, int64_t d, const SelectState* st,
                  uint32_t* cand, uint32_t* cand_count) {
  __shared__ uint32_t buffers[kWarps][kWarpBuffer];
  if (st->done || !st->compacted) return;  // Uniform across the grid.
  const uint32_t prefix = st->prefix;
  const int shift = st->shift;  // 20: level 0's.
  const int lane = threadIdx.x & 31;
  const uint32_t lanes_below = (1u << lane) - 1u;
  uint32_t* buffer = buffers[threadIdx.x >> 5];
  int held = 0;  // Keys in `buffer`; the same in every lane of the warp.
  // The whole warp: moves the buffer to `cand`.
  const auto flush = [&]() {
    uint32_t slot = 0;
    if (lane == 0) slot = atomicAdd(cand_count, static_cast<uint32_t>(held));
    slot = __shfl_sync(kFullMask, slot, 0);
    __syncwarp();  // The lanes' buffer writes, before the reads.
    for (int j = lane; j < held; j += 32) cand[slot + j] = buffer[j];
    __syncwarp();  // The reads, before the buffer is refilled.
    held = 0;
  };
  ForEachKey(
      x, d,
      [&](uint32_t key, bool valid) {
        const bool hit = valid && (key >> shift) == prefix;
        const uint32_t hits = __ballot_sync(kFullMask, hit);
        if (hits == 0) return;  // Warp-uniform.
        if (held + 32 > kWarpBuffer) flush();
        if (hit) buffer[held + __popc(hits & lanes_below)] = key;
        held += __popc(hits);
      },
      [&](uint32_t key) {  // A few threads of block 0, straight to `cand`.
        if ((key >> shift) == prefix) cand[atomicAdd(cand_count, 1u)] = key;
      });
  if (held > 0) flush();  // Warp-uniform.
}

// Loads this thread's entries of the tile [begin, end): keys[r] is the key of
// x[begin + r * kThreads + threadIdx.x], 0 past `end` (callers test the
// index themselves). Every load is issued before any is used, so each thread
// keeps kPerThread loads in flight: with one load per round the tile
// kernels wait on memory latency rather than bandwidth. Block size kThreads.
constexpr int kPerThread = kTile / kThreads;
__device__ __forceinline__ void LoadTileKeys(const float* x, int64_t begin,
                                             int64_t end,
                                             uint32_t (&keys)[kPerThread]) {
#pragma unroll
  for (int r = 0; r < kPerThread; ++r) {
    const int64_t i = begin + r * kThreads + threadIdx.x;
    keys[r] = i < end ? KeyAt(x, i) : 0u;
  }
}

// Called by every thread of a kThreads block: output offsets and tie budgets
// per tile, and their total into *total. Ties go to tiles in index order, so
// tile t takes
//   ties[t]   = clamp(need - eq_before(t), 0, eq[t]),
//   offset[t] = gt_before(t) + min(need, eq_before(t)),
// with *_before(t) the sums over tiles < t: one exclusive scan of (gt, eq),
// over chunks of kThreads * kScanItems tiles with a running carry. Both
// counts ride in one uint64 (gt high, eq low): each sums to at most d < 2^32,
// so the low half never carries into the high one. tile_gt and tile_eq are
// read through L2 (other blocks wrote them).
__device__ __forceinline__ void ScanTiles(int64_t tiles, int64_t need,
                                          const uint32_t* tile_gt,
                                          const uint32_t* tile_eq,
                                          int64_t* tile_offset,
                                          int64_t* tile_ties, int64_t* total) {
  __shared__ uint64_t warp_sums[kWarps];
  constexpr uint64_t kLow = 0xffffffffull;
  uint64_t carry = 0;  // (gt, eq) sums over the earlier chunks.
  for (int64_t chunk = 0; chunk < tiles;
       chunk += static_cast<int64_t>(kThreads) * kScanItems) {
    const int64_t first =
        chunk + static_cast<int64_t>(threadIdx.x) * kScanItems;
    uint64_t packed[kScanItems];
    uint64_t mine = 0;
#pragma unroll
    for (int j = 0; j < kScanItems; ++j) {
      const int64_t t = first + j;
      packed[j] = t < tiles
                      ? (static_cast<uint64_t>(__ldcg(&tile_gt[t])) << 32) |
                            __ldcg(&tile_eq[t])
                      : 0;
      mine += packed[j];
    }
    uint64_t chunk_sum;
    uint64_t before =
        carry + BlockExclusiveScan<kThreads>(mine, warp_sums, &chunk_sum);
#pragma unroll
    for (int j = 0; j < kScanItems; ++j) {
      const int64_t t = first + j;
      if (t < tiles) {
        const int64_t gt_before = static_cast<int64_t>(before >> 32);
        const int64_t eq_before = static_cast<int64_t>(before & kLow);
        const int64_t eq = static_cast<int64_t>(packed[j] & kLow);
        const int64_t left = need - eq_before;  // No overflow: eq_before >= 0.
        tile_offset[t] = gt_before + (need < eq_before ? need : eq_before);
        tile_ties[t] = left <= 0 ? 0 : (left < eq ? left : eq);
      }
      before += packed[j];
    }
    carry += chunk_sum;
  }
  if (threadIdx.x == 0) {
    const int64_t eq_all = static_cast<int64_t>(carry & kLow);
    *total =
        static_cast<int64_t>(carry >> 32) + (need < eq_all ? need : eq_all);
  }
}

// Counts tile blockIdx.x's "greater" and "equal" entries; the grid's last
// block then scans the counts (ScanTiles). One block per tile.
__global__ void __launch_bounds__(kThreads)
    TileCountKernel(const float* x, int64_t d, int64_t tiles,
                    const SelectState* st, uint32_t* tile_gt, uint32_t* tile_eq,
                    int64_t* tile_offset, int64_t* tile_ties, int64_t* total,
                    uint32_t* ticket) {
  __shared__ uint32_t gt_sum, eq_sum;
  if (threadIdx.x == 0) gt_sum = eq_sum = 0;
  __syncthreads();
  const int shift = st->shift;
  const uint32_t prefix = st->prefix;
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t end = begin + kTile < d ? begin + kTile : d;
  uint32_t keys[kPerThread];
  LoadTileKeys(x, begin, end, keys);
  uint32_t gt = 0, eq = 0;
#pragma unroll
  for (int r = 0; r < kPerThread; ++r) {
    const bool valid = begin + r * kThreads + threadIdx.x < end;
    const uint32_t high = keys[r] >> shift;
    gt += valid && high > prefix;
    eq += valid && high == prefix;
  }
  atomicAdd(&gt_sum, gt);
  atomicAdd(&eq_sum, eq);
  __syncthreads();
  if (threadIdx.x == 0) {
    tile_gt[blockIdx.x] = gt_sum;
    tile_eq[blockIdx.x] = eq_sum;
  }
  if (LastBlockDone(ticket)) {
    // need >= 0; kAllTies for a threshold.
    ScanTiles(tiles, st->need, tile_gt, tile_eq, tile_offset, tile_ties, total);
  }
}

// x[wbase + r * 32 + lane] for r < kPerThread (0 past `end`): a warp's
// contiguous span of 32 * kPerThread keys, each round one coalesced
// 128-byte load of the warp, all issued before any is used.
constexpr int64_t kWarpSpan = 32 * kPerThread;
static_assert(kTile == kWarps * kWarpSpan, "a tile is its warps' spans");
__device__ __forceinline__ void LoadWarpKeys(const float* x, int64_t wbase,
                                             int64_t end,
                                             uint32_t (&keys)[kPerThread]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int r = 0; r < kPerThread; ++r) {
    const int64_t i = wbase + r * 32 + lane;
    keys[r] = i < end ? KeyAt(x, i) : 0u;
  }
}

// Writes tile blockIdx.x's selection in index order from tile_offset: every
// "greater" entry and the first tile_ties "equal" ones. An entry's output
// position is the tile offset plus the selected entries before it in the
// tile, which is gt_before + min(ties, eq_before) (the ties go to the first
// equal entries). Each warp owns a contiguous span of the tile (index order
// is warp order, then round order, then lane order), counts its entries of
// both kinds with ballots, and after ONE barrier (the warps' counts, summed
// over the warps before) writes its span with no further synchronisation,
// skipping rounds without an entry to write: with k = 1% almost all.
__global__ void __launch_bounds__(kThreads)
    TileWriteKernel(const float* x, int64_t d, const SelectState* st,
                    const int64_t* tile_offset, const int64_t* tile_ties,
                    uint32_t* out) {
  // Per warp: (greater count << 16) | equal count. A warp counts at most
  // kWarpSpan < 2^16 of each, and the sum over the other warps of a tile
  // stays below 2^16 too, so the low half never carries.
  static_assert(kTile < (1 << 16), "counts packed in 16 bits");
  __shared__ uint32_t warp_counts[kWarps];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const uint32_t lanes_below = (1u << lane) - 1u;
  const int shift = st->shift;
  const uint32_t prefix = st->prefix;
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t end = begin + kTile < d ? begin + kTile : d;
  const int64_t wbase = begin + warp * kWarpSpan;
  uint32_t keys[kPerThread];
  LoadWarpKeys(x, wbase, end, keys);
  uint32_t gt_count = 0, eq_count = 0;
#pragma unroll
  for (int r = 0; r < kPerThread; ++r) {
    const bool valid = wbase + r * 32 + lane < end;
    const uint32_t high = keys[r] >> shift;
    gt_count += __popc(__ballot_sync(kFullMask, valid && high > prefix));
    eq_count += __popc(__ballot_sync(kFullMask, valid && high == prefix));
  }
  if (lane == 0) warp_counts[warp] = (gt_count << 16) | eq_count;
  __syncthreads();
  uint32_t before = 0;
  for (int w = 0; w < warp; ++w) before += warp_counts[w];
  const int64_t budget = tile_ties[blockIdx.x];
  int64_t gt_seen = before >> 16;  // In the tile, before this warp's round.
  int64_t eq_seen = before & 0xffffu;
  // Warp-uniform, and no barrier follows: a warp with nothing to write
  // leaves.
  if (gt_count == 0 && (eq_count == 0 || eq_seen >= budget)) return;
  uint32_t* tile_out = out + tile_offset[blockIdx.x];
#pragma unroll
  for (int r = 0; r < kPerThread; ++r) {
    const int64_t i = wbase + r * 32 + lane;
    const bool valid = i < end;
    const uint32_t high = keys[r] >> shift;
    const bool gt = valid && high > prefix;
    const bool eq = valid && high == prefix;
    const uint32_t gt_mask = __ballot_sync(kFullMask, gt);
    const uint32_t eq_mask = __ballot_sync(kFullMask, eq);
    if ((gt_mask | eq_mask) == 0) continue;  // Warp-uniform.
    const int64_t gt_before = gt_seen + __popc(gt_mask & lanes_below);
    const int64_t eq_before = eq_seen + __popc(eq_mask & lanes_below);
    if (gt || (eq && eq_before < budget)) {
      tile_out[gt_before + (budget < eq_before ? budget : eq_before)] =
          static_cast<uint32_t>(i);
    }
    gt_seen += __popc(gt_mask);
    eq_seen += __popc(eq_mask);
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

// Blocks for HistogramKernel over d entries (see kHistBlocksPerSm).
int HistogramGrid(int64_t d) {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) !=
          cudaSuccess ||
      sms < 1) {
    sms = 132;  // The launch reports a broken device; any grid works.
  }
  const int64_t per_block = kThreads * 4 * kHistMinPerThread;
  int64_t blocks = (d + per_block - 1) / per_block;
  const int64_t most = static_cast<int64_t>(sms) * kHistBlocksPerSm;
  if (blocks > most) blocks = most;
  return blocks < 1 ? 1 : static_cast<int>(blocks);
}

// Scratch for one selection, carved out of one allocation. The header (state,
// total, tickets) and the histograms start zeroed: TopK's level 0 expects an
// all-zero state, and every ticket starts at 0.
struct Workspace {
  void* base = nullptr;
  SelectState* state = nullptr;
  int64_t* total = nullptr;
  uint32_t* tickets = nullptr;  // kLevels histograms, then TileCountKernel.
  uint32_t* hist = nullptr;     // kLevels * kMaxBins
  int64_t* tile_offset = nullptr;
  int64_t* tile_ties = nullptr;
  uint32_t* tile_gt = nullptr;
  uint32_t* tile_eq = nullptr;
  uint32_t* cand_count = nullptr;  // In the header.
  uint32_t* cand = nullptr;        // cand_cap keys (CompactKernel).
  int64_t cand_cap = 0;
};

constexpr size_t kHeaderBytes = 64;
static_assert(sizeof(SelectState) <= 32, "state fits before total");
static_assert(40 + sizeof(uint32_t) * (kLevels + 2) <= kHeaderBytes,
              "tickets and the candidate count fit in the header");

// `cand_cap`: room for that many candidate keys (0: none).
cudaError_t AllocWorkspace(int64_t tiles, int64_t cand_cap, cudaStream_t s,
                           Workspace* ws) {
  const size_t zeroed = kHeaderBytes + sizeof(uint32_t) * kLevels * kMaxBins;
  const size_t bytes = zeroed +
                       (2 * sizeof(int64_t) + 2 * sizeof(uint32_t)) * tiles +
                       sizeof(uint32_t) * cand_cap;
  cudaError_t err = cudaMallocAsync(&ws->base, bytes, s);
  if (err != cudaSuccess) return err;
  char* p = static_cast<char*>(ws->base);
  ws->state = reinterpret_cast<SelectState*>(p);
  ws->total = reinterpret_cast<int64_t*>(p + 32);
  ws->tickets = reinterpret_cast<uint32_t*>(p + 40);
  ws->cand_count = ws->tickets + kLevels + 1;
  p += kHeaderBytes;
  ws->hist = reinterpret_cast<uint32_t*>(p);  // A multiple of 8 bytes long.
  p += sizeof(uint32_t) * kLevels * kMaxBins;
  ws->tile_offset = reinterpret_cast<int64_t*>(p);
  p += sizeof(int64_t) * tiles;
  ws->tile_ties = reinterpret_cast<int64_t*>(p);
  p += sizeof(int64_t) * tiles;
  ws->tile_gt = reinterpret_cast<uint32_t*>(p);
  p += sizeof(uint32_t) * tiles;
  ws->tile_eq = reinterpret_cast<uint32_t*>(p);
  p += sizeof(uint32_t) * tiles;
  ws->cand = reinterpret_cast<uint32_t*>(p);
  ws->cand_cap = cand_cap;
  err = cudaMemsetAsync(ws->base, 0, zeroed, s);
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
      x, d, tiles, ws.state, ws.tile_gt, ws.tile_eq, ws.tile_offset,
      ws.tile_ties, ws.total, ws.tickets + kLevels);
  return cudaGetLastError();
}

// Key >= `key`: every equal entry is "taken" (need = all).
cudaError_t ThresholdPass(const float* x, int64_t d, uint32_t key, int64_t cap,
                          uint32_t* indices, int64_t* count, cudaStream_t s) {
  *count = 0;
  if (d <= 0) return cudaSuccess;
  const int64_t tiles = (d + kTile - 1) / kTile;
  Workspace ws;
  cudaError_t err = AllocWorkspace(tiles, 0, s, &ws);
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
  if (FilterTopKApplies(d, k)) {  // Large inputs: one pass over x.
    const cudaError_t err = TopKByFilter(x, d, k, indices, s, nullptr, nullptr);
    if (err != cudaErrorNotSupported &&
        err != cudaErrorCooperativeLaunchTooLarge) {
      return static_cast<int>(err);
    }
    // Not taken (or the cooperative launch refused): the multi-pass select.
    // A refused launch leaves its error behind for cudaGetLastError, which
    // the launches below read: clear it.
    cudaGetLastError();
  }
  const int64_t tiles = (d + kTile - 1) / kTile;
  Workspace ws;
  cudaError_t err = AllocWorkspace(tiles, d / kCandidateDivisor, s, &ws);
  if (err != cudaSuccess) return static_cast<int>(err);
  // The state starts zeroed (not done, prefix 0); level 0 takes need = k.
  const int hist_grid = HistogramGrid(d);
  for (int level = 0; level < kLevels; ++level) {
    HistogramKernel<<<hist_grid, kThreads, 0, s>>>(
        x, d, level, k, ws.state, ws.hist + level * kMaxBins,
        ws.tickets + level, ws.cand, ws.cand_count, ws.cand_cap);
    if (level == 0) {
      CompactKernel<<<hist_grid, kThreads, 0, s>>>(x, d, ws.state, ws.cand,
                                                   ws.cand_count);
    }
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
