#include "compressors/device/cuda_device_ops.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "compressors/device/device_ops_cuda.h"
#include "compressors/device/qsgd_bits.h"
#include "compressors/kernels/select_cuda.h"
#include "compressors/kernels/sparse_ops_cuda.h"
#include "compressors/kernels/topk_cuda.h"
#include "device/cuda_pointer.h"

namespace terse {
namespace {

absl::Status FromCuda(int error, const char* what) {
  if (error == 0) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(what, ": ", kernels::cuda::CudaErrorString(error)));
}

absl::Status SetDevice(int ordinal, const char* what) {
  const cudaError_t err = cudaSetDevice(ordinal);
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      what, ": cudaSetDevice(", ordinal, "): ", cudaGetErrorString(err)));
}

bool IsBf16(DataType type) { return type == DataType::kBFloat16; }

absl::Status CheckHalfType(DataType type, const char* op) {
  if (type == DataType::kFloat16 || type == DataType::kBFloat16) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": type ", DataTypeName(type), " is not float16 or bfloat16"));
}

}  // namespace

absl::Status CudaDeviceOps::Check(const void* ptr, int64_t bytes,
                                  const char* what) const {
  if (bytes <= 0) return absl::OkStatus();
  return CheckCudaDeviceSpan(ptr, bytes, ordinal_, what);
}

absl::Status CudaDeviceOps::Add(Stream* stream, const float* x, float* y,
                                int64_t n) {
  TERSE_RETURN_IF_ERROR(Check(x, n * 4, "Add: x"));
  TERSE_RETURN_IF_ERROR(Check(y, n * 4, "Add: y"));
  return device_ops_cuda::Add(ordinal_, stream->native_handle(), x, y, n);
}

absl::Status CudaDeviceOps::MomentumAccumulate(Stream* stream, float m,
                                               float* u, float* g, int64_t n) {
  TERSE_RETURN_IF_ERROR(Check(u, n * 4, "MomentumAccumulate: u"));
  TERSE_RETURN_IF_ERROR(Check(g, n * 4, "MomentumAccumulate: g"));
  return device_ops_cuda::MomentumAccumulate(ordinal_, stream->native_handle(),
                                             m, u, g, n);
}

absl::Status CudaDeviceOps::ClearWhereSent(Stream* stream, const float* sent,
                                           float* x, int64_t n) {
  TERSE_RETURN_IF_ERROR(Check(sent, n * 4, "ClearWhereSent: sent"));
  TERSE_RETURN_IF_ERROR(Check(x, n * 4, "ClearWhereSent: x"));
  return device_ops_cuda::ClearWhereSent(ordinal_, stream->native_handle(),
                                         sent, x, n);
}

absl::Status CudaDeviceOps::Subtract(Stream* stream, const float* x,
                                     const float* y, float* out, int64_t n) {
  TERSE_RETURN_IF_ERROR(Check(x, n * 4, "Subtract: x"));
  TERSE_RETURN_IF_ERROR(Check(y, n * 4, "Subtract: y"));
  TERSE_RETURN_IF_ERROR(Check(out, n * 4, "Subtract: out"));
  return device_ops_cuda::Subtract(ordinal_, stream->native_handle(), x, y, out,
                                   n);
}

absl::Status CudaDeviceOps::CastToHalf(Stream* stream, const float* x,
                                       uint16_t* out, int64_t n,
                                       DataType type) {
  TERSE_RETURN_IF_ERROR(Check(x, n * 4, "CastToHalf: x"));
  TERSE_RETURN_IF_ERROR(Check(out, n * 2, "CastToHalf: out"));
  absl::Status t = CheckHalfType(type, "CastToHalf");
  if (!t.ok()) return t;
  return device_ops_cuda::CastToHalf(ordinal_, stream->native_handle(), x, out,
                                     n, IsBf16(type));
}

absl::Status CudaDeviceOps::AccumulateHalf(Stream* stream, const uint16_t* h,
                                           float* y, int64_t n, DataType type) {
  TERSE_RETURN_IF_ERROR(Check(h, n * 2, "AccumulateHalf: h"));
  TERSE_RETURN_IF_ERROR(Check(y, n * 4, "AccumulateHalf: y"));
  absl::Status t = CheckHalfType(type, "AccumulateHalf");
  if (!t.ok()) return t;
  return device_ops_cuda::AccumulateHalf(ordinal_, stream->native_handle(), h,
                                         y, n, IsBf16(type));
}

absl::Status CudaDeviceOps::SquaredNorm(Stream* stream, const float* x,
                                        int64_t n, double* out) {
  TERSE_RETURN_IF_ERROR(Check(x, n * 4, "SquaredNorm: x"));
  TERSE_RETURN_IF_ERROR(Check(out, sizeof(double), "SquaredNorm: out"));
  return device_ops_cuda::SquaredNorm(ordinal_, stream->native_handle(), x, n,
                                      out);
}

