// The CPU kernel of TerseGroupedAllreduce (ops.cc): enqueues one engine
// allreduce per input between terse_group_start and terse_group_end, so
// the engine answers them as one group (one negotiation cycle, fused only
// among themselves, failing as one), and calls `done` when the last of
// them has completed. The group is opened and closed on the thread that
// runs ComputeAsync, which is what the C ABI keys a group by.
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

// The group in flight: counts the members still to complete (plus one for
// the kernel itself, released once every member is enqueued, so that `done`
// never runs while ComputeAsync still uses the context), keeps the first
// error, and finishes the op when the count reaches zero. Deletes itself.
class GroupPending {
 public:
  GroupPending(OpKernelContext* context, AsyncOpKernel::DoneCallback done,
               int members)
      : context_(context), done_(std::move(done)), remaining_(members + 1) {}

  // terse_done_fn of each member.
  static void OnDone(void* user_data, const terse_error* error,
                     const terse_allgather_result*) {
    static_cast<GroupPending*>(user_data)->Arrive(ToCollectiveStatus(error));
  }

  // A member (or the kernel's own count) is done, with `status`.
  void Arrive(const tensorflow::Status& status) {
    bool last = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!status.ok() && error_.ok()) error_ = status;
      last = --remaining_ == 0;
    }
    if (!last) return;
    if (!error_.ok()) context_->SetStatus(error_);
    AsyncOpKernel::DoneCallback done = std::move(done_);
    delete this;
    done();
  }

 private:
  OpKernelContext* const context_;
  AsyncOpKernel::DoneCallback done_;
  // std::mutex: this library links TensorFlow's abseil headers only.
  std::mutex mu_;
  int remaining_;              // Guarded by mu_.
  tensorflow::Status error_;   // Guarded by mu_.
};

class TerseGroupedAllreduceOp : public AsyncOpKernel {
 public:
  explicit TerseGroupedAllreduceOp(OpKernelConstruction* c)
      : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("group_name", &group_name_));
    OP_REQUIRES_OK(c, c->GetAttr("tensor_names", &names_));
    OP_REQUIRES_OK(c, c->GetAttr("reduce_ops", &reduce_ops_));
    OP_REQUIRES_OK(c, c->GetAttr("prescale_factors", &prescales_));
    OP_REQUIRES_OK(c, c->GetAttr("postscale_factors", &postscales_));
    OP_REQUIRES_OK(c, c->GetAttr("compression", &compression_));
    OP_REQUIRES_OK(c, c->GetAttr("process_set", &process_set_));
    const size_t n = static_cast<size_t>(c->num_inputs());
    OP_REQUIRES(c,
                names_.size() == n && reduce_ops_.size() == n &&
                    prescales_.size() == n && postscales_.size() == n,
                absl::InvalidArgumentError(absl::StrCat(
                    "terse grouped allreduce '", group_name_, "': ", n,
                    " tensors but ", names_.size(), " names, ",
                    reduce_ops_.size(), " reduce ops, ", prescales_.size(),
                    " prescale and ", postscales_.size(),
                    " postscale factors")));
  }

  void ComputeAsync(OpKernelContext* context, DoneCallback done) override {
    const int n = context->num_inputs();
    // Every input's dtype and output before the group opens, so a bad input
    // fails the op without enqueueing a part of the group.
    std::vector<int> dtypes(n);
    std::vector<Tensor*> outputs(n, nullptr);
    for (int i = 0; i < n; ++i) {
      const Tensor& input = context->input(i);
      OP_REQUIRES_OK_ASYNC(context, TerseDType(input.dtype(), &dtypes[i]),
                           done);
      OP_REQUIRES_OK_ASYNC(context,
                           context->forward_input_or_allocate_output(
                               {i}, i, input.shape(), &outputs[i]),
                           done);
    }
    auto* group = new GroupPending(context, std::move(done), n);
    terse_error* error = terse_group_start(group_name_.c_str());
    if (error != nullptr) {
      const tensorflow::Status status = TakeStatus(error);
      for (int i = 0; i <= n; ++i) group->Arrive(status);
      return;
    }
    for (int i = 0; i < n; ++i) {
      const Tensor& input = context->input(i);
      const std::vector<int64_t> dims = Dims(input.shape());
      error = terse_allreduce_set_async(
          names_[i].c_str(), input.data(), outputs[i]->data(),
          input.NumElements(), dtypes[i], TERSE_DEVICE_CPU, dims.data(),
          static_cast<int>(dims.size()), reduce_ops_[i], prescales_[i],
          postscales_[i], compression_.c_str(), process_set_,
          /*stream=*/nullptr, &GroupPending::OnDone, group, nullptr);
      // Refused at enqueue: not held, so no callback will come for it.
      if (error != nullptr) group->Arrive(TakeStatus(error));
    }
    // A member that could not be queued here completes through its
    // callback with the same error, so the status is not counted again.
    terse_error_free(terse_group_end());
    group->Arrive(tensorflow::OkStatus());
  }

 private:
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
    TerseGroupedAllreduceOp);

}  // namespace
}  // namespace tf
}  // namespace terse
