// CudaDeviceOps: DeviceOps on a CUDA device (device_ops.h): the selection
// and sparse kernels of compressors/kernels/*_cuda and the element-wise and
// norm kernels of device_ops_cuda.h, enqueued on the stream's cudaStream_t.
// Every device span is checked before a launch (cudaPointerGetAttributes,
// device/cuda_pointer.h): a host pointer or one on another device is
// InvalidArgument naming the operation and argument, never an illegal
// address that poisons the context (where a span's extent is the caller's,
// e.g. Gather's dense input, only its start is checked); CUDA errors are
// Statuses. Nothing here has run on a GPU yet (docs/gpu.md).
#ifndef TERSE_COMPRESSORS_DEVICE_CUDA_DEVICE_OPS_H_
#define TERSE_COMPRESSORS_DEVICE_CUDA_DEVICE_OPS_H_

#include "compressors/device/device_ops.h"

namespace terse {

class CudaDeviceOps : public DeviceOps {
 public:
  explicit CudaDeviceOps(int ordinal) : ordinal_(ordinal) {}

  absl::Status Add(Stream* stream, const float* x, float* y,
                   int64_t n) override;
  absl::Status MomentumAccumulate(Stream* stream, float m, float* u, float* g,
                                  int64_t n) override;
  absl::Status ClearWhereSent(Stream* stream, const float* sent, float* x,
                              int64_t n) override;
  absl::Status Subtract(Stream* stream, const float* x, const float* y,
                        float* out, int64_t n) override;
  absl::Status CastToHalf(Stream* stream, const float* x, uint16_t* out,
                          int64_t n, DataType type) override;
  absl::Status AccumulateHalf(Stream* stream, const uint16_t* h, float* y,
                              int64_t n, DataType type) override;
  absl::Status SquaredNorm(Stream* stream, const float* x, int64_t n,
                           double* out) override;
  absl::Status TopK(Stream* stream, const float* x, int64_t d, int64_t k,
                    uint32_t* indices) override;
  absl::StatusOr<int64_t> SampledTopK(
      Stream* stream, const float* x, int64_t d, int64_t k,
      const kernels::SampledTopKOptions& options, uint32_t* indices) override;
  absl::StatusOr<int64_t> ThresholdSearch(
      Stream* stream, const float* x, int64_t d, int64_t k,
      const kernels::ThresholdSearchOptions& options,
      uint32_t* indices) override;
  absl::StatusOr<int64_t> SelectAtLeast(Stream* stream, const float* x,
                                        int64_t d, uint32_t key, int64_t cap,
                                        uint32_t* indices) override;
  absl::Status Gather(Stream* stream, const float* dense,
                      const uint32_t* indices, int64_t k,
                      float* values) override;
  absl::Status ScatterAdd(Stream* stream, const uint32_t* indices,
                          const float* values, int64_t k,
                          float* dense) override;
  absl::Status CheckSparseIndices(Stream* stream, const uint32_t* indices,
                                  int64_t k, uint64_t d,
                                  uint32_t* bad) override;

  absl::Status MatMul(Stream* stream, const float* m, const float* q, float* p,
                      int64_t rows, int64_t cols, int64_t r) override;
  absl::Status MatMulTransposed(Stream* stream, const float* m, const float* p,
                                float* q, int64_t rows, int64_t cols,
                                int64_t r) override;
  absl::Status AddOuterProduct(Stream* stream, const float* p, const float* q,
                               float* m, int64_t rows, int64_t cols,
                               int64_t r) override;
  absl::Status OrthonormalizeColumns(Stream* stream, float* p, int64_t rows,
                                     int64_t r) override;

  absl::Status SignEncode(Stream* stream, const float* x, int64_t d,
                          int64_t block, float* scales, uint8_t* bits) override;
  absl::Status SignDecodeAdd(Stream* stream, const float* scales,
                             const uint8_t* bits, int64_t d, int64_t block,
                             float* dense) override;

  absl::Status QsgdEncode(Stream* stream, const float* x, int64_t d,
                          int64_t bucket, int levels, const uint64_t* seeds,
                          float* norms, uint8_t* codes) override;
  absl::Status CheckQsgdCodes(Stream* stream, const uint8_t* codes, int64_t d,
                              int levels, uint32_t* bad) override;
  absl::Status QsgdDecodeAdd(Stream* stream, const float* norms,
                             const uint8_t* codes, int64_t d, int64_t bucket,
                             int levels, float* dense) override;

  absl::Status CountSketch(Stream* stream, const float* x, int64_t n,
                           uint64_t seed, double* sketch, int64_t buckets,
                           void* scratch) override;

 private:
  // OK when [ptr, ptr + bytes) is device memory of ordinal_ (or bytes <= 0).
  absl::Status Check(const void* ptr, int64_t bytes, const char* what) const;

  const int ordinal_;
};

}  // namespace terse

#endif  // TERSE_COMPRESSORS_DEVICE_CUDA_DEVICE_OPS_H_
