// Sampled-threshold top-k in one cooperative launch (see topk_filter_cuda.h).
//
// Phases of FilterTopKKernel, separated by grid-wide barriers (grid.sync):
//   1. sample: 2^16 keys at hashed positions into a level-0 histogram;
//      every block then picks the same threshold t from it.
//   2. filter: tile by tile (4,096 keys), the entries with key >= t go to
//      the candidate buffer in index order within the tile, at an offset
//      reserved with one atomic per tile (the tile's segment); their level-0
//      histogram is counted on the way. This is the one full read of x. Each
//      block copies its next tile into shared memory (cp.async) while it
//      filters the current one, so the copies keep DRAM busy without holding
//      registers.
//   3. radix levels 0-2 (11, 10, 10 bits, as topk.cc) over the candidates
//      (or over x, on the fallback): a histogram per level, then every block
//      picks the same bin from it, so no block has to publish a choice.
//   4. output: each block owns a contiguous run of tiles, whose segments it
//      lays end to end in a shared table; it counts its "greater" and
//      "equal" entries, and after a barrier sums the counts of the blocks
//      before it, hands the tie budget out in index order, and writes its
//      entries in index order (a block scan per kThreads * kItems entries).
// Every decision between phases (fast path or fallback, a level that
// settles the selection) is read from the same global data by every block,
// so all blocks take the same branch and meet at the same barriers. Loads
// of the small phases are batched (kItems a thread before any is used): a
// chain of dependent L2 round trips, not bandwidth, is what bounds them.
#include <cooperative_groups.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "compressors/kernels/topk_cuda_common.h"
#include "compressors/kernels/topk_filter_cuda.h"

