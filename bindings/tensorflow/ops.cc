// The op definitions of terse's TensorFlow op library: TerseAllreduce,
// TerseAllgather, TerseBroadcast, TerseAlltoall, TerseReducescatter,
// TerseGroupedAllreduce, TerseGroupedAllgather, TerseGroupedReducescatter
// and TerseProcessInfo. Their kernels (kernels.cc,
// grouped_kernels.cc) enqueue into the process's one engine (libterse.so)
// and finish asynchronously, so they
// work eagerly and inside tf.function graphs, where independent ops are in
// flight together and the engine fuses them.
//
// Every op carries `tensor_name`, the name ranks match operations by; the
// Python wrappers (terse.tensorflow) always set it. The ops are not marked
// stateful: TensorFlow would then run them one after the other.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace terse {
namespace tf {
namespace {

using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

// uint16 is not an engine type: terse.tensorflow moves it as int16 bits
// (ops.py), so the kernels never see it.
REGISTER_OP("TerseAllreduce")
    .Attr(
        "T: {half, bfloat16, float, double, int8, int16, int32, int64, "
        "uint8}")
    .Attr("tensor_name: string")
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("compression: string = ''")
    .Attr("process_set: int = 0")
    .Input("tensor: T")
    .Output("reduced: T")
    .SetShapeFn(::tensorflow::shape_inference::UnchangedShape)
    .Doc(R"doc(
Reduces `tensor` over all ranks (reduce_op: 0 sum, 1 average, 2 min, 3 max,
4 product, 5 adasum, where the engine has them). prescale_factor /
postscale_factor multiply the input before and the result after the
reduction (floating-point types). compression: the engine's per-call spec
("fp16", "topk:100", ...); empty: the engine's policy. process_set: the
id of the process set to reduce over (0: every rank). Every member must run
an op of the same tensor_name, dtype and shape.
)doc");

REGISTER_OP("TerseAllgather")
    .Attr(
        "T: {half, bfloat16, float, double, int8, int16, int32, int64, "
        "uint8, bool}")
    .Attr("tensor_name: string")
    .Attr("process_set: int = 0")
    .Input("tensor: T")
    .Output("gathered: T")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle input;
      TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(0), 1, &input));
      ShapeHandle rest;
      TF_RETURN_IF_ERROR(c->Subshape(input, 1, &rest));
      ShapeHandle output;
      TF_RETURN_IF_ERROR(
          c->Concatenate(c->Vector(c->UnknownDim()), rest, &output));
      c->set_output(0, output);
      return ::tensorflow::OkStatus();
    })
    .Doc(R"doc(
Concatenates every member's `tensor` along dimension 0, in rank order
(process_set: the set's id, 0 for every rank). The first dimension may
differ across ranks; the others must agree.
)doc");

REGISTER_OP("TerseBroadcast")
    .Attr(
        "T: {half, bfloat16, float, double, int8, int16, int32, int64, "
        "uint8, bool}")
    .Attr("tensor_name: string")
    .Attr("root_rank: int")
    .Attr("process_set: int = 0")
    .Input("tensor: T")
    .Output("broadcast: T")
    .SetShapeFn(::tensorflow::shape_inference::UnchangedShape)
    .Doc(R"doc(
root_rank's `tensor`, on every member of process_set (0: every rank);
root_rank is a world rank in the set. Same dtype and shape everywhere.
)doc");

// Rank-1 or more input; output of an unknown first dimension, the rest as
// the input's.
::tensorflow::Status RowsUnknown(InferenceContext* c) {
  ShapeHandle input;
  TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(0), 1, &input));
  ShapeHandle rest;
  TF_RETURN_IF_ERROR(c->Subshape(input, 1, &rest));
  ShapeHandle output;
  TF_RETURN_IF_ERROR(c->Concatenate(c->Vector(c->UnknownDim()), rest, &output));
  c->set_output(0, output);
  return ::tensorflow::OkStatus();
}

REGISTER_OP("TerseAlltoall")
    .Attr(
        "T: {half, bfloat16, float, double, int8, int16, int32, int64, "
        "uint8, bool}")
    .Attr("tensor_name: string")
    .Attr("process_set: int = 0")
    .Input("tensor: T")
    .Input("splits: int64")
    .Output("received: T")
    .Output("received_splits: int32")
    .SetShapeFn([](InferenceContext* c) {
      TF_RETURN_IF_ERROR(RowsUnknown(c));
      c->set_output(1, c->Vector(c->UnknownDim()));
      return ::tensorflow::OkStatus();
    })
    .Doc(R"doc(
The engine's native alltoall: sends splits[j] consecutive rows of `tensor`
to member j of process_set (0: every rank) and receives the rows every
member sent here, in rank order; received_splits: how many from each.
splits: one non-negative count per member, summing to the first dimension.
Dtype and the dimensions after the first must agree across members.
)doc");

