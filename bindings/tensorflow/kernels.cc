// CPU kernels of TerseAllreduce, TerseAllgather, TerseBroadcast,
// TerseAlltoall, TerseReducescatter and TerseProcessInfo (see ops.cc):
// AsyncOpKernels that enqueue into the engine through the C ABI and call `done`
// from the engine's completion callback, which runs on libterse.so's completion
// thread. The op's inputs stay alive until `done`: TensorFlow holds them for an
// async kernel that has not finished.
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bindings/c/terse_c.h"
#include "bindings/tensorflow/c_bridge.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace terse {
namespace tf {
namespace {

using ::tensorflow::AsyncOpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

// One operation in flight: the kernel context and its `done`, owned until
// the engine calls back.
class Pending {
 public:
  Pending(OpKernelContext* context, AsyncOpKernel::DoneCallback done)
      : context_(context), done_(std::move(done)) {}

  // terse_done_fn for operations without a result.
  static void OnDone(void* user_data, const terse_error* error,
                     const terse_allgather_result*) {
    auto* pending = static_cast<Pending*>(user_data);
    pending->Finish(ToCollectiveStatus(error));
  }

  // terse_done_fn for an allgather: allocates the output and copies the
  // gathered tensor into it.
  static void OnGathered(void* user_data, const terse_error* error,
                         const terse_allgather_result* result) {
    auto* pending = static_cast<Pending*>(user_data);
    tensorflow::Status status = ToCollectiveStatus(error);
    if (status.ok()) status = pending->CopyOut(result);
    pending->Finish(status);
  }

  // terse_done_fn for an alltoall: the received rows into output 0, the
  // rows from each rank into output 1.
  static void OnExchanged(void* user_data, const terse_error* error,
                          const terse_allgather_result* result) {
    auto* pending = static_cast<Pending*>(user_data);
    tensorflow::Status status = ToCollectiveStatus(error);
    if (status.ok()) status = pending->CopyOut(result);
    if (status.ok()) status = pending->CopySplits(result);
    pending->Finish(status);
  }

  // Completes the op with `status` and deletes this.
  void Finish(const tensorflow::Status& status) {
    if (!status.ok()) context_->SetStatus(status);
    AsyncOpKernel::DoneCallback done = std::move(done_);
    delete this;
    done();
  }

 private:
  tensorflow::Status CopyOut(const terse_allgather_result* result) {
    return CopyResultToOutput(context_, 0, result);
  }

  tensorflow::Status CopySplits(const terse_allgather_result* result) {
    const int n = terse_allgather_result_num_ranks(result);
    const int64_t* rows = terse_allgather_result_first_dims(result);
    Tensor* output = nullptr;
    TF_RETURN_IF_ERROR(context_->allocate_output(1, TensorShape({n}), &output));
    for (int i = 0; i < n; ++i) {
      output->vec<int32_t>()(i) = static_cast<int32_t>(rows[i]);
    }
    return tensorflow::OkStatus();
  }

  OpKernelContext* context_;
  AsyncOpKernel::DoneCallback done_;
};

// The name ranks match this op by: the tensor_name attribute, else the
// node's name.
std::string OpName(OpKernelConstruction* c) {
  std::string name;
  if (!c->GetAttr("tensor_name", &name).ok() || name.empty()) {
    name = c->def().name();
  }
  return name;
}

// The checks every op on rows (dimension 0) makes of its input: a tensor
// of rank >= 1 of a type terse moves; sets the terse dtype.
tensorflow::Status CheckRowsInput(const Tensor& input, const char* op,
                                  const std::string& name, int* dtype) {
  if (input.dims() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("terse ", op, " of '", name,
                     "' needs a tensor of rank >= 1, got a scalar"));
  }
  return TerseDType(input.dtype(), dtype);
}

class TerseAllreduceOp : public AsyncOpKernel {
 public:
  explicit TerseAllreduceOp(OpKernelConstruction* c)
      : AsyncOpKernel(c), name_(OpName(c)) {
    OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &reduce_op_));
    OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &prescale_));
    OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &postscale_));
    OP_REQUIRES_OK(c, c->GetAttr("compression", &compression_));
    OP_REQUIRES_OK(c, c->GetAttr("process_set", &process_set_));
  }

  void ComputeAsync(OpKernelContext* context, DoneCallback done) override {
    const Tensor& input = context->input(0);
    int dtype = 0;
    OP_REQUIRES_OK_ASYNC(context, TerseDType(input.dtype(), &dtype), done);
    Tensor* output = nullptr;
    OP_REQUIRES_OK_ASYNC(context,
                         context->forward_input_or_allocate_output(
                             {0}, 0, input.shape(), &output),
                         done);
    const std::vector<int64_t> dims = Dims(input.shape());
    auto* pending = new Pending(context, std::move(done));
    terse_error* error = terse_allreduce_set_async(
        name_.c_str(), input.data(), output->data(), input.NumElements(), dtype,
        TERSE_DEVICE_CPU, dims.data(), static_cast<int>(dims.size()),
        reduce_op_, prescale_, postscale_, compression_.c_str(), process_set_,
        /*stream=*/nullptr, &Pending::OnDone, pending, nullptr);
    if (error != nullptr) pending->Finish(TakeStatus(error));
  }

 private:
  const std::string name_;
  int reduce_op_ = TERSE_OP_SUM;
  float prescale_ = 1.0f;
  float postscale_ = 1.0f;
  std::string compression_;
  int process_set_ = 0;
};

