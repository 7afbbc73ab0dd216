#include "engine/tensor_entry.h"

#include <limits>

#include "absl/strings/str_join.h"

namespace terse {

proto::Request MakeRequest(const TensorEntry& entry, int rank) {
  proto::Request request;
  request.set_rank(rank);
  request.set_name(entry.name);
  request.set_op(entry.op);
  request.set_reduce_op(static_cast<proto::ReduceOp>(entry.reduce_op));
  request.set_dtype(static_cast<int32_t>(entry.input.dtype));
  for (int64_t d : entry.shape) request.add_shape(d);
  request.set_root_rank(entry.root_rank);
  request.set_device(entry.input.device.is_cpu() ? -1
                                                 : entry.input.device.ordinal);
  request.set_device_kind(static_cast<int32_t>(entry.input.device.kind));
  request.set_prescale(entry.prescale);
  request.set_postscale(entry.postscale);
  request.set_compression(entry.compression);
  for (int64_t s : entry.splits) request.add_splits(s);
  request.set_group(entry.group);
  request.set_group_size(entry.group_size);
  request.set_refused(entry.refused);
  return request;
}

int64_t ShapeElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) return -1;
    n *= d;
  }
  return n;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return "[" + absl::StrJoin(shape, ", ") + "]";
}

}  // namespace terse
