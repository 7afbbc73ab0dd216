// CUDA versions of the selection kernels (topk.h, select.h), declared in
// plain C++ so that nvcc-compiled and host code share them.
//
// Pointers named x / indices are DEVICE pointers; `stream` is a
// cudaStream_t passed as void* (nullptr = the default stream). Each function
// returns a cudaError_t as int (0 = success); CudaErrorString names it.
// Scratch memory comes from cudaMallocAsync on the stream and is freed on it.
//
// TopK gives exactly the CPU TopK result (same keys, same ties: the lowest
// indices among equal magnitudes, output ascending) and is asynchronous: it
// only enqueues work on the stream. Inputs of 2^18 entries and more with k <= d / 32
// take the sampled-threshold path (topk_filter_cuda.h: one cooperative launch,
// one full pass over x); the rest, the multi-pass radix select of
// topk_cuda.cu. SelectAtLeast and CountAtLeast
// synchronise the stream because they return a count to the host.
//
// UNCHECKED: these trust that device pointers are device memory (a host
// pointer faults inside the kernel and poisons the CUDA context). Callers
// with pointers from elsewhere use cuda_checked.h, which checks each span
// (cudaPointerGetAttributes) and returns a Status.
#ifndef TERSE_COMPRESSORS_KERNELS_TOPK_CUDA_H_
#define TERSE_COMPRESSORS_KERNELS_TOPK_CUDA_H_

#include <cstdint>

namespace terse {
namespace kernels {
namespace cuda {

// See kernels::TopK. Preconditions: 0 <= k <= d < 2^32; `indices` holds k.
int TopK(const float* x, int64_t d, int64_t k, uint32_t* indices, void* stream);

// See kernels::SelectAtLeast: writes the ascending i with key(x[i]) >= key
// into `indices` (capacity `cap`) when at most `cap` qualify; *count (host)
// receives the exact number that qualify either way.
int SelectAtLeast(const float* x, int64_t d, uint32_t key, int64_t cap,
                  uint32_t* indices, int64_t* count, void* stream);

// *count (host) = number of i with key(x[i]) >= key.
int CountAtLeast(const float* x, int64_t d, uint32_t key, int64_t* count,
                 void* stream);

// The runtime's text for an error code returned above.
const char* CudaErrorString(int error);

}  // namespace cuda
}  // namespace kernels
}  // namespace terse

#endif  // TERSE_COMPRESSORS_KERNELS_TOPK_CUDA_H_