class TerseAllgatherOp : public AsyncOpKernel {
 public:
  explicit TerseAllgatherOp(OpKernelConstruction* c)
      : AsyncOpKernel(c), name_(OpName(c)) {
    OP_REQUIRES_OK(c, c->GetAttr("process_set", &process_set_));
  }

  void ComputeAsync(OpKernelContext* context, DoneCallback done) override {
    const Tensor& input = context->input(0);
    int dtype = 0;
    OP_REQUIRES_OK_ASYNC(
        context, CheckRowsInput(input, "allgather", name_, &dtype), done);
    const std::vector<int64_t> dims = Dims(input.shape());
    auto* pending = new Pending(context, std::move(done));
    terse_error* error = terse_allgather_set_async(
        name_.c_str(), input.data(), input.NumElements(), dtype,
        TERSE_DEVICE_CPU, dims.data(), static_cast<int>(dims.size()),
        process_set_, /*stream=*/nullptr, &Pending::OnGathered, pending,
        nullptr);
    if (error != nullptr) pending->Finish(TakeStatus(error));
  }

 private:
  const std::string name_;
  int process_set_ = 0;
};

class TerseAlltoallOp : public AsyncOpKernel {
 public:
  explicit TerseAlltoallOp(OpKernelConstruction* c)
      : AsyncOpKernel(c), name_(OpName(c)) {
    OP_REQUIRES_OK(c, c->GetAttr("process_set", &process_set_));
  }

  void ComputeAsync(OpKernelContext* context, DoneCallback done) override {
    const Tensor& input = context->input(0);
    const Tensor& splits = context->input(1);
    int dtype = 0;
    OP_REQUIRES_OK_ASYNC(
        context, CheckRowsInput(input, "alltoall", name_, &dtype), done);
    OP_REQUIRES_ASYNC(context, splits.dims() == 1,
                      absl::InvalidArgumentError("terse alltoall of '" + name_ +
                                                 "': splits must be a vector"),
                      done);
    const std::vector<int64_t> dims = Dims(input.shape());
    const auto flat = splits.flat<int64_t>();
    const std::vector<int64_t> split_list(flat.data(),
                                          flat.data() + flat.size());
    auto* pending = new Pending(context, std::move(done));
    terse_error* error = terse_alltoall_set_async(
        name_.c_str(), input.data(), input.NumElements(), dtype,
        TERSE_DEVICE_CPU, dims.data(), static_cast<int>(dims.size()),
        split_list.data(), static_cast<int>(split_list.size()), process_set_,
        &Pending::OnExchanged, pending, nullptr);
    if (error != nullptr) pending->Finish(TakeStatus(error));
  }

 private:
  const std::string name_;
  int process_set_ = 0;
};

class TerseReducescatterOp : public AsyncOpKernel {
 public:
  explicit TerseReducescatterOp(OpKernelConstruction* c)
      : AsyncOpKernel(c), name_(OpName(c)) {
    OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &reduce_op_));
    OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &prescale_));
    OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &postscale_));
    OP_REQUIRES_OK(c, c->GetAttr("process_set", &process_set_));
  }

  void ComputeAsync(OpKernelContext* context, DoneCallback done) override {
    const Tensor& input = context->input(0);
    int dtype = 0;
    OP_REQUIRES_OK_ASYNC(
        context, CheckRowsInput(input, "reducescatter", name_, &dtype), done);
    const std::vector<int64_t> dims = Dims(input.shape());
    auto* pending = new Pending(context, std::move(done));
    terse_error* error = terse_reducescatter_set_async(
        name_.c_str(), input.data(), input.NumElements(), dtype,
        TERSE_DEVICE_CPU, dims.data(), static_cast<int>(dims.size()),
        reduce_op_, prescale_, postscale_, process_set_, &Pending::OnGathered,
        pending, nullptr);
    if (error != nullptr) pending->Finish(TakeStatus(error));
  }

 private:
  const std::string name_;
  int reduce_op_ = TERSE_OP_SUM;
  float prescale_ = 1.0f;
  float postscale_ = 1.0f;
  int process_set_ = 0;
};