REGISTER_OP("TerseReducescatter")
    .Attr(
        "T: {half, bfloat16, float, double, int8, int16, int32, int64, "
        "uint8}")
    .Attr("tensor_name: string")
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("process_set: int = 0")
    .Input("tensor: T")
    .Output("scattered: T")
    .SetShapeFn(RowsUnknown)
    .Doc(R"doc(
The engine's native reducescatter: the reduction of `tensor` over the
members of process_set (reduce_op and factors as TerseAllreduce's; not
adasum), of which member i receives its rows of dimension 0: rows / size
each, the first rows % size members one more (Horovod's split). Shape,
dtype, op and factors must agree across members.
)doc");

// N tensors of any engine dtypes; output i has input i's shape.
REGISTER_OP("TerseGroupedAllreduce")
    .Attr(
        "T: list({half, bfloat16, float, double, int8, int16, int32, int64, "
        "uint8})")
    .Attr("group_name: string")
    .Attr("tensor_names: list(string)")
    .Attr("reduce_ops: list(int)")
    .Attr("prescale_factors: list(float)")
    .Attr("postscale_factors: list(float)")
    .Attr("compression: string = ''")
    .Attr("process_set: int = 0")
    .Input("tensors: T")
    .Output("reduced: T")
    .SetShapeFn([](InferenceContext* c) {
      for (int i = 0; i < c->num_inputs(); ++i) c->set_output(i, c->input(i));
      return ::tensorflow::OkStatus();
    })
    .Doc(R"doc(
Allreduces every tensor of `tensors` as one engine group (the C ABI's
terse_group_start / terse_group_end): the engine negotiates them in one
cycle once each is ready on every rank, fuses them only among themselves,
and fails them all, on every rank, if one fails. Tensor i is named
tensor_names[i] and reduced with reduce_ops[i], prescale_factors[i] and
postscale_factors[i] (as TerseAllreduce's attributes); group_name names the
group, the same on every rank.
)doc");

// Every output i: input i's shape with an unknown first dimension.
::tensorflow::Status EachRowsUnknown(InferenceContext* c) {
  for (int i = 0; i < c->num_inputs(); ++i) {
    ShapeHandle input;
    TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(i), 1, &input));
    ShapeHandle rest;
    TF_RETURN_IF_ERROR(c->Subshape(input, 1, &rest));
    ShapeHandle output;
    TF_RETURN_IF_ERROR(
        c->Concatenate(c->Vector(c->UnknownDim()), rest, &output));
    c->set_output(i, output);
  }
  return ::tensorflow::OkStatus();
}

REGISTER_OP("TerseGroupedAllgather")
    .Attr(
        "T: list({half, bfloat16, float, double, int8, int16, int32, int64, "
        "uint8, bool})")
    .Attr("group_name: string")
    .Attr("tensor_names: list(string)")
    .Attr("process_set: int = 0")
    .Input("tensors: T")
    .Output("gathered: T")
    .SetShapeFn(EachRowsUnknown)
    .Doc(R"doc(
Allgathers every tensor of `tensors` (as TerseAllgather, tensor i named
tensor_names[i]) as one engine group, like TerseGroupedAllreduce.
)doc");

REGISTER_OP("TerseGroupedReducescatter")
    .Attr(
        "T: list({half, bfloat16, float, double, int8, int16, int32, int64, "
        "uint8})")
    .Attr("group_name: string")
    .Attr("tensor_names: list(string)")
    .Attr("reduce_ops: list(int)")
    .Attr("prescale_factors: list(float)")
    .Attr("postscale_factors: list(float)")
    .Attr("process_set: int = 0")
    .Input("tensors: T")
    .Output("scattered: T")
    .SetShapeFn(EachRowsUnknown)
    .Doc(R"doc(
Reducescatters every tensor of `tensors` (as TerseReducescatter, tensor i
named tensor_names[i] with reduce_ops[i] and its factors) as one engine
group, like TerseGroupedAllreduce.
)doc");

// Stateful: read when the op runs, never folded into a constant while a
// graph is optimized (rank_op() and friends).
REGISTER_OP("TerseProcessInfo")
    .Attr("what: {'rank', 'size', 'local_rank', 'local_size', 'included'}")
    .Attr("process_set: int = 0")
    .Output("value: int32")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape)
    .Doc(R"doc(
This process's rank, size, local_rank or local_size, read from the engine
when the op runs (FailedPrecondition before init()). With a process_set
other than 0: size is the set's, rank the rank within it (-1 off the set),
included 1 or 0.
)doc");

}  // namespace
}  // namespace tf
}  // namespace terse
