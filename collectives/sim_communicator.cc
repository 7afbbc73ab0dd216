#include "collectives/sim_communicator.h"

#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace terse {

SimDeviceCommunicator::SimDeviceCommunicator(
    std::unique_ptr<Communicator> host, DeviceRuntime* sim, int ordinal)
    : host_(std::move(host)), sim_(sim), ordinal_(ordinal) {}

absl::Status SimDeviceCommunicator::Check(const void* ptr, int64_t bytes,
                                          const char* what) {
  return sim_->CheckDeviceMemory(
      ptr, bytes, ordinal_,
      absl::StrCat("sim communicator (rank ", rank(), "): ", what));
}

absl::Status SimDeviceCommunicator::Allreduce(void* buffer, int64_t count,
                                              DataType dtype, ReduceOp op) {
  if (count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sim communicator: negative count ", count));
  }
  TERSE_RETURN_IF_ERROR(Check(
      buffer, count * static_cast<int64_t>(DataTypeSize(dtype)), "buffer"));
  return host_->Allreduce(buffer, count, dtype, op);
}

absl::Status SimDeviceCommunicator::Allgather(const void* send, void* recv,
                                              int64_t bytes_per_rank) {
  if (bytes_per_rank < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sim communicator: negative bytes_per_rank ", bytes_per_rank));
  }
  TERSE_RETURN_IF_ERROR(Check(send, bytes_per_rank, "send"));
  TERSE_RETURN_IF_ERROR(Check(recv, bytes_per_rank * size(), "recv"));
  return host_->Allgather(send, recv, bytes_per_rank);
}

absl::Status SimDeviceCommunicator::CheckAllgatherv(
    const void* send, void* recv, const std::vector<int64_t>& recv_bytes) {
  if (static_cast<int>(recv_bytes.size()) != size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("sim communicator: recv_bytes has ", recv_bytes.size(),
                     " entries for ", size(), " ranks"));
  }
  int64_t total = 0;
  for (int64_t b : recv_bytes) {
    if (b < 0) {
      return absl::InvalidArgumentError(
          "sim communicator: negative entry in recv_bytes");
    }
    total += b;
  }
  TERSE_RETURN_IF_ERROR(Check(send, recv_bytes[rank()], "send"));
  return Check(recv, total, "recv");
}

absl::Status SimDeviceCommunicator::Allgatherv(
    const void* send, void* recv, const std::vector<int64_t>& recv_bytes) {
  TERSE_RETURN_IF_ERROR(CheckAllgatherv(send, recv, recv_bytes));
  return host_->Allgatherv(send, recv, recv_bytes);
}

absl::Status SimDeviceCommunicator::AllgathervAgreedSizes(
    const void* send, void* recv, const std::vector<int64_t>& recv_bytes) {
  TERSE_RETURN_IF_ERROR(CheckAllgatherv(send, recv, recv_bytes));
  // The host's own variant: over MPI it skips Allgatherv's size check.
  return host_->AllgathervAgreedSizes(send, recv, recv_bytes);
}

absl::Status SimDeviceCommunicator::Broadcast(void* buffer, int64_t bytes,
                                              int root) {
  TERSE_RETURN_IF_ERROR(Check(buffer, bytes, "buffer"));
  return host_->Broadcast(buffer, bytes, root);
}

absl::Status RegisterSimBackend(BackendTable* table, DeviceRuntime* sim) {
  if (table == nullptr || sim == nullptr ||
      sim->kind() != Device::Kind::kSim) {
    return absl::InvalidArgumentError(
        "RegisterSimBackend: needs a table and a simulated-device runtime");
  }
  return table->Register(
      "sim", Device::Kind::kSim,
      [sim](Device device, Communicator* control)
          -> absl::StatusOr<std::unique_ptr<Communicator>> {
        if (control == nullptr) {
          return absl::FailedPreconditionError(
              "the sim backend needs the control communicator");
        }
        return std::unique_ptr<Communicator>(new SimDeviceCommunicator(
            BorrowCommunicator(control), sim, device.ordinal));
      });
}

}  // namespace terse