class TerseBroadcastOp : public AsyncOpKernel {
 public:
  explicit TerseBroadcastOp(OpKernelConstruction* c)
      : AsyncOpKernel(c), name_(OpName(c)) {
    OP_REQUIRES_OK(c, c->GetAttr("root_rank", &root_rank_));
    OP_REQUIRES_OK(c, c->GetAttr("process_set", &process_set_));
  }

  void ComputeAsync(OpKernelContext* context, DoneCallback done) override {
    const Tensor& input = context->input(0);
    int dtype = 0;
    OP_REQUIRES_OK_ASYNC(context, TerseDType(input.dtype(), &dtype), done);
    Tensor* output = nullptr;
    OP_REQUIRES_OK_ASYNC(context,
                         context->forward_input_or_allocate_output(
                             {0}, 0, input.shape(), &output),
                         done);
    // In place on the output: the root sends its input, the others overwrite.
    if (output->data() != input.data() && input.TotalBytes() > 0) {
      std::memcpy(output->data(), input.data(), input.TotalBytes());
    }
    const std::vector<int64_t> dims = Dims(input.shape());
    auto* pending = new Pending(context, std::move(done));
    terse_error* error = terse_broadcast_set_async(
        name_.c_str(), output->data(), output->NumElements(), dtype,
        TERSE_DEVICE_CPU, dims.data(), static_cast<int>(dims.size()),
        root_rank_, process_set_, /*stream=*/nullptr, &Pending::OnDone, pending,
        nullptr);
    if (error != nullptr) pending->Finish(TakeStatus(error));
  }

 private:
  const std::string name_;
  int root_rank_ = 0;
  int process_set_ = 0;
};

// A synchronous kernel: the engine answers from its configuration.
class TerseProcessInfoOp : public tensorflow::OpKernel {
 public:
  explicit TerseProcessInfoOp(OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("what", &what_));
    OP_REQUIRES_OK(c, c->GetAttr("process_set", &process_set_));
  }

  void Compute(OpKernelContext* context) override {
    int value = 0;
    terse_error* error = nullptr;
    if (process_set_ != 0 && what_ != "local_rank" && what_ != "local_size") {
      error = SetInfo(&value);
    } else if (what_ == "included") {
      value = 1;  // Every process is in the global set.
    } else if (what_ == "rank") {
      error = terse_rank(&value);
    } else if (what_ == "size") {
      error = terse_size(&value);
    } else if (what_ == "local_rank") {
      error = terse_local_rank(&value);
    } else {
      error = terse_local_size(&value);
    }
    if (error != nullptr) {
      context->SetStatus(TakeStatus(error));
      return;
    }
    Tensor* output = nullptr;
    OP_REQUIRES_OK(context,
                   context->allocate_output(0, TensorShape({}), &output));
    output->scalar<int32_t>()() = value;
  }

 private:
  // size, rank (-1 off the set) or included (1/0) of process_set_.
  terse_error* SetInfo(int* value) {
    int size = 0;
    terse_error* error = terse_process_set_size(process_set_, &size);
    if (error != nullptr) return error;
    if (what_ == "size") {
      *value = size;
      return nullptr;
    }
    std::vector<int> ranks(size);
    error = terse_process_set_ranks(process_set_, ranks.data(), size);
    if (error != nullptr) return error;
    int me = 0;
    error = terse_rank(&me);
    if (error != nullptr) return error;
    int index = -1;
    for (int i = 0; i < size; ++i) {
      if (ranks[i] == me) index = i;
    }
    *value = what_ == "rank" ? index : (index >= 0 ? 1 : 0);
    return nullptr;
  }

  std::string what_;
  int process_set_ = 0;
};

REGISTER_KERNEL_BUILDER(Name("TerseAllreduce").Device(tensorflow::DEVICE_CPU),
                        TerseAllreduceOp);
REGISTER_KERNEL_BUILDER(Name("TerseAllgather").Device(tensorflow::DEVICE_CPU),
                        TerseAllgatherOp);
REGISTER_KERNEL_BUILDER(Name("TerseBroadcast").Device(tensorflow::DEVICE_CPU),
                        TerseBroadcastOp);
REGISTER_KERNEL_BUILDER(Name("TerseAlltoall").Device(tensorflow::DEVICE_CPU),
                        TerseAlltoallOp);
REGISTER_KERNEL_BUILDER(
    Name("TerseReducescatter").Device(tensorflow::DEVICE_CPU),
    TerseReducescatterOp);
REGISTER_KERNEL_BUILDER(Name("TerseProcessInfo").Device(tensorflow::DEVICE_CPU),
                        TerseProcessInfoOp);

}  // namespace
}  // namespace tf
}  // namespace terse
