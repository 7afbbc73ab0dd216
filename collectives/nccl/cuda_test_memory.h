// Device memory for the conformance suite (conformance.h) on NCCL: buffers
// from cudaMalloc on one device, copies with cudaMemcpy. Test-only.
#ifndef TERSE_COLLECTIVES_NCCL_CUDA_TEST_MEMORY_H_
#define TERSE_COLLECTIVES_NCCL_CUDA_TEST_MEMORY_H_

#include "collectives/conformance.h"

namespace terse {

class CudaTestMemory : public ConformanceMemory {
 public:
  explicit CudaTestMemory(int device) : device_(device) {}
  void* Allocate(int64_t bytes) override;
  void Free(void* buffer) override;
  absl::Status CopyFromHost(void* dst, const void* host,
                            int64_t bytes) override;
  absl::Status CopyToHost(void* host, const void* src, int64_t bytes) override;

 private:
  const int device_;
};

}  // namespace terse

#endif  // TERSE_COLLECTIVES_NCCL_CUDA_TEST_MEMORY_H_