absl::Status CudaDeviceOps::TopK(Stream* stream, const float* x, int64_t d,
                                 int64_t k, uint32_t* indices) {
  TERSE_RETURN_IF_ERROR(Check(x, d * 4, "TopK: x"));
  TERSE_RETURN_IF_ERROR(Check(indices, k * 4, "TopK: indices"));
  if (k < 0 || k > d || d >= (int64_t{1} << 32)) {
    return absl::InvalidArgumentError(
        absl::StrCat("TopK: k = ", k, " of d = ", d));
  }
  absl::Status set = SetDevice(ordinal_, "TopK");
  if (!set.ok()) return set;
  return FromCuda(
      kernels::cuda::TopK(x, d, k, indices, stream->native_handle()), "TopK");
}

absl::StatusOr<int64_t> CudaDeviceOps::SampledTopK(
    Stream* stream, const float* x, int64_t d, int64_t k,
    const kernels::SampledTopKOptions& options, uint32_t* indices) {
  TERSE_RETURN_IF_ERROR(Check(x, d * 4, "SampledTopK: x"));
  TERSE_RETURN_IF_ERROR(Check(indices, k * 4, "SampledTopK: indices"));
  if (k < 0 || k > d || d >= (int64_t{1} << 32)) {
    return absl::InvalidArgumentError(
        absl::StrCat("SampledTopK: k = ", k, " of d = ", d));
  }
  absl::Status set = SetDevice(ordinal_, "SampledTopK");
  if (!set.ok()) return set;
  int64_t count = 0;
  absl::Status st =
      FromCuda(kernels::cuda::SampledTopK(x, d, k, options, indices, &count,
                                          stream->native_handle()),
               "SampledTopK");
  if (!st.ok()) return st;
  return count;
}

absl::StatusOr<int64_t> CudaDeviceOps::ThresholdSearch(
    Stream* stream, const float* x, int64_t d, int64_t k,
    const kernels::ThresholdSearchOptions& options, uint32_t* indices) {
  if (k < 0 || k > d || d >= (int64_t{1} << 32)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ThresholdSearch: k = ", k, " of d = ", d));
  }
  const int64_t room = std::max<int64_t>(k, 2 * k - 1);
  TERSE_RETURN_IF_ERROR(Check(x, d * 4, "ThresholdSearch: x"));
  TERSE_RETURN_IF_ERROR(Check(indices, room * 4, "ThresholdSearch: indices"));
  TERSE_RETURN_IF_ERROR(SetDevice(ordinal_, "ThresholdSearch"));
  int64_t count = 0;
  TERSE_RETURN_IF_ERROR(
      FromCuda(kernels::cuda::ThresholdSearch(x, d, k, options, indices, &count,
                                              stream->native_handle()),
               "ThresholdSearch"));
  return count;
}

absl::StatusOr<int64_t> CudaDeviceOps::SelectAtLeast(Stream* stream,
                                                     const float* x, int64_t d,
                                                     uint32_t key, int64_t cap,
                                                     uint32_t* indices) {
  if (cap < 0 || d < 0 || d >= (int64_t{1} << 32)) {
    return absl::InvalidArgumentError(
        absl::StrCat("SelectAtLeast: cap = ", cap, " of d = ", d));
  }
  TERSE_RETURN_IF_ERROR(Check(x, d * 4, "SelectAtLeast: x"));
  TERSE_RETURN_IF_ERROR(Check(indices, cap * 4, "SelectAtLeast: indices"));
  TERSE_RETURN_IF_ERROR(SetDevice(ordinal_, "SelectAtLeast"));
  int64_t count = 0;
  TERSE_RETURN_IF_ERROR(
      FromCuda(kernels::cuda::SelectAtLeast(x, d, key, cap, indices, &count,
                                            stream->native_handle()),
               "SelectAtLeast"));
  return count;
}

absl::Status CudaDeviceOps::Gather(Stream* stream, const float* dense,
                                   const uint32_t* indices, int64_t k,
                                   float* values) {
  TERSE_RETURN_IF_ERROR(Check(indices, k * 4, "Gather: indices"));
  TERSE_RETURN_IF_ERROR(Check(values, k * 4, "Gather: values"));
  // dense: its extent is the caller's (indices below it); its start is
  // checked.
  TERSE_RETURN_IF_ERROR(Check(dense, k > 0 ? 4 : 0, "Gather: dense"));
  if (k <= 0) return absl::OkStatus();
  absl::Status set = SetDevice(ordinal_, "Gather");
  if (!set.ok()) return set;
  return FromCuda(
      kernels::cuda::Gather(dense, indices, k, values, stream->native_handle()),
      "Gather");
}

