// Conversions between TensorFlow's types and terse's C ABI (terse_c.h):
// element types, shapes and errors. Compiled against TensorFlow's headers
// only; the engine is reached through libterse.so.
#ifndef TERSE_BINDINGS_TENSORFLOW_C_BRIDGE_H_
#define TERSE_BINDINGS_TENSORFLOW_C_BRIDGE_H_

#include <cstdint>
#include <vector>

#include "bindings/c/terse_c.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/framework/types.pb.h"
#include "tensorflow/core/platform/status.h"

namespace terse {
namespace tf {

// The terse element type code (TERSE_FLOAT32, ...) of a TensorFlow dtype;
// InvalidArgument naming the dtype for one terse does not move.
tensorflow::Status TerseDType(tensorflow::DataType dtype, int* code);

// The dimensions of `shape`, as the C ABI takes them.
std::vector<int64_t> Dims(const tensorflow::TensorShape& shape);

// The Status of a terse error (same canonical code and message); OK for
// NULL. Does not take ownership.
tensorflow::Status ToStatus(const terse_error* error);
// The Status of an error the engine reports when an operation completes.
// Those were agreed by every rank (a shape, dtype, root rank or op that
// differs across ranks; what a rank refused for all of them), so every rank
// gets the same one: InvalidArgument becomes FailedPrecondition, as
// Horovod's ops raise tf.errors.FailedPreconditionError for them. Errors of
// the enqueue call itself (this rank's arguments) stay as they are.
tensorflow::Status ToCollectiveStatus(const terse_error* error);
// ToStatus, and frees `error`.
tensorflow::Status TakeStatus(terse_error* error);

// Allocates output `index` of `context` with the shape of `result` (an
// allgather, alltoall or reducescatter result) and copies its bytes in.
// Internal if the byte counts disagree.
tensorflow::Status CopyResultToOutput(tensorflow::OpKernelContext* context,
                                      int index,
                                      const terse_allgather_result* result);

}  // namespace tf
}  // namespace terse

#endif  // TERSE_BINDINGS_TENSORFLOW_C_BRIDGE_H_
