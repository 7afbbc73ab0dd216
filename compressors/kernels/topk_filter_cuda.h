// The CUDA top-k of large inputs: a sampled threshold, one filtering pass
// over x, and an exact radix select over what passed, in ONE cooperative
// kernel launch. Internal to topk_cuda.cu, which calls it for the sizes it
// applies to and keeps the multi-pass radix select (topk_cuda.cu) for the
// rest; the result is the same either way: exactly kernels::TopK's (the
// lowest indices among equal magnitudes, output ascending).
//
// How (topk_filter_cuda.cu): 2^16 keys sampled at hashed positions give a
// threshold t, the lower edge of the level-0 bin (11 bits of the key) that
// holds the sample's ceil(1.25 * k / d)-th share from the top; one pass over
// x writes every entry with key >= t (about 1.25k-2k of them) with its index
// to a candidate buffer, tile by tile in index order, and counts them in a
// level-0 histogram; three radix levels then run over the candidates only.
// When the sample misleads (fewer than k candidates, or more than the buffer
// holds: heavy ties, adversarial orders) the same launch runs the radix
// select over x itself: slower, never wrong. The branch is taken on the
// device, uniformly by every block, so the call stays asynchronous.
#ifndef TERSE_COMPRESSORS_KERNELS_TOPK_FILTER_CUDA_H_
#define TERSE_COMPRESSORS_KERNELS_TOPK_FILTER_CUDA_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace terse {
namespace kernels {
namespace cuda {

// Whether TopKByFilter takes (d, k): d >= 2^18 and 1 <= k <= d / 32 (the
// candidate buffer holds d / 8 entries).
bool FilterTopKApplies(int64_t d, int64_t k);

// What a call reports to tests and benches (device memory).
struct FilterTopKProbe {
  int32_t took_fallback;  // 1: the select ran over x (the sample misled).
  int32_t unused;
  // %globaltimer (ns) in block 0 at the start, after the sample, the filter,
  // the radix levels and the output counts, and at block 0's end.
  uint64_t phase_ns[6];
};

// Scratch TopKByFilter needs for an input of d entries (any k it takes):
// about d + 16 d / 8192 + 40 KiB bytes.
size_t FilterTopKWorkspaceBytes(int64_t d);

// Writes kernels::TopK(x, d, k) to `indices` (device, k entries), enqueued
// on `stream` and asynchronous. `workspace`: device memory of at least
// FilterTopKWorkspaceBytes(d) bytes, used by the enqueued work only (one
// call at a time per buffer, in stream order), or null: then it comes from
// cudaMallocAsync on the stream and is freed on it. `probe`: null, or where
// the launch reports (FilterTopKProbe).
// Returns cudaErrorNotSupported, having enqueued nothing, when the device
// cannot launch cooperative kernels or FilterTopKApplies is false, and
// cudaErrorCooperativeLaunchTooLarge when the runtime refuses the grid (the
// caller then selects another way: topk_cuda.cu clears that error and runs
// the multi-pass select); any other error comes from the runtime.
cudaError_t TopKByFilter(const float* x, int64_t d, int64_t k,
                         uint32_t* indices, cudaStream_t stream,
                         void* workspace, FilterTopKProbe* probe);

}  // namespace cuda
}  // namespace kernels
}  // namespace terse

#endif  // TERSE_COMPRESSORS_KERNELS_TOPK_FILTER_CUDA_H_