absl::Status CudaDeviceOps::ScatterAdd(Stream* stream, const uint32_t* indices,
                                       const float* values, int64_t k,
                                       float* dense) {
  TERSE_RETURN_IF_ERROR(Check(indices, k * 4, "ScatterAdd: indices"));
  TERSE_RETURN_IF_ERROR(Check(values, k * 4, "ScatterAdd: values"));
  TERSE_RETURN_IF_ERROR(Check(dense, k > 0 ? 4 : 0, "ScatterAdd: dense"));
  if (k <= 0) return absl::OkStatus();
  absl::Status set = SetDevice(ordinal_, "ScatterAdd");
  if (!set.ok()) return set;
  return FromCuda(kernels::cuda::ScatterAdd(indices, values, k, dense,
                                            stream->native_handle()),
                  "ScatterAdd");
}

absl::Status CudaDeviceOps::CheckSparseIndices(Stream* stream,
                                               const uint32_t* indices,
                                               int64_t k, uint64_t d,
                                               uint32_t* bad) {
  TERSE_RETURN_IF_ERROR(Check(indices, k * 4, "CheckSparseIndices: indices"));
  TERSE_RETURN_IF_ERROR(Check(bad, 4, "CheckSparseIndices: bad"));
  return device_ops_cuda::CheckSparseIndices(ordinal_, stream->native_handle(),
                                             indices, k, d, bad);
}

absl::Status CudaDeviceOps::SignEncode(Stream* stream, const float* x,
                                       int64_t d, int64_t block, float* scales,
                                       uint8_t* bits) {
  if (d > 0 && block >= 1) {
    TERSE_RETURN_IF_ERROR(Check(x, d * 4, "SignEncode: x"));
    TERSE_RETURN_IF_ERROR(
        Check(scales, (d + block - 1) / block * 4, "SignEncode: scales"));
    TERSE_RETURN_IF_ERROR(Check(bits, (d + 7) / 8, "SignEncode: bits"));
  }
  if (d < 0 || block < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("SignEncode: d = ", d, ", block = ", block));
  }
  return device_ops_cuda::SignEncode(ordinal_, stream->native_handle(), x, d,
                                     block, scales, bits);
}

absl::Status CudaDeviceOps::SignDecodeAdd(Stream* stream, const float* scales,
                                          const uint8_t* bits, int64_t d,
                                          int64_t block, float* dense) {
  if (d > 0 && block >= 1) {
    TERSE_RETURN_IF_ERROR(
        Check(scales, (d + block - 1) / block * 4, "SignDecodeAdd: scales"));
    TERSE_RETURN_IF_ERROR(Check(bits, (d + 7) / 8, "SignDecodeAdd: bits"));
    TERSE_RETURN_IF_ERROR(Check(dense, d * 4, "SignDecodeAdd: dense"));
  }
  if (d < 0 || block < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("SignDecodeAdd: d = ", d, ", block = ", block));
  }
  return device_ops_cuda::SignDecodeAdd(ordinal_, stream->native_handle(),
                                        scales, bits, d, block, dense);
}

absl::Status CudaDeviceOps::QsgdEncode(Stream* stream, const float* x,
                                       int64_t d, int64_t bucket, int levels,
                                       const uint64_t* seeds, float* norms,
                                       uint8_t* codes) {
  if (d > 0 && bucket >= 1) {
    const int64_t buckets = (d + bucket - 1) / bucket;
    TERSE_RETURN_IF_ERROR(Check(x, d * 4, "QsgdEncode: x"));
    TERSE_RETURN_IF_ERROR(Check(seeds, buckets * 8, "QsgdEncode: seeds"));
    TERSE_RETURN_IF_ERROR(Check(norms, buckets * 4, "QsgdEncode: norms"));
    TERSE_RETURN_IF_ERROR(Check(codes, 4, "QsgdEncode: codes"));
  }
  if (d < 0 || bucket < 1 || levels < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "QsgdEncode: d = ", d, ", bucket = ", bucket, ", levels = ", levels));
  }
  return device_ops_cuda::QsgdEncode(ordinal_, stream->native_handle(), x, d,
                                     bucket, levels, seeds, norms, codes);
}

absl::Status CudaDeviceOps::CheckQsgdCodes(Stream* stream, const uint8_t* codes,
                                           int64_t d, int levels,
                                           uint32_t* bad) {
  if (d < 0 || levels < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("CheckQsgdCodes: d = ", d, ", levels = ", levels));
  }
  TERSE_RETURN_IF_ERROR(
      Check(codes, qsgd_bits::PackedBytes(d, qsgd_bits::CodeBits(levels)),
            "CheckQsgdCodes: codes"));
  TERSE_RETURN_IF_ERROR(Check(bad, 4, "CheckQsgdCodes: bad"));
  return device_ops_cuda::CheckQsgdCodes(ordinal_, stream->native_handle(),
                                         codes, d, levels, bad);
}

