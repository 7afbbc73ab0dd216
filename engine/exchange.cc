#include "engine/exchange.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/data_type.h"
#include "common/status.h"
#include "engine/scale.h"

namespace terse {
namespace {

// Bound on the elements of one tensor, as ValidateRequest's.
constexpr int64_t kMaxElements = int64_t{1} << 40;

absl::Status Malformed(const proto::Response& r, const char* op,
                       absl::string_view why) {
  return absl::DataLossError(absl::StrCat(
      "tensor '", r.names(0), "': malformed ", op, " response: ", why));
}

// Elements of one row (the trailing dimensions), or -1 when invalid.
int64_t RowElements(const proto::Response& r) {
  if (r.shape_size() == 0) return -1;
  std::vector<int64_t> trailing(r.shape().begin() + 1, r.shape().end());
  const int64_t row = ShapeElements(trailing);
  return row > kMaxElements ? -1 : row;
}

bool RowsFit(int64_t rows, int64_t row) {
  return rows >= 0 && rows <= kMaxElements &&
         (row == 0 || rows <= kMaxElements / row);
}

}  // namespace

absl::Status CheckExchange(TensorEntry& e, int size) {
  if (e.op != proto::ALLTOALL && e.op != proto::REDUCESCATTER) {
    return absl::OkStatus();
  }
  const char* op = e.op == proto::ALLTOALL ? "alltoall" : "reducescatter";
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, " of '", e.name, "': ", why));
  };
  if (!e.input.device.is_cpu()) {
    return absl::UnimplementedError(
        absl::StrCat(op, " of '", e.name, "': ", e.input.device.ToString(),
                     " tensors are not implemented; ", op,
                     " takes CPU tensors (copy the tensor to the CPU first)"));
  }
  if (e.shape.empty()) return bad("needs at least one dimension");
  if (e.op == proto::REDUCESCATTER) {
    if (e.reduce_op == ReduceOp::kAdasum) return bad("adasum is not supported");
    return absl::OkStatus();
  }
  // Splits that do not fit the tensor are refused in negotiation rather
  // than here, so that the op fails on every rank, not only on this one
  // (the others would wait for it).
  auto refuse = [&](std::string why) {
    e.refused = std::move(why);
    e.splits.clear();
    return absl::OkStatus();
  };
  const int64_t rows = e.shape[0];
  if (e.splits.empty()) {
    if (size <= 0 || rows % size != 0) {
      return refuse(absl::StrCat("the first dimension ", rows,
                                 " is not divisible by the number of ranks ",
                                 size, "; pass splits"));
    }
    e.splits.assign(size, rows / size);
    return absl::OkStatus();
  }
  if (static_cast<int>(e.splits.size()) != size) {
    return refuse(absl::StrCat("splits has ", e.splits.size(),
                               " entries, one per rank needed (", size, ")"));
  }
  int64_t sum = 0;
  for (int64_t s : e.splits) {
    if (s < 0 || s > rows) {
      return refuse(absl::StrCat("split ", s, " outside [0, ", rows, "]"));
    }
    sum += s;
  }
  if (sum != rows) {
    return refuse(absl::StrCat("splits sum to ", sum,
                               ", the first dimension of the tensor is ",
                               rows));
  }
  return absl::OkStatus();
}

std::vector<int64_t> ReducescatterRows(int64_t rows, int size) {
  std::vector<int64_t> out;
  if (size <= 0) return out;
  out.resize(size, rows / size);
  for (int i = 0; i < rows % size; ++i) ++out[i];
  return out;
}

