#include "collectives/communicator.h"

#include <numeric>

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
  return Allgatherv(send, recv->data(), *recv_bytes);
}

}  // namespace terse
