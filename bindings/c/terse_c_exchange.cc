// terse_c.h's alltoall and reducescatter entry points over engine/api.h.
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bindings/c/terse_c.h"
#include "bindings/c/terse_c_internal.h"
#include "engine/api.h"

namespace {

terse_error* Take(
    int64_t handle, terse_allgather_result** result,
    absl::StatusOr<terse::AllgatherResult> (*take)(terse::Handle)) {
  if (result == nullptr) {
    return terse::cabi::ToError(absl::InvalidArgumentError("result is NULL"));
  }
  absl::StatusOr<terse::AllgatherResult> taken = take(handle);
  if (!taken.ok()) return terse::cabi::ToError(taken.status());
  *result = new terse_allgather_result{*std::move(taken)};
  return nullptr;
}

}  // namespace

extern "C" {

terse_error* terse_alltoall_set_async(const char* name, const void* in,
                                      int64_t count, int dtype, int device,
                                      const int64_t* shape, int ndim,
                                      const int64_t* splits, int nsplits,
                                      int process_set, terse_done_fn done,
                                      void* user_data, int64_t* handle) {
  absl::StatusOr<terse::cabi::Op> made = terse::cabi::MakeOp(
      name, in, const_cast<void*>(in), count, dtype, device, shape, ndim);
  if (!made.ok()) return terse::cabi::ToError(made.status());
  if (nsplits < 0 || (nsplits > 0 && splits == nullptr)) {
    return terse::cabi::ToError(absl::InvalidArgumentError(absl::StrCat(
        "alltoall of '", name, "': bad splits (", nsplits, " entries)")));
  }
  const std::vector<int64_t> split_list(splits, splits + nsplits);
  const terse::cabi::Op& o = *made;
  return terse::cabi::Enqueue(
      [&](terse::DoneCallback callback) {
        return terse::AlltoallAsync(o.name, o.in, o.shape, split_list,
                                    std::move(callback), process_set);
      },
      /*has_result=*/true, done, user_data, handle);
}

terse_error* terse_reducescatter_set_async(
    const char* name, const void* in, int64_t count, int dtype, int device,
    const int64_t* shape, int ndim, int op, double prescale, double postscale,
    int process_set, terse_done_fn done, void* user_data, int64_t* handle) {
  absl::StatusOr<terse::cabi::Op> made = terse::cabi::MakeOp(
      name, in, const_cast<void*>(in), count, dtype, device, shape, ndim);
  if (!made.ok()) return terse::cabi::ToError(made.status());
  absl::StatusOr<terse::ReduceOp> reduce_op = terse::cabi::MakeReduceOp(op);
  if (!reduce_op.ok()) return terse::cabi::ToError(reduce_op.status());
  const terse::cabi::Op& o = *made;
  return terse::cabi::Enqueue(
      [&](terse::DoneCallback callback) {
        return terse::ReducescatterAsync(o.name, o.in, o.shape, *reduce_op,
                                         prescale, postscale,
                                         std::move(callback), process_set);
      },
      /*has_result=*/true, done, user_data, handle);
}

terse_error* terse_take_alltoall(int64_t handle,
                                 terse_allgather_result** result) {
  return Take(handle, result, &terse::TakeAlltoallResult);
}

terse_error* terse_take_reducescatter(int64_t handle,
                                      terse_allgather_result** result) {
  return Take(handle, result, &terse::TakeReducescatterResult);
}

}  // extern "C"
