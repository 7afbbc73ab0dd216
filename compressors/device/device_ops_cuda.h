// The CUDA kernels behind CudaDeviceOps (cuda_device_ops.h) that
// compressors/kernels does not have: element-wise add, fp16/bf16 casts, a
// squared norm reduced on the device, and PowerSGD's products and
// orthonormalisation (device_ops_cuda.cu), EF-signSGD's and QSGD's encode,
// decode and code check (dense_codecs_cuda.cu), and the count sketch
// (count_sketch_cuda.cu). Declared in plain C++ so that host code needs no
// CUDA headers.
//
// Pointers are DEVICE pointers; `stream` is a cudaStream_t as void*. Each
// function makes `device` current, only enqueues work, and returns the
// launch error as a Status (Internal, with the runtime's text;
// FailedPrecondition when the device cannot be made current).
// UNCHECKED: pointers must be device memory (the caller's allocations).
#ifndef TERSE_COMPRESSORS_DEVICE_DEVICE_OPS_CUDA_H_
#define TERSE_COMPRESSORS_DEVICE_DEVICE_OPS_CUDA_H_

#include <cstdint>

#include "absl/status/status.h"

namespace terse {
namespace device_ops_cuda {

// y[i] += x[i].
absl::Status Add(int device, void* stream, const float* x, float* y, int64_t n);
// out[i] = x[i] - y[i].
absl::Status Subtract(int device, void* stream, const float* x, const float* y,
                      float* out, int64_t n);
absl::Status MomentumAccumulate(int device, void* stream, float m, float* u,
                                float* g, int64_t n);
absl::Status ClearWhereSent(int device, void* stream, const float* sent,
                            float* x, int64_t n);
// out[i] = half(x[i]) (bf16 when `bf16`), round to nearest even.
absl::Status CastToHalf(int device, void* stream, const float* x, uint16_t* out,
                        int64_t n, bool bf16);
// y[i] += float(h[i]).
absl::Status AccumulateHalf(int device, void* stream, const uint16_t* h,
                            float* y, int64_t n, bool bf16);
// *out = sum x[i]^2 in double (a tree over blocks; *out is zeroed first).
absl::Status SquaredNorm(int device, void* stream, const float* x, int64_t n,
                         double* out);
// *bad = 0 when indices[0..k) ascend strictly and stay below d, else 1.
absl::Status CheckSparseIndices(int device, void* stream,
                                const uint32_t* indices, int64_t k, uint64_t d,
                                uint32_t* bad);

// EF-signSGD's encode and decode (DeviceOps::SignEncode / SignDecodeAdd).
// The scales are sums in kernels::FixedOrderSum's order (one warp per block
// of at most kFixedSumChunk elements, one thread block per longer block),
// bitwise equal to the CPU compressor's.
absl::Status SignEncode(int device, void* stream, const float* x, int64_t d,
                        int64_t block, float* scales, uint8_t* bits);
absl::Status SignDecodeAdd(int device, void* stream, const float* scales,
                           const uint8_t* bits, int64_t d, int64_t block,
                           float* dense);

// QSGD's encode (a warp or a thread block per norm bucket as for
// SignEncode, the norm in kernels::FixedOrderSum's order, the elements
// rounded by the bucket's threads in parallel; codes OR-ed in with 32-bit
// atomics, so `codes` is zeroed and word aligned) and decode (one thread per
// element); DeviceOps::QsgdEncode / QsgdDecodeAdd.
absl::Status QsgdEncode(int device, void* stream, const float* x, int64_t d,
                        int64_t bucket, int levels, const uint64_t* seeds,
                        float* norms, uint8_t* codes);
absl::Status QsgdDecodeAdd(int device, void* stream, const float* norms,
                           const uint8_t* codes, int64_t d, int64_t bucket,
                           int levels, float* dense);
// DeviceOps::CheckQsgdCodes: *bad zeroed on the stream, then one thread per
// element ORs 1 into it where a level exceeds `levels`.
absl::Status CheckQsgdCodes(int device, void* stream, const uint8_t* codes,
                            int64_t d, int levels, uint32_t* bad);

// PowerSGD's products (DeviceOps::MatMul and friends), row-major; one
// thread per output element, summing in float in index order.
absl::Status MatMul(int device, void* stream, const float* m, const float* q,
                    float* p, int64_t rows, int64_t cols, int64_t r);
absl::Status MatMulTransposed(int device, void* stream, const float* m,
                              const float* p, float* q, int64_t rows,
                              int64_t cols, int64_t r);
absl::Status AddOuterProduct(int device, void* stream, const float* p,
                             const float* q, float* m, int64_t rows,
                             int64_t cols, int64_t r);
// Modified Gram-Schmidt on the r columns of the rows x r row-major p, in
// place, as compressors/powersgd_plan.h's OrthonormalizeColumns: a double
// copy of p (stream-ordered scratch, cudaMallocAsync) orthonormalised by
// one block whose dot products and norms are tree sums in double, columns
// that vanish or are not finite zeroed, then rounded back to float.
absl::Status OrthonormalizeColumns(int device, void* stream, float* p,
                                   int64_t rows, int64_t r);

// kernels::AddCountSketch into `buckets` doubles (DeviceOps::CountSketch),
// bitwise the CPU's: the largest finite magnitude (a warp max, atomicMax),
// then each index's fixed-point term added to its bucket's int64 sum
// (shared memory per block for up to 1024 buckets, then one global atomic
// per nonzero bucket and block; global atomics beyond), then each bucket
// converted and added into `sketch`: O(n + buckets * blocks) work, exact
// integer sums, so the order of the atomics does not matter. The scale
// comes from the first pass on the device: nothing waits for the host.
// `scratch`: CountSketchScratchBytes(buckets) bytes of device memory, 8-byte
// aligned, that the call zeroes and uses in stream order (it may be reused
// by the next call on the same stream; not by one on another stream
// before this one has run).
absl::Status CountSketch(int device, void* stream, const float* x, int64_t n,
                         uint64_t seed, double* sketch, int64_t buckets,
                         void* scratch);
// The int64 sums, a 32-bit word of non-finite kinds per bucket, the largest
// magnitude's bits, padded to 8 bytes.
constexpr int64_t CountSketchScratchBytes(int64_t buckets) {
  return 12 * buckets + 8;
}

}  // namespace device_ops_cuda
}  // namespace terse

#endif  // TERSE_COMPRESSORS_DEVICE_DEVICE_OPS_CUDA_H_