absl::Status CudaDeviceOps::QsgdDecodeAdd(Stream* stream, const float* norms,
                                          const uint8_t* codes, int64_t d,
                                          int64_t bucket, int levels,
                                          float* dense) {
  if (d > 0 && bucket >= 1) {
    const int64_t buckets = (d + bucket - 1) / bucket;
    TERSE_RETURN_IF_ERROR(Check(norms, buckets * 4, "QsgdDecodeAdd: norms"));
    TERSE_RETURN_IF_ERROR(Check(codes, 4, "QsgdDecodeAdd: codes"));
    TERSE_RETURN_IF_ERROR(Check(dense, d * 4, "QsgdDecodeAdd: dense"));
  }
  if (d < 0 || bucket < 1 || levels < 1) {
    return absl::InvalidArgumentError(absl::StrCat("QsgdDecodeAdd: d = ", d,
                                                   ", bucket = ", bucket,
                                                   ", levels = ", levels));
  }
  return device_ops_cuda::QsgdDecodeAdd(ordinal_, stream->native_handle(),
                                        norms, codes, d, bucket, levels, dense);
}

absl::Status CudaDeviceOps::MatMul(Stream* stream, const float* m,
                                   const float* q, float* p, int64_t rows,
                                   int64_t cols, int64_t r) {
  TERSE_RETURN_IF_ERROR(Check(m, rows * cols * 4, "MatMul: m"));
  TERSE_RETURN_IF_ERROR(Check(q, cols * r * 4, "MatMul: q"));
  TERSE_RETURN_IF_ERROR(Check(p, rows * r * 4, "MatMul: p"));
  return device_ops_cuda::MatMul(ordinal_, stream->native_handle(), m, q, p,
                                 rows, cols, r);
}

absl::Status CudaDeviceOps::MatMulTransposed(Stream* stream, const float* m,
                                             const float* p, float* q,
                                             int64_t rows, int64_t cols,
                                             int64_t r) {
  TERSE_RETURN_IF_ERROR(Check(m, rows * cols * 4, "MatMulTransposed: m"));
  TERSE_RETURN_IF_ERROR(Check(p, rows * r * 4, "MatMulTransposed: p"));
  TERSE_RETURN_IF_ERROR(Check(q, cols * r * 4, "MatMulTransposed: q"));
  return device_ops_cuda::MatMulTransposed(ordinal_, stream->native_handle(), m,
                                           p, q, rows, cols, r);
}

absl::Status CudaDeviceOps::AddOuterProduct(Stream* stream, const float* p,
                                            const float* q, float* m,
                                            int64_t rows, int64_t cols,
                                            int64_t r) {
  TERSE_RETURN_IF_ERROR(Check(p, rows * r * 4, "AddOuterProduct: p"));
  TERSE_RETURN_IF_ERROR(Check(q, cols * r * 4, "AddOuterProduct: q"));
  TERSE_RETURN_IF_ERROR(Check(m, rows * cols * 4, "AddOuterProduct: m"));
  return device_ops_cuda::AddOuterProduct(ordinal_, stream->native_handle(), p,
                                          q, m, rows, cols, r);
}

absl::Status CudaDeviceOps::OrthonormalizeColumns(Stream* stream, float* p,
                                                  int64_t rows, int64_t r) {
  if (rows < 0 || r < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("OrthonormalizeColumns: dimensions ", rows, " x ", r));
  }
  TERSE_RETURN_IF_ERROR(Check(p, rows * r * 4, "OrthonormalizeColumns: p"));
  return device_ops_cuda::OrthonormalizeColumns(
      ordinal_, stream->native_handle(), p, rows, r);
}

absl::Status CudaDeviceOps::CountSketch(Stream* stream, const float* x,
                                        int64_t n, uint64_t seed,
                                        double* sketch, int64_t buckets,
                                        void* scratch) {
  static_assert(device_ops_cuda::CountSketchScratchBytes(1024) ==
                    CountSketchScratchBytes(1024),
                "one scratch size for the kernels and the contract");
  if (n < 0 || buckets < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("CountSketch: n = ", n, ", buckets = ", buckets));
  }
  if (reinterpret_cast<uintptr_t>(scratch) % 8 != 0) {
    return absl::InvalidArgumentError("CountSketch: scratch is not aligned");
  }
  TERSE_RETURN_IF_ERROR(Check(x, n * 4, "CountSketch: x"));
  TERSE_RETURN_IF_ERROR(Check(sketch, buckets * 8, "CountSketch: sketch"));
  TERSE_RETURN_IF_ERROR(
      Check(scratch, CountSketchScratchBytes(buckets), "CountSketch: scratch"));
  return device_ops_cuda::CountSketch(ordinal_, stream->native_handle(), x, n,
                                      seed, sketch, buckets, scratch);
}

}  // namespace terse
