#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "device/cuda_kernels.h"

namespace terse {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void ScaleFloatKernel(T* dst, const T* src, int64_t n, T factor) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    dst[i] = src[i] * factor;
  }
}

__global__ void ScaleHalfKernel(__half* dst, const __half* src, int64_t n,
                                float factor) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    dst[i] = __float2half_rn(__half2float(src[i]) * factor);
  }
}

__global__ void ScaleBf16Kernel(__nv_bfloat16* dst, const __nv_bfloat16* src,
                                int64_t n, float factor) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    dst[i] = __float2bfloat16_rn(__bfloat162float(src[i]) * factor);
  }
}

template <typename T>
__global__ void ScaleIntKernel(T* dst, const T* src, int64_t n,
                               double factor) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    dst[i] = static_cast<T>(llrint(static_cast<double>(src[i]) * factor));
  }
}

int Blocks(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 4096 ? blocks : 4096);
}

absl::Status LaunchError(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(std::string("CudaScaledCopy (") + what +
                             "): " + cudaGetErrorString(err));
}

}  // namespace

absl::Status CudaScaledCopy(int device, void* stream, void* dst,
                            const void* src, int64_t count, DataType dtype,
                            double factor) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (count <= 0) return absl::OkStatus();
  const cudaError_t set = cudaSetDevice(device);
  if (set != cudaSuccess) {
    return absl::FailedPreconditionError(
        std::string("CudaScaledCopy: cudaSetDevice: ") +
        cudaGetErrorString(set));
  }
  const size_t bytes = static_cast<size_t>(count) * DataTypeSize(dtype);
  if (factor == 1.0) {
    if (dst == src) return absl::OkStatus();
    const cudaError_t err =
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s);
    if (err != cudaSuccess) {
      return absl::InternalError(std::string("CudaScaledCopy (copy): ") +
                                 cudaGetErrorString(err));
    }
    return absl::OkStatus();
  }
  const int blocks = Blocks(count);
  switch (dtype) {
    case DataType::kFloat32:
      ScaleFloatKernel<<<blocks, kThreads, 0, s>>>(
          static_cast<float*>(dst), static_cast<const float*>(src), count,
          static_cast<float>(factor));
      return LaunchError("f32");
    case DataType::kFloat64:
      ScaleFloatKernel<<<blocks, kThreads, 0, s>>>(
          static_cast<double*>(dst), static_cast<const double*>(src), count,
          factor);
      return LaunchError("f64");
    case DataType::kFloat16:
      ScaleHalfKernel<<<blocks, kThreads, 0, s>>>(
          static_cast<__half*>(dst), static_cast<const __half*>(src), count,
          static_cast<float>(factor));
      return LaunchError("f16");
    case DataType::kBFloat16:
      ScaleBf16Kernel<<<blocks, kThreads, 0, s>>>(
          static_cast<__nv_bfloat16*>(dst),
          static_cast<const __nv_bfloat16*>(src), count,
          static_cast<float>(factor));
      return LaunchError("bf16");
    case DataType::kInt32:
      ScaleIntKernel<<<blocks, kThreads, 0, s>>>(
          static_cast<int32_t*>(dst), static_cast<const int32_t*>(src), count,
          factor);
      return LaunchError("i32");
    case DataType::kInt64:
      ScaleIntKernel<<<blocks, kThreads, 0, s>>>(
          static_cast<long long*>(dst), static_cast<const long long*>(src),
          count, factor);
      return LaunchError("i64");
    case DataType::kUInt8:
      ScaleIntKernel<<<blocks, kThreads, 0, s>>>(
          static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), count,
          factor);
      return LaunchError("u8");
    case DataType::kInt8:
      ScaleIntKernel<<<blocks, kThreads, 0, s>>>(
          static_cast<int8_t*>(dst), static_cast<const int8_t*>(src), count,
          factor);
      return LaunchError("i8");
    case DataType::kInt16:
      ScaleIntKernel<<<blocks, kThreads, 0, s>>>(
          static_cast<int16_t*>(dst), static_cast<const int16_t*>(src), count,
          factor);
      return LaunchError("i16");
    case DataType::kBool:
      break;
  }
  return absl::InvalidArgumentError("CudaScaledCopy: cannot scale bool");
}

}  // namespace terse
