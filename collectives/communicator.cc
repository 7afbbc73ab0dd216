#include "collectives/communicator.h"

#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"

namespace terse {

absl::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAverage:
      return "average";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kProduct:
      return "product";
    case ReduceOp::kAdasum:
      return "adasum";
  }
  return "unknown";
}

absl::Status Communicator::AllgathervUnknownSizes(
    const void* send, int64_t send_bytes, std::vector<uint8_t>* recv,
    std::vector<int64_t>* recv_bytes) {
  if (send == nullptr && send_bytes > 0) {
    return absl::InvalidArgumentError("Allgatherv: null send buffer");
  }
  recv_bytes->assign(size(), 0);
  TERSE_RETURN_IF_ERROR(
      Allgather(&send_bytes, recv_bytes->data(), sizeof(int64_t)));
  for (int64_t b : *recv_bytes) {
    if (b < 0) {
      return absl::DataLossError("Allgatherv: a peer announced a negative size");
    }
  }
  int64_t total =
      std::accumulate(recv_bytes->begin(), recv_bytes->end(), int64_t{0});
  recv->resize(total);
  return AllgathervAgreedSizes(send, recv->data(), *recv_bytes);
}

absl::Status Communicator::AllgathervAgreedSizes(
    const void* send, void* recv, const std::vector<int64_t>& recv_bytes) {
  return Allgatherv(send, recv, recv_bytes);
}

absl::Status Communicator::AllreduceStaged(void* buffer, int64_t count,
                                           DataType dtype, ReduceOp op,
                                           const Staging& staging) {
  if (count > 0) staging.fill(0, count);
  TERSE_RETURN_IF_ERROR(Allreduce(buffer, count, dtype, op));
  if (count > 0) staging.drain(0, count);
  return absl::OkStatus();
}

absl::Status Communicator::Alltoallv(const void*, const std::vector<int64_t>&,
                                     void*, const std::vector<int64_t>&) {
  return absl::UnimplementedError(absl::StrCat(
      "the ", backend(), " communicator has no alltoallv"));
}

absl::Status Communicator::ReduceScatter(const void*, void*,
                                         const std::vector<int64_t>&, DataType,
                                         ReduceOp) {
  return absl::UnimplementedError(absl::StrCat(
      "the ", backend(), " communicator has no reduce-scatter"));
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::CreateSubgroup(
    const std::vector<int>& ranks) {
  TERSE_RETURN_IF_ERROR(CheckSubgroupRanks(ranks, size()));
  return absl::UnimplementedError(absl::StrCat(
      "the ", backend(), " communicator cannot create sub-groups (process ",
      "sets need the mpi or loopback backend for CPU tensors)"));
}

absl::Status CheckSubgroupRanks(const std::vector<int>& ranks, int size) {
  if (ranks.empty()) {
    return absl::InvalidArgumentError("a sub-group needs at least one rank");
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= size) {
      return absl::InvalidArgumentError(
          absl::StrCat("sub-group rank ", ranks[i], " outside [0, ", size,
                       ") in [", absl::StrJoin(ranks, ","), "]"));
    }
    if (i > 0 && ranks[i] <= ranks[i - 1]) {
      return absl::InvalidArgumentError(
          absl::StrCat("sub-group ranks must be sorted and distinct, not [",
                       absl::StrJoin(ranks, ","), "]"));
    }
  }
  return absl::OkStatus();
}

}  // namespace terse
