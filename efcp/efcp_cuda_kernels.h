// Element-wise CUDA kernels of the EFCP GPU path (compiled by nvcc; plain
// C++ declarations so host code can call them). Pointers are DEVICE
// pointers, `stream` a cudaStream_t as void* (nullptr = default stream).
// Each returns a cudaError_t as int (0 = success) and only enqueues work.
// The sparse kernels (top-k, gather, scatter, row products) are those of
// compressors/kernels/*_cuda.h.
#ifndef TERSE_EFCP_EFCP_CUDA_KERNELS_H_
#define TERSE_EFCP_EFCP_CUDA_KERNELS_H_

#include <cstdint>

namespace terse {
namespace efcp {
namespace cuda {

// Sets *flag = 1 when some a[i] + b[i] (float) is NaN or Inf; b may be null
// (then a[i] alone is tested). *flag is not cleared first.
int FlagNonFinite(const float* a, const float* b, int64_t n, int* flag,
                  void* stream);
// a[i] += b[i].
int AddInPlace(float* a, const float* b, int64_t n, void* stream);
// values[i] = bf16 round trip of values[i] when bf16 != 0 (round to nearest
// even, as common/half.h), then negated[i] = -values[i].
int RoundAndNegate(float* values, float* negated, int64_t n, int bf16,
                   void* stream);
// x[i] *= s.
int Scale(float* x, float s, int64_t n, void* stream);

// The dense window products (rows: m x d row-major on the device):
// out[i] = <row i, x> accumulated in double (out: m doubles on the device).
int DenseDots(const float* rows, int64_t m, int64_t d, const float* x,
              double* out, void* stream);
// out[j] += sum_i coeffs[i] * row_i[j], rows added in order, in float
// (coeffs: m doubles on the device).
int DenseLinearCombination(const float* rows, int64_t m, int64_t d,
                           const double* coeffs, float* out, void* stream);

const char* ErrorString(int error);

}  // namespace cuda
}  // namespace efcp
}  // namespace terse

#endif  // TERSE_EFCP_EFCP_CUDA_KERNELS_H_