namespace terse {
namespace kernels {
namespace cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kRounds = 16;  // Keys per lane and tile in the filter.
constexpr int64_t kWarpSpan = 32 * kRounds;
constexpr int64_t kTile = kWarps * kWarpSpan;  // 4,096 keys, 16 KiB staged.
constexpr int kItems = 8;    // Entries a thread loads at once in phases 3, 4.
constexpr int kBins = 2048;  // Level 0: key bits 30..20.
constexpr int kLevelBins = 1024;  // Levels 1, 2: 10 bits each.
constexpr int kSamples = 1 << 16;
// Blocks per SM, at most: two staged tiles each keep DRAM busy, and few
// blocks keep the grid's barriers cheap.
constexpr int kBlocksPerSm = 4;
// Phase 4's shared table (the staging buffers, reused) holds this many tiles
// of a block: the host refuses grids that would give a block more.
constexpr int64_t kMaxTilesPerBlock = kTile;
constexpr int64_t kMinD = int64_t{1} << 18;
constexpr int64_t kMaxKDivisor = 32;  // k <= d / 32.
constexpr int64_t kCapDivisor = 8;    // Room for d / 8 candidates.
// The sample's threshold aims at 1.25 k candidates (plus a few samples):
// at 2^16 samples and k = d / 100 the count's spread is about 4%, so fewer
// than k candidates takes a six-sigma miss.
constexpr double kSampleMargin = 1.25;
constexpr uint32_t kSampleSlack = 16;
constexpr uint64_t kLow = 0xffffffffull;

// Histograms in the zeroed header: the sample's, the candidates' level 0,
// levels 1 and 2, and level 0 over x (the fallback's).
enum Histogram { kSampleHist, kCandHist, kLevel1Hist, kLevel2Hist, kXHist };
constexpr int kHistograms = 5;
constexpr size_t kZeroedBytes = 16 + sizeof(uint32_t) * kHistograms * kBins;

struct Params {
  const float* x;
  int64_t d;
  int64_t k;
  int64_t tiles;
  int64_t cap;
  uint32_t sample_need;
  uint32_t* cand_count;    // Zeroed.
  uint32_t* hist;          // kHistograms * kBins, zeroed.
  uint64_t* block_counts;  // gridDim.x: (greater << 32) | equal.
  uint32_t* seg_start;     // tiles
  uint32_t* seg_count;     // tiles
  uint32_t* cand_idx;      // cap
  uint32_t* cand_key;      // cap
  uint32_t* out;           // k
  FilterTopKProbe* probe;  // Device memory or null.
};

__device__ void ZeroShared(uint32_t* sh, int bins) {
  __syncthreads();  // Earlier readers of sh are done.
  for (int b = threadIdx.x; b < bins; b += kThreads) sh[b] = 0;
  __syncthreads();
}

__device__ void FlushShared(const uint32_t* sh, int bins, uint32_t* global) {
  __syncthreads();
  for (int b = threadIdx.x; b < bins; b += kThreads) {
    if (sh[b] != 0) atomicAdd(&global[b], sh[b]);
  }
}

// A 32-bit mix (lowbias32): sample j's position is hash(j) * d / 2^32.
__device__ __forceinline__ uint32_t Hash(uint32_t v) {
  v ^= v >> 16;
  v *= 0x7feb352du;
  v ^= v >> 15;
  v *= 0x846ca68bu;
  v ^= v >> 16;
  return v;
}

// Block 0's clock at phase `phase`, for the probe.
__device__ __forceinline__ void Mark(const Params& p, int phase) {
  if (p.probe == nullptr || blockIdx.x != 0 || threadIdx.x != 0) return;
  uint64_t ns = 0;
#ifdef __CUDA_ARCH__  // Not under cuda_emu (topk_filter_emu_test).
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
#endif
  p.probe->phase_ns[phase] = ns;
}

// Starts copying tile `tile` of x into `stage` (kTile words, shared) as
// one cp.async batch; entries past d are left as they are.
__device__ __forceinline__ void StageTile(const Params& p, int64_t tile,
                                          uint32_t* stage) {
  const int64_t base = tile * kTile;
#pragma unroll
  for (int r = 0; r < kTile / kThreads; ++r) {
    const int e = r * kThreads + threadIdx.x;
    if (base + e < p.d) __pipeline_memcpy_async(&stage[e], &p.x[base + e], 4);
  }
  __pipeline_commit();
}

// Phase 2 for one staged tile: appends its entries with key >= t (and their
// indices) to the candidate buffer, in index order, and counts them into the
// shared level-0 histogram `sh`. Each warp owns a contiguous span of the
// tile (index order is warp, then round, then lane order). Ends on a
// barrier: `stage` may then be refilled.
__device__ void FilterTile(const Params& p, int64_t tile, uint32_t t,
                           const uint32_t* stage, uint32_t* sh) {
  __shared__ uint32_t warp_counts[kWarps];
  __shared__ uint32_t tile_start;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const uint32_t lanes_below = (1u << lane) - 1u;
  const int64_t tile_base = tile * kTile;
  const int span = warp * static_cast<int>(kWarpSpan);
  const int64_t valid_end = p.d - tile_base;  // Entries e < this are real.
  uint32_t count = 0;
#pragma unroll
  for (int r = 0; r < kRounds; ++r) {
    const int e = span + r * 32 + lane;
    const bool hit = e < valid_end && (stage[e] & 0x7fffffffu) >= t;
    count += __popc(__ballot_sync(kFullMask, hit));
  }
  if (lane == 0) warp_counts[warp] = count;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t total = 0;
    for (int w = 0; w < kWarps; ++w) total += warp_counts[w];
    const uint32_t start = total == 0 ? 0 : atomicAdd(p.cand_count, total);
    p.seg_start[tile] = start;
    p.seg_count[tile] = total;
    tile_start = start;
  }
  __syncthreads();
  if (count != 0) {  // Warp-uniform.
    int64_t at = tile_start;
    for (int w = 0; w < warp; ++w) at += warp_counts[w];
#pragma unroll
    for (int r = 0; r < kRounds; ++r) {
      const int e = span + r * 32 + lane;
      const uint32_t key = e < valid_end ? stage[e] & 0x7fffffffu : 0u;
      const bool hit = e < valid_end && key >= t;
      const uint32_t mask = __ballot_sync(kFullMask, hit);
      if (mask == 0) continue;  // Warp-uniform.
      if (hit) {
        const int64_t slot = at + __popc(mask & lanes_below);
        if (slot < p.cap) {
          p.cand_idx[slot] = static_cast<uint32_t>(tile_base + e);
          p.cand_key[slot] = key;
        }
      }
      WarpAddToBin(sh, hit, key >> 20, lane);
      at += __popc(mask);
    }
  }
  __syncthreads();  // warp_counts, tile_start and the stage are reused.
}

// f(key, valid) for every entry of the selection's source, by the whole
// grid, kItems loads a thread in flight at once, with block-uniform rounds
// (warps stay converged for WarpAddToBin): the candidates' keys on the
// fast path, x's on the fallback.
template <typename F>
__device__ __forceinline__ void ForEachSourceKey(const Params& p, bool fast,
                                                 int64_t n, F f) {
  const int64_t chunk = static_cast<int64_t>(kThreads) * kItems;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * chunk; base < n;
       base += static_cast<int64_t>(gridDim.x) * chunk) {
    uint32_t keys[kItems];
#pragma unroll
    for (int b = 0; b < kItems; ++b) {
      const int64_t j = base + b * kThreads + threadIdx.x;
      keys[b] = 0;
      if (j < n) keys[b] = fast ? __ldcg(&p.cand_key[j]) : KeyAt(p.x, j);
    }
#pragma unroll
    for (int b = 0; b < kItems; ++b) {
      f(keys[b], base + b * kThreads + threadIdx.x < n);
    }
  }
}

