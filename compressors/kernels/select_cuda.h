// CUDA versions of select.h and randomk.h. x and indices are DEVICE
// pointers; `stream` is a cudaStream_t as void* (nullptr = default stream);
// each function returns a cudaError_t as int (0 = success). They run the
// same control logic as the CPU versions (SampledTopKPlanner,
// ThresholdSearchPlanner) on counts computed on the device, so they
// synchronise the stream and return the number selected in *count (host).
//
//   SampledTopK:     the same indices as kernels::SampledTopK for the same
//                    input and options (bit-identical). indices: room for k.
//   ThresholdSearch: the same bounds (k <= n < 2k, or exactly k after the
//                    fallback); the mean of |x| is reduced in another order
//                    than on the CPU, so a threshold, and then the set, can
//                    differ in rare cases. indices: room for max(k, 2k - 1).
//   RandomKIndices:  the CPU indices (they depend on the seed only), copied
//                    to the device. indices: room for k.
//
// UNCHECKED: these trust that device pointers are device memory (a host
// pointer faults inside the kernel and poisons the CUDA context). Callers
// with pointers from elsewhere use cuda_checked.h, which checks each span
// (cudaPointerGetAttributes) and returns a Status.
#ifndef TERSE_COMPRESSORS_KERNELS_SELECT_CUDA_H_
#define TERSE_COMPRESSORS_KERNELS_SELECT_CUDA_H_

#include <cstdint>

#include "compressors/kernels/select.h"

namespace terse {
namespace kernels {
namespace cuda {

int SampledTopK(const float* x, int64_t d, int64_t k,
                const SampledTopKOptions& options, uint32_t* indices,
                int64_t* count, void* stream);

int ThresholdSearch(const float* x, int64_t d, int64_t k,
                    const ThresholdSearchOptions& options, uint32_t* indices,
                    int64_t* count, void* stream);

int RandomKIndices(uint64_t seed, int64_t d, int64_t k, uint32_t* indices,
                   void* stream);

}  // namespace cuda
}  // namespace kernels
}  // namespace terse

#endif  // TERSE_COMPRESSORS_KERNELS_SELECT_CUDA_H_