absl::StatusOr<AllgatherResult> RunAlltoall(Communicator* comm,
                                            const proto::Response& r,
                                            const TensorEntry* entry) {
  const int size = comm->size();
  const int me = comm->rank();
  const int64_t row = RowElements(r);
  if (r.tensor_sizes_size() != size * size || row < 0 ||
      !IsValidDataType(r.dtype())) {
    return Malformed(r, "alltoall", "splits");
  }
  const DataType dtype = static_cast<DataType>(r.dtype());
  const int64_t row_bytes = row * static_cast<int64_t>(DataTypeSize(dtype));
  std::vector<int64_t> send_bytes(size), recv_bytes(size);
  AllgatherResult result;
  result.dtype = dtype;
  result.first_dims.resize(size);
  int64_t send_rows = 0, recv_rows = 0;
  for (int j = 0; j < size; ++j) {
    const int64_t out_rows = r.tensor_sizes(me * size + j);
    const int64_t in_rows = r.tensor_sizes(j * size + me);
    if (!RowsFit(out_rows, row) || !RowsFit(in_rows, row)) {
      return Malformed(r, "alltoall", "splits out of range");
    }
    send_rows += out_rows;
    recv_rows += in_rows;
    if (!RowsFit(send_rows, row) || !RowsFit(recv_rows, row)) {
      return Malformed(r, "alltoall", "too many rows");
    }
    send_bytes[j] = out_rows * row_bytes;
    recv_bytes[j] = in_rows * row_bytes;
    result.first_dims[j] = in_rows;
  }
  result.shape.assign(r.shape().begin(), r.shape().end());
  result.shape[0] = recv_rows;
  result.data.resize(recv_rows * row_bytes);
  std::vector<uint8_t> scratch;
  const void* send = nullptr;
  if (entry != nullptr && entry->input.bytes() == send_rows * row_bytes &&
      entry->input.dtype == dtype) {
    send = entry->input.data;
  } else {
    scratch.assign(send_rows * row_bytes, 0);  // Take part without an op.
    send = scratch.data();
  }
  TERSE_RETURN_IF_ERROR(
      comm->Alltoallv(send, send_bytes, result.data.data(), recv_bytes));
  return result;
}

absl::StatusOr<AllgatherResult> RunReducescatter(Communicator* comm,
                                                 const proto::Response& r,
                                                 const TensorEntry* entry) {
  const int size = comm->size();
  const int me = comm->rank();
  const int64_t row = RowElements(r);
  if (row < 0 || !IsValidDataType(r.dtype()) || !RowsFit(r.shape(0), row) ||
      !proto::ReduceOp_IsValid(r.reduce_op()) ||
      r.reduce_op() == proto::ADASUM) {
    return Malformed(r, "reducescatter", "shape, dtype or op");
  }
  const DataType dtype = static_cast<DataType>(r.dtype());
  const int64_t total = r.shape(0) * row;
  AllgatherResult result;
  result.dtype = dtype;
  result.first_dims = ReducescatterRows(r.shape(0), size);
  std::vector<int64_t> counts(size);
  for (int j = 0; j < size; ++j) counts[j] = result.first_dims[j] * row;
  result.shape.assign(r.shape().begin(), r.shape().end());
  result.shape[0] = result.first_dims[me];
  const size_t elem = DataTypeSize(dtype);
  result.data.resize(counts[me] * elem);
  std::vector<uint8_t> scratch;
  const void* send = nullptr;
  const bool local = entry != nullptr && entry->input.count == total &&
                     entry->input.dtype == dtype;
  if (local && r.prescale() == 1.0) {
    send = entry->input.data;
  } else {
    scratch.assign(total * elem, 0);
    if (local) {
      ScaledCopy(scratch.data(), entry->input.data, total, dtype, r.prescale());
    }
    send = scratch.data();
  }
  const ReduceOp op = static_cast<ReduceOp>(r.reduce_op());
  TERSE_RETURN_IF_ERROR(
      comm->ReduceScatter(send, result.data.data(), counts, dtype,
                          op == ReduceOp::kAverage ? ReduceOp::kSum : op));
  double scale = r.postscale();
  if (op == ReduceOp::kAverage) scale /= size;
  ScaleInPlace(result.data.data(), counts[me], dtype, scale);
  return result;
}

}  // namespace terse
