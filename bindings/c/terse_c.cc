// The C ABI over engine/api.h. See terse_c.h for the contract.
#include "bindings/c/terse_c.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "bindings/c/completion_thread.h"
#include "bindings/c/terse_c_internal.h"
#include "collectives/communicator.h"
#include "common/config.h"
#include "common/data_type.h"
#include "common/status.h"
#include "common/tensor_view.h"
#include "device/cuda_runtime.h"
#include "engine/api.h"

struct terse_error {
  int code;
  std::string message;
};

namespace terse {
namespace {

// The C layer's process-wide state, beside the engine's own (api.cc).
// `lifecycle` is held exclusively while the engine starts or stops and
// shared while an operation is enqueued, so a callback-mode operation is
// always accepted by an engine whose completion thread exists. `serial`
// orders whole init/shutdown calls, so the completion thread of one engine
// has finished (and released that engine's handles) before the next starts.
struct CState {
  absl::Mutex serial;
  absl::Mutex lifecycle ABSL_ACQUIRED_AFTER(serial);
  std::shared_ptr<CompletionThread> completions ABSL_GUARDED_BY(lifecycle);
};

// The event a device op's engine stream waits on before reading the tensor
// (TensorEntry::ready): recorded on the caller's producer `stream`; null
// (ready now) for host tensors or a null stream. One CudaRuntime for the
// process, whose event pool makes the steady state create no events (the
// pool outlives it for events still alive; it is never destroyed anyway).
absl::StatusOr<std::shared_ptr<Event>> ProducerEvent(const Device& device,
                                                     void* stream) {
  if (!device.is_cuda() || stream == nullptr) return nullptr;
  static CudaRuntime* cuda = new CudaRuntime();  // Never destroyed.
  absl::StatusOr<std::unique_ptr<Event>> event =
      cuda->RecordOnStream(device.ordinal, stream);
  if (!event.ok()) return event.status();
  return std::shared_ptr<Event>(*std::move(event));
}

CState& TheState() {
  static CState* state = new CState();  // Never destroyed.
  return *state;
}

terse_error* ToError(const absl::Status& status) {
  if (status.ok()) return nullptr;
  return new terse_error{static_cast<int>(status.code()),
                         std::string(status.message())};
}

absl::Status NotInitialized() {
  return absl::FailedPreconditionError(
      "terse is not initialised; call init() first");
}

absl::Status CheckOut(const void* out, const char* what) {
  if (out == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is NULL"));
  }
  return absl::OkStatus();
}

template <typename T>
terse_error* Store(absl::StatusOr<T> value, T* out) {
  if (!value.ok()) return ToError(value.status());
  *out = *value;
  return nullptr;
}

using cabi::Op;

absl::StatusOr<Op> MakeOp(const char* name, const void* in, void* out,
                          int64_t count, int dtype, int device,
                          const int64_t* shape, int ndim) {
  if (name == nullptr) return absl::InvalidArgumentError("name is NULL");
  if (!IsValidDataType(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': unsupported dtype code ", dtype));
  }
  if (count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': negative element count ", count));
  }
  if (device < TERSE_DEVICE_CPU) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': bad device ", device));
  }
  if (count > 0 && (in == nullptr || out == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': NULL data pointer"));
  }
  if (ndim < 0 || (ndim > 0 && shape == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': bad shape (ndim ", ndim, ")"));
  }
  Op op;
  op.name = name;
  const Device where =
      device == TERSE_DEVICE_CPU ? Device::Cpu() : Device::Cuda(device);
  // The engine only reads `in`; TensorView carries a mutable pointer.
  op.in = TensorView(const_cast<void*>(in), count, static_cast<DataType>(dtype),
                     where);
  op.out = TensorView(out, count, static_cast<DataType>(dtype), where);
  op.shape.assign(shape, shape + ndim);
  return op;
}

absl::StatusOr<ReduceOp> MakeReduceOp(int op) {
  switch (op) {
    case TERSE_OP_SUM:
      return ReduceOp::kSum;
    case TERSE_OP_AVERAGE:
      return ReduceOp::kAverage;
    case TERSE_OP_MIN:
      return ReduceOp::kMin;
    case TERSE_OP_MAX:
      return ReduceOp::kMax;
    case TERSE_OP_PRODUCT:
      return ReduceOp::kProduct;
    case TERSE_OP_ADASUM:
      return ReduceOp::kAdasum;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown reduce op code ", op));
  }
}

// The handle of a callback-mode operation, known to the enqueuing thread
// only after the engine accepted it; the completion task waits for it.
class HandleCell {
 public:
  void Set(Handle handle) {
    absl::MutexLock lock(&mu_);
    handle_ = handle;
  }
  Handle Get() {
    absl::MutexLock lock(&mu_);
    auto known = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return handle_.has_value();
    };
    mu_.Await(absl::Condition(&known));
    return *handle_;
  }

 private:
  absl::Mutex mu_;
  std::optional<Handle> handle_ ABSL_GUARDED_BY(mu_);
};

// Runs on the completion thread: releases the handle (fetching an
// allgather's result) and calls the caller's callback. `status` is the one
// the engine completed the operation with; it wins over the handle's (which
// is unknown once the engine has been shut down).
void Finish(HandleCell* cell, const absl::Status& status, bool is_allgather,
            terse_done_fn done, void* user_data) {
  const Handle handle = cell->Get();
  absl::Status final_status = status;
  std::unique_ptr<terse_allgather_result> result;
  const absl::Status waited = Wait(handle);
  if (status.ok() && is_allgather) {
    absl::StatusOr<AllgatherResult> taken =
        waited.ok() ? TakeAllgatherResult(handle)
                    : absl::StatusOr<AllgatherResult>(waited);
    if (taken.ok()) {
      result = std::make_unique<terse_allgather_result>();
      result->result = *std::move(taken);
    } else {
      final_status = taken.status();
    }
  }
  if (final_status.ok()) {
    done(user_data, nullptr, result.get());
  } else {
    terse_error error{static_cast<int>(final_status.code()),
                      std::string(final_status.message())};
    done(user_data, &error, nullptr);
  }
}

using cabi::EnqueueFn;

// Enqueues through `enqueue`, in callback mode when `done` is set.
terse_error* Enqueue(const EnqueueFn& enqueue, bool is_allgather,
                     terse_done_fn done, void* user_data, int64_t* handle) {
  if (done == nullptr) {
    if (handle == nullptr) {
      return ToError(absl::InvalidArgumentError(
          "an operation needs a callback or a handle pointer"));
    }
    return Store(enqueue(nullptr), handle);
  }
  CState& state = TheState();
  absl::ReaderMutexLock lock(&state.lifecycle);
  std::shared_ptr<CompletionThread> completions = state.completions;
  if (completions == nullptr) return ToError(NotInitialized());
  auto cell = std::make_shared<HandleCell>();
  DoneCallback callback = [completions, cell, is_allgather, done,
                           user_data](const absl::Status& status) {
    completions->Post([cell, status, is_allgather, done, user_data] {
      Finish(cell.get(), status, is_allgather, done, user_data);
    });
  };
  absl::StatusOr<Handle> accepted = enqueue(std::move(callback));
  if (!accepted.ok()) return ToError(accepted.status());
  cell->Set(*accepted);
  if (handle != nullptr) *handle = *accepted;
  return nullptr;
}

// The configuration of terse_init's `count` TERSE_* names and values.
absl::StatusOr<Config> ConfigFrom(const char* const* names,
                                  const char* const* values, size_t count) {
  std::map<std::string, std::string> variables;
  for (size_t i = 0; i < count; ++i) {
    if (names == nullptr || values == nullptr || names[i] == nullptr ||
        values[i] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("configuration entry ", i, " is NULL"));
    }
    variables[names[i]] = values[i];
  }
  return Config::FromMap(variables);
}

absl::Status InitWith(const Config& config,
                      const std::vector<std::vector<int>>& process_sets = {},
                      const WorldOptions& world = WorldOptions()) {
  CState& state = TheState();
  absl::MutexLock serial(&state.serial);
  absl::MutexLock lock(&state.lifecycle);
  if (state.completions != nullptr || IsInitialized()) {
    return absl::FailedPreconditionError("terse is already initialised");
  }
  TERSE_RETURN_IF_ERROR(Init(config, process_sets, world));
  state.completions = std::make_shared<CompletionThread>();
  return absl::OkStatus();
}

absl::Status ShutdownAll() {
  CState& state = TheState();
  std::shared_ptr<CompletionThread> completions;
  {
    absl::ReaderMutexLock lock(&state.lifecycle);
    completions = state.completions;
  }
  if (completions != nullptr && completions->IsCurrentThread()) {
    return absl::FailedPreconditionError(
        "terse shutdown() was called from an operation's completion "
        "callback; call it from another thread");
  }
  absl::MutexLock serial(&state.serial);
  absl::Status status;
  {
    absl::MutexLock lock(&state.lifecycle);
    completions = std::move(state.completions);
    state.completions = nullptr;
    // The engine fails what is pending; those callbacks post to
    // `completions`, which the engine's callbacks keep alive.
    status = Shutdown();
  }
  // Outside `lifecycle`: a callback that enqueues again gets "not
  // initialised" instead of waiting for this thread.
  if (completions != nullptr) completions->Stop();
  return status;
}

}  // namespace

namespace cabi {

terse_error* ToError(const absl::Status& status) {
  return ::terse::ToError(status);
}

absl::StatusOr<Op> MakeOp(const char* name, const void* in, void* out,
                          int64_t count, int dtype, int device,
                          const int64_t* shape, int ndim) {
  return ::terse::MakeOp(name, in, out, count, dtype, device, shape, ndim);
}

absl::StatusOr<ReduceOp> MakeReduceOp(int op) {
  return ::terse::MakeReduceOp(op);
}

terse_error* Enqueue(const EnqueueFn& enqueue, bool has_result,
                     terse_done_fn done, void* user_data, int64_t* handle) {
  return ::terse::Enqueue(enqueue, has_result, done, user_data, handle);
}

absl::Status CheckOut(const void* out, const char* what) {
  return ::terse::CheckOut(out, what);
}

}  // namespace cabi
}  // namespace terse

