// Plain-C++ entry points of cuda_probe_kernel.cu (compiled by nvcc). Each
// returns a cudaError_t as int (0 = success).
#ifndef TERSE_COMMON_CUDA_PROBE_KERNEL_H_
#define TERSE_COMMON_CUDA_PROBE_KERNEL_H_

namespace terse {
namespace cuda_probe_internal {

int DeviceCount(int* count);
int RuntimeVersion(int* version);
const char* ErrorString(int error);
int Axpy(float a, const float* host_x, float* host_y, int n);

}  // namespace cuda_probe_internal
}  // namespace terse

#endif  // TERSE_COMMON_CUDA_PROBE_KERNEL_H_
