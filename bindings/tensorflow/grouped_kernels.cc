// The CPU kernels of TerseGroupedAllreduce, TerseGroupedAllgather and
// TerseGroupedReducescatter (ops.cc): each enqueues one engine op per input
// between terse_group_start and terse_group_end, so the engine answers them
// as one group (one negotiation cycle, fused only among themselves, failing
// as one), and calls `done` when the last of them has completed. The group
// is opened and closed on the thread that runs ComputeAsync, which is what
// the C ABI keys a group by.
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bindings/c/terse_c.h"
#include "bindings/tensorflow/c_bridge.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace terse {
namespace tf {
namespace {

using ::tensorflow::AsyncOpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;

enum class Kind { kAllreduce, kAllgather, kReducescatter };

const char* KindName(Kind kind) {
  switch (kind) {
    case Kind::kAllreduce:
      return "grouped allreduce";
    case Kind::kAllgather:
      return "grouped allgather";
    case Kind::kReducescatter:
      return "grouped reducescatter";
  }
  return "grouped op";
}

// The group in flight: counts the members still to complete (plus one for
// the kernel itself, released once every member is enqueued, so that `done`
// never runs while ComputeAsync still uses the context), keeps the first
// error, and finishes the op when the count reaches zero. Deletes itself.
// Members' callbacks run on libterse.so's one completion thread, so output
// allocation from them is never concurrent.
class GroupPending {
 public:
  GroupPending(OpKernelContext* context, AsyncOpKernel::DoneCallback done,
               int members)
      : context_(context), done_(std::move(done)), remaining_(members + 1) {
    members_.reserve(members);
    for (int i = 0; i < members; ++i) members_.push_back(Member{this, i});
  }

  // The user_data of member i's callback.
  void* member(int i) { return &members_[i]; }

  // terse_done_fn of an allreduce member (its output is already written).
  static void OnDone(void* user_data, const terse_error* error,
                     const terse_allgather_result*) {
    static_cast<Member*>(user_data)->group->Arrive(ToCollectiveStatus(error));
  }

  // terse_done_fn of an allgather or reducescatter member: its result into
  // output i.
  static void OnResult(void* user_data, const terse_error* error,
                       const terse_allgather_result* result) {
    auto* m = static_cast<Member*>(user_data);
    tensorflow::Status status = ToCollectiveStatus(error);
    if (status.ok()) status = m->group->CopyOut(m->index, result);
    m->group->Arrive(status);
  }

  // A member (or the kernel's own count) is done, with `status`.
  void Arrive(const tensorflow::Status& status) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!status.ok() && error_.ok()) error_ = status;
      if (--remaining_ > 0) return;
    }
    if (!error_.ok()) context_->SetStatus(error_);
    AsyncOpKernel::DoneCallback done = std::move(done_);
    delete this;
    done();
  }

 private:
  struct Member {
    GroupPending* group;
    int index;
  };

  tensorflow::Status CopyOut(int index, const terse_allgather_result* result) {
    return CopyResultToOutput(context_, index, result);
  }

  OpKernelContext* const context_;
  AsyncOpKernel::DoneCallback done_;
  std::vector<Member> members_;
  // std::mutex: this library links TensorFlow's abseil headers only.
  std::mutex mu_;
  int remaining_;             // Guarded by mu_.
  tensorflow::Status error_;  // Guarded by mu_.
};