extern "C" {

int terse_abi_version(void) { return TERSE_C_ABI_VERSION; }

int terse_error_code(const terse_error* error) {
  return error == nullptr ? 0 : error->code;
}

const char* terse_error_message(const terse_error* error) {
  return error == nullptr ? "" : error->message.c_str();
}

void terse_error_free(terse_error* error) { delete error; }

const void* terse_allgather_result_data(const terse_allgather_result* r) {
  return r->result.data.data();
}

int64_t terse_allgather_result_nbytes(const terse_allgather_result* r) {
  return static_cast<int64_t>(r->result.data.size());
}

int terse_allgather_result_dtype(const terse_allgather_result* r) {
  return static_cast<int>(r->result.dtype);
}

int terse_allgather_result_ndim(const terse_allgather_result* r) {
  return static_cast<int>(r->result.shape.size());
}

const int64_t* terse_allgather_result_shape(const terse_allgather_result* r) {
  return r->result.shape.data();
}

int terse_allgather_result_num_ranks(const terse_allgather_result* r) {
  return static_cast<int>(r->result.first_dims.size());
}

const int64_t* terse_allgather_result_first_dims(
    const terse_allgather_result* r) {
  return r->result.first_dims.data();
}

void terse_allgather_result_free(terse_allgather_result* r) { delete r; }

terse_error* terse_init(const char* const* names, const char* const* values,
                        size_t count) {
  absl::StatusOr<terse::Config> config =
      terse::ConfigFrom(names, values, count);
  if (!config.ok()) return terse::ToError(config.status());
  return terse::ToError(terse::InitWith(*config));
}

terse_error* terse_init_from_environment(void) {
  absl::StatusOr<terse::Config> config = terse::Config::FromEnvironment();
  if (!config.ok()) return terse::ToError(config.status());
  return terse::ToError(terse::InitWith(*config));
}

terse_error* terse_shutdown(void) {
  return terse::ToError(terse::ShutdownAll());
}

int terse_is_initialized(void) { return terse::IsInitialized() ? 1 : 0; }

terse_error* terse_fatal_status(void) {
  return terse::ToError(terse::FatalStatus());
}

terse_error* terse_rank(int* rank) {
  if (!rank) return terse::ToError(terse::CheckOut(rank, "rank"));
  return terse::Store(terse::Rank(), rank);
}

terse_error* terse_size(int* size) {
  if (!size) return terse::ToError(terse::CheckOut(size, "size"));
  return terse::Store(terse::Size(), size);
}

terse_error* terse_local_rank(int* local_rank) {
  if (!local_rank) {
    return terse::ToError(terse::CheckOut(local_rank, "local_rank"));
  }
  return terse::Store(terse::LocalRank(), local_rank);
}

terse_error* terse_local_size(int* local_size) {
  if (!local_size) {
    return terse::ToError(terse::CheckOut(local_size, "local_size"));
  }
  return terse::Store(terse::LocalSize(), local_size);
}

terse_error* terse_allreduce_async(const char* name, const void* in, void* out,
                                   int64_t count, int dtype, int device,
                                   const int64_t* shape, int ndim, int op,
                                   double prescale, double postscale,
                                   terse_done_fn done, void* user_data,
                                   int64_t* handle) {
  return terse_allreduce_compressed_async(name, in, out, count, dtype, device,
                                          shape, ndim, op, prescale, postscale,
                                          nullptr, done, user_data, handle);
}

terse_error* terse_allreduce_compressed_async(
    const char* name, const void* in, void* out, int64_t count, int dtype,
    int device, const int64_t* shape, int ndim, int op, double prescale,
    double postscale, const char* compression, terse_done_fn done,
    void* user_data, int64_t* handle) {
  return terse_allreduce_set_async(name, in, out, count, dtype, device, shape,
                                   ndim, op, prescale, postscale, compression,
                                   0, nullptr, done, user_data, handle);
}

terse_error* terse_allreduce_set_async(
    const char* name, const void* in, void* out, int64_t count, int dtype,
    int device, const int64_t* shape, int ndim, int op, double prescale,
    double postscale, const char* compression, int process_set, void* stream,
    terse_done_fn done, void* user_data, int64_t* handle) {
  const std::string spec = compression == nullptr ? "" : compression;
  absl::StatusOr<terse::Op> made =
      terse::MakeOp(name, in, out, count, dtype, device, shape, ndim);
  if (!made.ok()) return terse::ToError(made.status());
  absl::StatusOr<std::shared_ptr<terse::Event>> ready =
      terse::ProducerEvent(made->in.device, stream);
  if (!ready.ok()) return terse::ToError(ready.status());
  absl::StatusOr<terse::ReduceOp> reduce_op = terse::MakeReduceOp(op);
  if (!reduce_op.ok()) return terse::ToError(reduce_op.status());
  const terse::Op& o = *made;
  return terse::Enqueue(
      [&](terse::DoneCallback callback) {
        return terse::AllreduceAsync(o.name, o.in, o.out, o.shape, *reduce_op,
                                     prescale, postscale, std::move(callback),
                                     spec, *ready, process_set);
      },
      /*is_allgather=*/false, done, user_data, handle);
}

terse_error* terse_allgather_async(const char* name, const void* in,
                                   int64_t count, int dtype, int device,
                                   const int64_t* shape, int ndim,
                                   terse_done_fn done, void* user_data,
                                   int64_t* handle) {
  return terse_allgather_set_async(name, in, count, dtype, device, shape, ndim,
                                   0, nullptr, done, user_data, handle);
}

terse_error* terse_allgather_set_async(const char* name, const void* in,
                                       int64_t count, int dtype, int device,
                                       const int64_t* shape, int ndim,
                                       int process_set, void* stream,
                                       terse_done_fn done, void* user_data,
                                       int64_t* handle) {
  absl::StatusOr<terse::Op> made = terse::MakeOp(
      name, in, const_cast<void*>(in), count, dtype, device, shape, ndim);
  if (!made.ok()) return terse::ToError(made.status());
  absl::StatusOr<std::shared_ptr<terse::Event>> ready =
      terse::ProducerEvent(made->in.device, stream);
  if (!ready.ok()) return terse::ToError(ready.status());
  const terse::Op& o = *made;
  return terse::Enqueue(
      [&](terse::DoneCallback callback) {
        return terse::AllgatherAsync(o.name, o.in, o.shape, std::move(callback),
                                     *ready, process_set);
      },
      /*is_allgather=*/true, done, user_data, handle);
}

terse_error* terse_broadcast_async(const char* name, void* buffer,
                                   int64_t count, int dtype, int device,
                                   const int64_t* shape, int ndim,
                                   int root_rank, terse_done_fn done,
                                   void* user_data, int64_t* handle) {
  return terse_broadcast_set_async(name, buffer, count, dtype, device, shape,
                                   ndim, root_rank, 0, nullptr, done, user_data,
                                   handle);
}

terse_error* terse_broadcast_set_async(const char* name, void* buffer,
                                       int64_t count, int dtype, int device,
                                       const int64_t* shape, int ndim,
                                       int root_rank, int process_set,
                                       void* stream, terse_done_fn done,
                                       void* user_data, int64_t* handle) {
  absl::StatusOr<terse::Op> made =
      terse::MakeOp(name, buffer, buffer, count, dtype, device, shape, ndim);
  if (!made.ok()) return terse::ToError(made.status());
  absl::StatusOr<std::shared_ptr<terse::Event>> ready =
      terse::ProducerEvent(made->in.device, stream);
  if (!ready.ok()) return terse::ToError(ready.status());
  const terse::Op& o = *made;
  return terse::Enqueue(
      [&](terse::DoneCallback callback) {
        return terse::BroadcastAsync(o.name, o.out, o.shape, root_rank,
                                     std::move(callback), *ready, process_set);
      },
      /*is_allgather=*/false, done, user_data, handle);
}

terse_error* terse_poll(int64_t handle, int* done) {
  if (!done) return terse::ToError(terse::CheckOut(done, "done"));
  absl::StatusOr<bool> polled = terse::Poll(handle);
  if (!polled.ok()) return terse::ToError(polled.status());
  *done = *polled ? 1 : 0;
  return nullptr;
}

terse_error* terse_wait(int64_t handle) {
  return terse::ToError(terse::Wait(handle));
}

terse_error* terse_take_allgather(int64_t handle,
                                  terse_allgather_result** result) {
  if (!result) return terse::ToError(terse::CheckOut(result, "result"));
  absl::StatusOr<terse::AllgatherResult> taken =
      terse::TakeAllgatherResult(handle);
  if (!taken.ok()) return terse::ToError(taken.status());
  *result = new terse_allgather_result{*std::move(taken)};
  return nullptr;
}

terse_error* terse_group_start(const char* name) {
  if (name == nullptr) {
    return terse::ToError(absl::InvalidArgumentError("group name is NULL"));
  }
  return terse::ToError(terse::GroupStart(name));
}

terse_error* terse_group_end(void) { return terse::ToError(terse::GroupEnd()); }

terse_error* terse_barrier(void) { return terse::ToError(terse::Barrier()); }

terse_error* terse_barrier_set(int process_set) {
  return terse::ToError(terse::Barrier(process_set));
}

terse_error* terse_init_with_process_sets(const char* const* names,
                                          const char* const* values,
                                          size_t count, const int* ranks,
                                          const int* set_sizes, int num_sets) {
  return terse_init_with_comm(names, values, count, ranks, set_sizes, num_sets,
                              nullptr, 0, nullptr);
}

terse_error* terse_init_with_comm(const char* const* names,
                                  const char* const* values, size_t count,
                                  const int* ranks, const int* set_sizes,
                                  int num_sets, const int* world_ranks,
                                  int num_world_ranks, const void* mpi_comm) {
  if (num_sets < 0 || (num_sets > 0 && set_sizes == nullptr)) {
    return terse::ToError(
        absl::InvalidArgumentError("process sets: bad set_sizes"));
  }
  std::vector<std::vector<int>> sets;
  int64_t offset = 0;
  for (int i = 0; i < num_sets; ++i) {
    if (set_sizes[i] < 0 || (set_sizes[i] > 0 && ranks == nullptr)) {
      return terse::ToError(absl::InvalidArgumentError(
          absl::StrCat("process set ", i, ": bad size ", set_sizes[i])));
    }
    sets.emplace_back(ranks + offset, ranks + offset + set_sizes[i]);
    offset += set_sizes[i];
  }
  if (num_world_ranks < 0 || (num_world_ranks > 0 && world_ranks == nullptr)) {
    return terse::ToError(absl::InvalidArgumentError(absl::StrCat(
        "init: num_world_ranks is ", num_world_ranks,
        "; pass a count >= 0, and world_ranks non-NULL when it is > 0")));
  }
  terse::WorldOptions world;
  world.mpi_comm = mpi_comm;
  world.ranks.assign(world_ranks, world_ranks + num_world_ranks);
  absl::StatusOr<terse::Config> config =
      terse::ConfigFrom(names, values, count);
  if (!config.ok()) return terse::ToError(config.status());
  return terse::ToError(terse::InitWith(*config, sets, world));
}

}  // extern "C"
