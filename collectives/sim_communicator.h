// SimDeviceCommunicator: the communicator for simulated-device buffers
// (Device::Kind::kSim, device/sim_runtime.h), so that the engine's device
// path runs in CI: it moves the buffers with a host communicator (loopback
// in unit tests, MPI under mpirun), the way NCCL moves CUDA buffers.
//
// Every buffer argument must be simulated-device memory of this
// communicator's device (SimRuntime::CheckDeviceMemory): anything else is
// InvalidArgument naming the argument, as NcclCommunicator refuses host
// memory. BitwiseAnd/Or take host words (negotiation), like NCCL's.
//
// Completion: like the host backends, a call returns when this rank's part
// is done. The caller makes the stream work that produces the buffers
// complete first (the engine synchronises its device stream before a
// collective) and enqueues the work that consumes them after.
//
// Ownership: owns `host` (which may borrow another communicator, see
// BorrowCommunicator); `sim` must outlive it. Thread-compatible, like every
// communicator.
#ifndef TERSE_COLLECTIVES_SIM_COMMUNICATOR_H_
#define TERSE_COLLECTIVES_SIM_COMMUNICATOR_H_

#include <memory>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/registry.h"
#include "device/runtime.h"

namespace terse {

class SimDeviceCommunicator : public Communicator {
 public:
  SimDeviceCommunicator(std::unique_ptr<Communicator> host,
                        DeviceRuntime* sim, int ordinal);

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  int local_rank() const override { return host_->local_rank(); }
  int local_size() const override { return host_->local_size(); }
  absl::string_view backend() const override { return "sim"; }

  absl::Status Allreduce(void* buffer, int64_t count, DataType dtype,
                         ReduceOp op) override;
  absl::Status Allgather(const void* send, void* recv,
                         int64_t bytes_per_rank) override;
  absl::Status Allgatherv(const void* send, void* recv,
                          const std::vector<int64_t>& recv_bytes) override;
  absl::Status AllgathervAgreedSizes(
      const void* send, void* recv,
      const std::vector<int64_t>& recv_bytes) override;
  absl::Status Broadcast(void* buffer, int64_t bytes, int root) override;
  absl::Status Barrier() override { return host_->Barrier(); }
  absl::Status BitwiseAnd(uint64_t* words, int64_t count) override {
    return host_->BitwiseAnd(words, count);
  }
  absl::Status BitwiseOr(uint64_t* words, int64_t count) override {
    return host_->BitwiseOr(words, count);
  }
  absl::Status Synchronize() override { return host_->Synchronize(); }

 private:
  absl::Status Check(const void* ptr, int64_t bytes, const char* what);
  // Allgatherv's arguments: one size a rank, none negative, simulated-device
  // memory of those sizes.
  absl::Status CheckAllgatherv(const void* send, void* recv,
                               const std::vector<int64_t>& recv_bytes);

  const std::unique_ptr<Communicator> host_;
  DeviceRuntime* const sim_;
  const int ordinal_;
};

// Registers backend "sim" for Device::Kind::kSim in `table`: a
// SimDeviceCommunicator over the registry's control communicator (borrowed)
// for each simulated device. `sim` (a SimRuntime) must outlive every
// registry built from the table.
absl::Status RegisterSimBackend(BackendTable* table, DeviceRuntime* sim);

}  // namespace terse

#endif  // TERSE_COLLECTIVES_SIM_COMMUNICATOR_H_
