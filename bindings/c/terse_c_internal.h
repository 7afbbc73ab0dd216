// The C ABI's shared plumbing (terse_c.cc), for the files of this package
// that define more of terse_c.h's entry points (terse_c_exchange.cc,
// terse_c_state.cc).
// Private to bindings/c; not part of the ABI.
#ifndef TERSE_BINDINGS_C_TERSE_C_INTERNAL_H_
#define TERSE_BINDINGS_C_TERSE_C_INTERNAL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bindings/c/terse_c.h"
#include "collectives/communicator.h"
#include "common/tensor_view.h"
#include "engine/types.h"

// The struct behind terse_c.h's opaque result of an allgather, alltoall or
// reducescatter.
struct terse_allgather_result {
  terse::AllgatherResult result;
};

namespace terse {
namespace cabi {

// Everything an enqueue needs, validated.
struct Op {
  std::string name;
  TensorView in;
  TensorView out;
  std::vector<int64_t> shape;
  ReduceOp reduce_op = ReduceOp::kSum;
};

// A new terse_error for a non-OK status; NULL for OK.
terse_error* ToError(const absl::Status& status);

// Checks the C arguments of one tensor (name, dtype code, count, device,
// pointers, shape) and builds its views; InvalidArgument naming the tensor.
absl::StatusOr<Op> MakeOp(const char* name, const void* in, void* out,
                          int64_t count, int dtype, int device,
                          const int64_t* shape, int ndim);

// TERSE_OP_* to ReduceOp; InvalidArgument for an unknown code.
absl::StatusOr<ReduceOp> MakeReduceOp(int op);

using EnqueueFn = std::function<absl::StatusOr<Handle>(DoneCallback callback)>;

// Enqueues through `enqueue`: with `done`, in callback mode (the callback
// runs on the completion thread with the op's result when `has_result`);
// else *handle receives the handle. NULL on success.
terse_error* Enqueue(const EnqueueFn& enqueue, bool has_result,
                     terse_done_fn done, void* user_data, int64_t* handle);

// InvalidArgument "<what> is NULL" when `out` is null.
absl::Status CheckOut(const void* out, const char* what);

// Stores an OK `value` into *out and returns NULL, or returns its error.
template <typename T>
terse_error* Store(absl::StatusOr<T> value, T* out) {
  if (!value.ok()) return ToError(value.status());
  *out = *value;
  return nullptr;
}

}  // namespace cabi
}  // namespace terse

#endif  // TERSE_BINDINGS_C_TERSE_C_INTERNAL_H_
