// Shared checks of DeviceOps against the CPU kernels, for the simulated
// device (device_ops_test) and CUDA (device_ops_cuda_gpu_test): every
// operation on device buffers of `runtime`'s device `ordinal`, downloaded and
// compared with the CPU kernel on the same inputs. Testing only.
#ifndef TERSE_COMPRESSORS_DEVICE_DEVICE_OPS_TESTING_H_
#define TERSE_COMPRESSORS_DEVICE_DEVICE_OPS_TESTING_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "device/runtime.h"

namespace terse {
namespace testing {

// OK when each operation equals the CPU kernel: bitwise, except
// SquaredNorm and the PowerSGD products and orthonormalisation when
// `exact_norm` is false (then the norm within 1e-12 relative; the products
// within 1e-5 of the sum of their terms' magnitudes against an fp64 oracle,
// which they always meet; the orthonormalised columns within 1e-6 relative
// of the CPU's, and within 1e-6 of an fp64 QR's, which they always meet).
// The first difference is an Internal error naming the operation and index.
absl::Status CheckDeviceOpsAgainstCpu(DeviceRuntime* runtime, int ordinal,
                                      bool exact_norm);

// A block on which kernels::FixedOrderSum and other orders give different
// floats (the mean |x| or, for `squares`, the norm): a big term, terms that
// put it on a float rounding tie, and tiny terms that a chain of adds rounds
// away one by one but that survive when grouped. With `stride` 1 the terms
// are one chunk's first 32 (the lane fold decides); with kFixedSumChunk,
// one per chunk over two rounds of a CUDA thread block's eight warps, the
// tiny ones alone in the second round (the chunk order decides). Zeros fill
// the rest.
std::vector<float> OrderSensitiveValues(int64_t stride, bool squares);

}  // namespace testing
}  // namespace terse

#endif  // TERSE_COMPRESSORS_DEVICE_DEVICE_OPS_TESTING_H_
