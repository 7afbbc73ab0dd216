#include "bindings/tensorflow/c_bridge.h"

#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/types.h"

namespace terse {
namespace tf {

tensorflow::Status TerseDType(tensorflow::DataType dtype, int* code) {
  switch (dtype) {
    case tensorflow::DT_FLOAT:
      *code = TERSE_FLOAT32;
      return tensorflow::OkStatus();
    case tensorflow::DT_HALF:
      *code = TERSE_FLOAT16;
      return tensorflow::OkStatus();
    case tensorflow::DT_BFLOAT16:
      *code = TERSE_BFLOAT16;
      return tensorflow::OkStatus();
    case tensorflow::DT_DOUBLE:
      *code = TERSE_FLOAT64;
      return tensorflow::OkStatus();
    case tensorflow::DT_INT32:
      *code = TERSE_INT32;
      return tensorflow::OkStatus();
    case tensorflow::DT_INT64:
      *code = TERSE_INT64;
      return tensorflow::OkStatus();
    case tensorflow::DT_UINT8:
      *code = TERSE_UINT8;
      return tensorflow::OkStatus();
    case tensorflow::DT_INT8:
      *code = TERSE_INT8;
      return tensorflow::OkStatus();
    case tensorflow::DT_INT16:
      *code = TERSE_INT16;
      return tensorflow::OkStatus();
    case tensorflow::DT_BOOL:
      *code = TERSE_BOOL;
      return tensorflow::OkStatus();
    default:
      return absl::InvalidArgumentError(
          "terse does not support dtype " + tensorflow::DataTypeString(dtype) +
          " (supported: float16, bfloat16, float32, float64, int8, int16, "
          "int32, int64, uint8, bool)");
  }
}

std::vector<int64_t> Dims(const tensorflow::TensorShape& shape) {
  std::vector<int64_t> dims;
  dims.reserve(shape.dims());
  for (int d = 0; d < shape.dims(); ++d) dims.push_back(shape.dim_size(d));
  return dims;
}

tensorflow::Status ToStatus(const terse_error* error) {
  if (error == nullptr) return tensorflow::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(terse_error_code(error)),
                      terse_error_message(error));
}

tensorflow::Status ToCollectiveStatus(const terse_error* error) {
  tensorflow::Status status = ToStatus(error);
  if (status.code() == absl::StatusCode::kInvalidArgument) {
    return absl::FailedPreconditionError(status.message());
  }
  return status;
}

tensorflow::Status TakeStatus(terse_error* error) {
  tensorflow::Status status = ToStatus(error);
  terse_error_free(error);
  return status;
}

tensorflow::Status CopyResultToOutput(tensorflow::OpKernelContext* context,
                                      int index,
                                      const terse_allgather_result* result) {
  const int ndim = terse_allgather_result_ndim(result);
  const int64_t* dims = terse_allgather_result_shape(result);
  tensorflow::TensorShape shape;
  for (int d = 0; d < ndim; ++d) {
    TF_RETURN_IF_ERROR(shape.AddDimWithStatus(dims[d]));
  }
  tensorflow::Tensor* output = nullptr;
  TF_RETURN_IF_ERROR(context->allocate_output(index, shape, &output));
  const int64_t bytes = terse_allgather_result_nbytes(result);
  if (bytes != static_cast<int64_t>(output->TotalBytes())) {
    return absl::InternalError(absl::StrCat("terse returned ", bytes,
                                            " bytes for output ", index,
                                            " of shape ", shape.DebugString()));
  }
  if (bytes > 0) {
    std::memcpy(output->data(), terse_allgather_result_data(result), bytes);
  }
  return tensorflow::OkStatus();
}

}  // namespace tf
}  // namespace terse