// Phase 3 for levels 1 and 2: the histogram of the source entries whose key
// bits above `shift + 10` equal `prefix`, binned by the 10 bits at `shift`.
__device__ void LevelHistogram(const Params& p, bool fast, int64_t n,
                               uint32_t prefix, int shift, uint32_t* sh,
                               uint32_t* global) {
  const int lane = threadIdx.x & 31;
  ZeroShared(sh, kLevelBins);
  ForEachSourceKey(p, fast, n, [&](uint32_t key, bool valid) {
    const bool counted = valid && (key >> (shift + 10)) == prefix;
    WarpAddToBin(sh, counted, (key >> shift) & (kLevelBins - 1), lane);
  });
  FlushShared(sh, kLevelBins, global);
}

// Phase 4's view of a block's entries: its tiles' segments laid end to end.
// Entry e of the block is entry e - first[t] of its tile t, the last tile
// with first[t] <= e (an empty tile shares its first with the next one).
struct BlockEntries {
  const uint32_t* start;  // [tiles]: the segment's first source entry.
  const uint32_t* first;  // [tiles]: entries of the block before the tile.
  int tiles;
  int64_t total;

  __device__ __forceinline__ int64_t SourceOf(int64_t e) const {
    int lo = 0, hi = tiles - 1;  // first[lo] <= e < E: some tile holds e.
    while (lo < hi) {
      const int mid = (lo + hi + 1) >> 1;
      if (first[mid] <= e) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    return static_cast<int64_t>(start[lo]) + (e - first[lo]);
  }
};

// Lays out the segments of tiles [lo, lo + tiles) in `table` (2 * tiles
// words of shared memory). Every thread of the block calls it.
__device__ BlockEntries LayOutBlock(const Params& p, bool fast, int64_t lo,
                                    int tiles, uint32_t* table,
                                    uint64_t* warp_sums) {
  uint32_t* start = table;
  uint32_t* first = table + kMaxTilesPerBlock;
  uint64_t carry = 0;
  for (int c = 0; c < tiles; c += kThreads) {  // Block-uniform.
    const int t = c + threadIdx.x;
    uint32_t begin = 0, count = 0;
    if (t < tiles) {
      if (fast) {
        begin = __ldcg(&p.seg_start[lo + t]);
        count = __ldcg(&p.seg_count[lo + t]);
      } else {
        const int64_t b = (lo + t) * kTile;
        begin = static_cast<uint32_t>(b);
        count = static_cast<uint32_t>(b + kTile < p.d ? kTile : p.d - b);
      }
    }
    uint64_t chunk_total;
    const uint64_t before =
        BlockExclusiveScan<kThreads>(count, warp_sums, &chunk_total);
    if (t < tiles) {
      start[t] = begin;
      first[t] = static_cast<uint32_t>(carry + before);
    }
    carry += chunk_total;
  }
  __syncthreads();
  return {start, first, tiles, static_cast<int64_t>(carry)};
}

__device__ __forceinline__ void EntryAt(const Params& p, bool fast, int64_t j,
                                        uint32_t* key, uint32_t* index) {
  if (fast) {
    *key = __ldcg(&p.cand_key[j]);
    *index = __ldcg(&p.cand_idx[j]);
  } else {
    *key = KeyAt(p.x, j);
    *index = static_cast<uint32_t>(j);
  }
}

__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    FilterTopKKernel(Params p) {
  cg::grid_group grid = cg::this_grid();
  Mark(p, 0);
  __shared__ __align__(16) uint32_t stage[2 * kTile];
  __shared__ uint32_t sh[kBins];
  __shared__ uint64_t warp_sums[kWarps];
  const int lane = threadIdx.x & 31;
  uint32_t* const hist = p.hist;

  // 1. Sample, and the threshold every block derives from it.
  ZeroShared(sh, kBins);
  {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
    for (int64_t base = static_cast<int64_t>(blockIdx.x) * kThreads;
         base < kSamples; base += stride) {
      const int64_t j = base + threadIdx.x;
      const bool valid = j < kSamples;
      uint32_t key = 0;
      if (valid) {
        const uint64_t h = Hash(static_cast<uint32_t>(j) + 0x9e3779b9u);
        key = KeyAt(p.x, static_cast<int64_t>((h * p.d) >> 32));
      }
      WarpAddToBin(sh, valid, key >> 20, lane);
    }
  }
  FlushShared(sh, kBins, hist + kSampleHist * kBins);
  grid.sync();
  const uint32_t t = ChooseBin<kThreads, kBins>(hist + kSampleHist * kBins,
                                                kBins, p.sample_need)
                         .bin
                     << 20;
  Mark(p, 1);

  // 2. Filter: the one full pass over x, the next tile staged meanwhile.
  ZeroShared(sh, kBins);
  {
    int buf = 0;
    int64_t tile = blockIdx.x;
    if (tile < p.tiles) StageTile(p, tile, stage);
    for (; tile < p.tiles; tile += gridDim.x, buf ^= 1) {
      const int64_t next = tile + gridDim.x;
      if (next < p.tiles) {
        StageTile(p, next, stage + (buf ^ 1) * kTile);
        __pipeline_wait_prior(1);  // This thread's copies of `tile` landed.
      } else {
        __pipeline_wait_prior(0);
      }
      __syncthreads();  // Everyone's copies landed.
      FilterTile(p, tile, t, stage + buf * kTile, sh);
    }
  }
  FlushShared(sh, kBins, hist + kCandHist * kBins);
  grid.sync();
  const int64_t c = __ldcg(p.cand_count);
  const bool fast = c >= p.k && c <= p.cap;
  const int64_t n = fast ? c : p.d;
  if (p.probe != nullptr && blockIdx.x == 0 && threadIdx.x == 0) {
    p.probe->took_fallback = fast ? 0 : 1;
  }
  Mark(p, 2);

  // 3. Radix levels over the source.
  if (!fast) {  // Level 0 over x: the filter's histogram saw candidates only.
    ZeroShared(sh, kBins);
    ForEachSourceKey(p, false, n, [&](uint32_t key, bool valid) {
      WarpAddToBin(sh, valid, key >> 20, lane);
    });
    FlushShared(sh, kBins, hist + kXHist * kBins);
    grid.sync();
  }
  BinChoice ch = ChooseBin<kThreads, kBins>(
      hist + (fast ? kCandHist : kXHist) * kBins, kBins, p.k);
  uint32_t prefix = ch.bin;
  int shift = 20;
  int64_t need = p.k - ch.above;
  bool done = ch.count == need;
  for (int level = 1; level <= 2 && !done; ++level) {  // Uniform.
    const int next = level == 1 ? 10 : 0;
    uint32_t* level_hist =
        hist + (level == 1 ? kLevel1Hist : kLevel2Hist) * kBins;
    LevelHistogram(p, fast, n, prefix, next, sh, level_hist);
    grid.sync();
    ch = ChooseBin<kThreads, kBins>(level_hist, kLevelBins, need);
    prefix = (prefix << 10) | ch.bin;
    shift = next;
    need -= ch.above;
    done = ch.count == need;
  }
  // Selected: (key >> shift) > prefix, and the first `need` entries (in
  // index order) with (key >> shift) == prefix.
  Mark(p, 3);

  // 4. Output. Block b owns tiles [lo, lo + tiles); the stage is free.
  const int64_t per_block = (p.tiles + gridDim.x - 1) / gridDim.x;
  const int64_t lo = static_cast<int64_t>(blockIdx.x) * per_block;
  const int64_t hi = lo + per_block < p.tiles ? lo + per_block : p.tiles;
  const BlockEntries entries = LayOutBlock(
      p, fast, lo, hi > lo ? static_cast<int>(hi - lo) : 0, stage, warp_sums);
  const auto classify = [&](uint32_t key) -> uint64_t {
    const uint32_t high = key >> shift;
    return high > prefix ? (uint64_t{1} << 32) : (high == prefix ? 1 : 0);
  };
  uint64_t mine = 0;  // (greater << 32) | equal, this thread's share.
  {
    const int64_t chunk = static_cast<int64_t>(kThreads) * kItems;
    for (int64_t e0 = 0; e0 < entries.total; e0 += chunk) {
      uint32_t keys[kItems];
#pragma unroll
      for (int b = 0; b < kItems; ++b) {
        const int64_t e = e0 + b * kThreads + threadIdx.x;
        uint32_t unused;
        keys[b] = 0;
        if (e < entries.total) {
          EntryAt(p, fast, entries.SourceOf(e), &keys[b], &unused);
        }
      }
#pragma unroll
      for (int b = 0; b < kItems; ++b) {
        if (e0 + b * kThreads + threadIdx.x < entries.total) {
          mine += classify(keys[b]);
        }
      }
    }
  }
  uint64_t block_total;
  BlockExclusiveScan<kThreads>(mine, warp_sums, &block_total);
  if (threadIdx.x == 0) p.block_counts[blockIdx.x] = block_total;
  grid.sync();
  Mark(p, 4);

  uint64_t earlier = 0;  // Sum over the blocks before this one.
  for (int64_t b = threadIdx.x; b < blockIdx.x; b += kThreads) {
    earlier += __ldcg(&p.block_counts[b]);
  }
  uint64_t before_blocks;
  BlockExclusiveScan<kThreads>(earlier, warp_sums, &before_blocks);
  const int64_t gt_before = static_cast<int64_t>(before_blocks >> 32);
  const int64_t eq_before = static_cast<int64_t>(before_blocks & kLow);
  const int64_t eq_mine = static_cast<int64_t>(block_total & kLow);
  const int64_t left = need - eq_before;
  const int64_t budget = left <= 0 ? 0 : (left < eq_mine ? left : eq_mine);
  if ((block_total >> 32) == 0 && budget == 0) {  // Block-uniform.
    Mark(p, 5);
    return;
  }
  uint32_t* const block_out =
      p.out + gt_before + (need < eq_before ? need : eq_before);
  uint64_t seen = 0;  // (greater << 32) | equal, earlier in this block.
  const int64_t chunk = static_cast<int64_t>(kThreads) * kItems;
  for (int64_t e0 = 0; e0 < entries.total; e0 += chunk) {  // Uniform.
    // Thread t holds entries [e0 + t * kItems, + kItems): index order is
    // thread order, then item order.
    const int64_t first = e0 + static_cast<int64_t>(threadIdx.x) * kItems;
    uint32_t keys[kItems], indices[kItems];
    uint64_t flags[kItems];
    uint64_t thread_sum = 0;
#pragma unroll
    for (int b = 0; b < kItems; ++b) {
      keys[b] = 0;
      indices[b] = 0;
      if (first + b < entries.total) {
        EntryAt(p, fast, entries.SourceOf(first + b), &keys[b], &indices[b]);
      }
    }
#pragma unroll
    for (int b = 0; b < kItems; ++b) {
      flags[b] = first + b < entries.total ? classify(keys[b]) : 0;
      thread_sum += flags[b];
    }
    uint64_t chunk_total;
    uint64_t at = seen + BlockExclusiveScan<kThreads>(thread_sum, warp_sums,
                                                      &chunk_total);
#pragma unroll
    for (int b = 0; b < kItems; ++b) {
      const int64_t gt_at = static_cast<int64_t>(at >> 32);
      const int64_t eq_at = static_cast<int64_t>(at & kLow);
      const bool gt = (flags[b] >> 32) != 0;
      const bool eq = (flags[b] & kLow) != 0;
      if (gt || (eq && eq_at < budget)) {
        block_out[gt_at + (budget < eq_at ? budget : eq_at)] = indices[b];
      }
      at += flags[b];
    }
    seen += chunk_total;
  }
  Mark(p, 5);
}

}  // namespace