template <Kind kKind>
class TerseGroupedOp : public AsyncOpKernel {
 public:
  explicit TerseGroupedOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("group_name", &group_name_));
    OP_REQUIRES_OK(c, c->GetAttr("tensor_names", &names_));
    OP_REQUIRES_OK(c, c->GetAttr("process_set", &process_set_));
    const size_t n = static_cast<size_t>(c->num_inputs());
    if (kKind != Kind::kAllgather) {
      OP_REQUIRES_OK(c, c->GetAttr("reduce_ops", &reduce_ops_));
      OP_REQUIRES_OK(c, c->GetAttr("prescale_factors", &prescales_));
      OP_REQUIRES_OK(c, c->GetAttr("postscale_factors", &postscales_));
    } else {
      reduce_ops_.assign(n, TERSE_OP_SUM);
      prescales_.assign(n, 1.0f);
      postscales_.assign(n, 1.0f);
    }
    if (kKind == Kind::kAllreduce) {
      OP_REQUIRES_OK(c, c->GetAttr("compression", &compression_));
    }
    OP_REQUIRES(
        c,
        names_.size() == n && reduce_ops_.size() == n &&
            prescales_.size() == n && postscales_.size() == n,
        absl::InvalidArgumentError(absl::StrCat(
            "terse ", KindName(kKind), " '", group_name_, "': ", n,
            " tensors but ", names_.size(), " names, ", reduce_ops_.size(),
            " reduce ops, ", prescales_.size(), " prescale and ",
            postscales_.size(), " postscale factors")));
  }

  void ComputeAsync(OpKernelContext* context, DoneCallback done) override {
    const int n = context->num_inputs();
    // Every input's checks (and an allreduce's outputs) before the group
    // opens, so a bad input fails the op without enqueueing a part of it.
    std::vector<int> dtypes(n);
    std::vector<Tensor*> outputs(n, nullptr);
    for (int i = 0; i < n; ++i) {
      const Tensor& input = context->input(i);
      OP_REQUIRES_OK_ASYNC(context, TerseDType(input.dtype(), &dtypes[i]),
                           done);
      if (kKind == Kind::kAllreduce) {
        OP_REQUIRES_OK_ASYNC(context,
                             context->forward_input_or_allocate_output(
                                 {i}, i, input.shape(), &outputs[i]),
                             done);
      } else {
        OP_REQUIRES_ASYNC(context, input.dims() >= 1,
                          absl::InvalidArgumentError(absl::StrCat(
                              "terse ", KindName(kKind), " of '", names_[i],
                              "' needs tensors of rank >= 1, got a scalar")),
                          done);
      }
    }
    auto* group = new GroupPending(context, std::move(done), n);
    terse_error* error = terse_group_start(group_name_.c_str());
    if (error != nullptr) {
      const tensorflow::Status status = TakeStatus(error);
      for (int i = 0; i <= n; ++i) group->Arrive(status);
      return;
    }
    for (int i = 0; i < n; ++i) {
      error = Enqueue(context->input(i), outputs[i], dtypes[i], i, group);
      // Refused at enqueue: not held, so no callback will come for it.
      if (error != nullptr) group->Arrive(TakeStatus(error));
    }
    // A member that could not be queued here completes through its
    // callback with the same error, so the status is not counted again.
    terse_error_free(terse_group_end());
    group->Arrive(tensorflow::OkStatus());
  }

 private:
  terse_error* Enqueue(const Tensor& input, Tensor* output, int dtype, int i,
                       GroupPending* group) {
    const std::vector<int64_t> dims = Dims(input.shape());
    const int ndim = static_cast<int>(dims.size());
    switch (kKind) {
      case Kind::kAllreduce:
        return terse_allreduce_set_async(
            names_[i].c_str(), input.data(), output->data(),
            input.NumElements(), dtype, TERSE_DEVICE_CPU, dims.data(), ndim,
            reduce_ops_[i], prescales_[i], postscales_[i], compression_.c_str(),
            process_set_, /*stream=*/nullptr, &GroupPending::OnDone,
            group->member(i), nullptr);
      case Kind::kAllgather:
        return terse_allgather_set_async(
            names_[i].c_str(), input.data(), input.NumElements(), dtype,
            TERSE_DEVICE_CPU, dims.data(), ndim, process_set_,
            /*stream=*/nullptr, &GroupPending::OnResult, group->member(i),
            nullptr);
      case Kind::kReducescatter:
        return terse_reducescatter_set_async(
            names_[i].c_str(), input.data(), input.NumElements(), dtype,
            TERSE_DEVICE_CPU, dims.data(), ndim, reduce_ops_[i], prescales_[i],
            postscales_[i], process_set_, &GroupPending::OnResult,
            group->member(i), nullptr);
    }
    return nullptr;
  }

  std::string group_name_;
  std::vector<std::string> names_;
  std::vector<int> reduce_ops_;
  std::vector<float> prescales_;
  std::vector<float> postscales_;
  std::string compression_;
  int process_set_ = 0;
};

REGISTER_KERNEL_BUILDER(
    Name("TerseGroupedAllreduce").Device(tensorflow::DEVICE_CPU),
    TerseGroupedOp<Kind::kAllreduce>);
REGISTER_KERNEL_BUILDER(
    Name("TerseGroupedAllgather").Device(tensorflow::DEVICE_CPU),
    TerseGroupedOp<Kind::kAllgather>);
REGISTER_KERNEL_BUILDER(
    Name("TerseGroupedReducescatter").Device(tensorflow::DEVICE_CPU),
    TerseGroupedOp<Kind::kReducescatter>);

}  // namespace
}  // namespace tf
}  // namespace terse