size_t FilterTopKWorkspaceBytes(int64_t d) {
  const int64_t tiles = (d + kTile - 1) / kTile;
  return kZeroedBytes + sizeof(uint64_t) * tiles +
         2 * sizeof(uint32_t) * tiles +
         2 * sizeof(uint32_t) * (d / kCapDivisor);
}

bool FilterTopKApplies(int64_t d, int64_t k) {
  return d >= kMinD && d < (int64_t{1} << 32) && k >= 1 &&
         k <= d / kMaxKDivisor;
}

cudaError_t TopKByFilter(const float* x, int64_t d, int64_t k,
                         uint32_t* indices, cudaStream_t stream,
                         void* workspace, FilterTopKProbe* probe) {
  if (!FilterTopKApplies(d, k)) return cudaErrorNotSupported;
  int device = 0, cooperative = 0, sms = 0, per_sm = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) {
    err = cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch,
                                 device);
  }
  if (err == cudaSuccess) {
    err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  }
  if (err == cudaSuccess) {
    // Four blocks an SM need 4 x 41 KiB of shared memory: ask for the
    // largest shared-memory carveout, as the occupancy below assumes.
    err = cudaFuncSetAttribute(FilterTopKKernel,
                               cudaFuncAttributePreferredSharedMemoryCarveout,
                               cudaSharedmemCarveoutMaxShared);
  }
  if (err == cudaSuccess) {
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm, FilterTopKKernel, kThreads, 0);
  }
  if (err != cudaSuccess) return err;
  if (cooperative == 0 || sms < 1 || per_sm < 1) return cudaErrorNotSupported;
  const int64_t tiles = (d + kTile - 1) / kTile;
  int64_t blocks = static_cast<int64_t>(sms) *
                   (per_sm < kBlocksPerSm ? per_sm : kBlocksPerSm);
  if (blocks > tiles) blocks = tiles;
  if ((tiles + blocks - 1) / blocks > kMaxTilesPerBlock) {
    return cudaErrorNotSupported;  // A small device and a huge input.
  }

  Params p;
  p.x = x;
  p.d = d;
  p.k = k;
  p.tiles = tiles;
  p.cap = d / kCapDivisor;
  const double share =
      std::ceil(kSampleMargin * kSamples * static_cast<double>(k) /
                static_cast<double>(d));
  p.sample_need = static_cast<uint32_t>(
      share + kSampleSlack < kSamples ? share + kSampleSlack : kSamples);
  // One buffer: the zeroed header (count, histograms), then the block
  // counts (room for one per tile, the most blocks there can be), the tile
  // segments and the candidates.
  const size_t bytes = FilterTopKWorkspaceBytes(d);
  char* base = static_cast<char*>(workspace);
  if (base == nullptr) {
    err = cudaMallocAsync(reinterpret_cast<void**>(&base), bytes, stream);
    if (err != cudaSuccess) return err;
  }
  p.cand_count = reinterpret_cast<uint32_t*>(base);
  p.hist = reinterpret_cast<uint32_t*>(base + 16);
  p.block_counts = reinterpret_cast<uint64_t*>(base + kZeroedBytes);
  p.seg_start = reinterpret_cast<uint32_t*>(p.block_counts + tiles);
  p.seg_count = p.seg_start + tiles;
  p.cand_idx = p.seg_count + tiles;
  p.cand_key = p.cand_idx + p.cap;
  p.out = indices;
  p.probe = probe;
  err = cudaMemsetAsync(base, 0, kZeroedBytes, stream);
  if (err == cudaSuccess) {
    void* args[] = {&p};
    err = cudaLaunchCooperativeKernel(FilterTopKKernel,
                                      dim3(static_cast<unsigned>(blocks)),
                                      dim3(kThreads), args, 0, stream);
  }
  if (workspace != nullptr) return err;
  const cudaError_t free_err = cudaFreeAsync(base, stream);
  return err != cudaSuccess ? err : free_err;
}

}  // namespace cuda
}  // namespace kernels
}  // namespace terse
