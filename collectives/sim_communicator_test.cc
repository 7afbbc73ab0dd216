#include "collectives/sim_communicator.h"

#include <thread>
#include <vector>

#include "collectives/forwarding_communicator.h"
#include "collectives/loopback/loopback.h"
#include "common/status.h"
#include "device/sim_runtime.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

using ::testing::HasSubstr;

// A registry whose control plane is loopback rank `comm` (borrowed) and
// whose "sim" backend serves `sim`'s devices.
absl::StatusOr<std::unique_ptr<CommunicatorRegistry>> SimRegistry(
    Communicator* comm, SimRuntime* sim) {
  BackendTable table;
  TERSE_RETURN_IF_ERROR(table.Register(
      "loop", Device::Kind::kCpu,
      [comm](Device,
             Communicator*) -> absl::StatusOr<std::unique_ptr<Communicator>> {
        return BorrowCommunicator(comm);
      }));
  TERSE_RETURN_IF_ERROR(RegisterSimBackend(&table, sim));
  return CommunicatorRegistry::Create(Config(), std::move(table));
}

// Two loopback ranks, each with its own simulated device, allreduce and
// broadcast through the registry's "sim" backend; host pointers are refused.
TEST(SimCommunicatorTest, MovesSimulatedBuffersThroughTheRegistry) {
  SimRuntime sim;
  LoopbackGroup group(2);
  std::vector<std::thread> threads;
  std::vector<absl::Status> results(2);
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      results[rank] = [&]() -> absl::Status {
        absl::StatusOr<std::unique_ptr<CommunicatorRegistry>> registry =
            SimRegistry(group.communicator(rank), &sim);
        if (!registry.ok()) return registry.status();
        absl::StatusOr<Communicator*> dev =
            (*registry)->ForDevice(Device::Sim(rank));
        if (!dev.ok()) return dev.status();
        if ((*dev)->backend() != "sim") return absl::InternalError("backend");
        absl::StatusOr<DeviceBuffer> buf = DeviceBuffer::Allocate(&sim, rank, 40);
        if (!buf.ok()) return buf.status();
        for (int i = 0; i < 10; ++i) buf->as<float>()[i] = (rank + 1) * i;
        absl::Status s = (*dev)->Allreduce(buf->data(), 10, DataType::kFloat32,
                                           ReduceOp::kSum);
        if (!s.ok()) return s;
        for (int i = 0; i < 10; ++i) {
          if (buf->as<float>()[i] != 3.0f * i) {
            return absl::InternalError("wrong sum");
          }
        }
        std::vector<float> host(10);
        absl::Status refused = (*dev)->Allreduce(host.data(), 10,
                                                 DataType::kFloat32,
                                                 ReduceOp::kSum);
        if (refused.code() != absl::StatusCode::kInvalidArgument ||
            refused.message().find("not simulated-device memory") ==
                std::string::npos) {
          return absl::InternalError(
              absl::StrCat("host buffer not refused: ", refused.ToString()));
        }
        return (*dev)->Broadcast(buf->data(), 40, 1);
      }();
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_TRUE(results[0].ok()) << results[0];
  EXPECT_TRUE(results[1].ok()) << results[1];
}

// Counts which of the host's allgathers a SimDeviceCommunicator calls.
class CountingHost : public ForwardingCommunicator {
 public:
  explicit CountingHost(Communicator* target)
      : ForwardingCommunicator(target) {}
  absl::Status Allgatherv(const void* send, void* recv,
                          const std::vector<int64_t>& recv_bytes) override {
    ++checked_;
    return target()->Allgatherv(send, recv, recv_bytes);
  }
  absl::Status AllgathervAgreedSizes(
      const void* send, void* recv,
      const std::vector<int64_t>& recv_bytes) override {
    ++agreed_;
    return target()->AllgathervAgreedSizes(send, recv, recv_bytes);
  }
  int checked_ = 0;
  int agreed_ = 0;
};

// The engine's device gather passes sizes that came from a collective: the
// simulated device hands them to the host's AllgathervAgreedSizes (which
// over MPI skips Allgatherv's size check), after its own memory checks.
TEST(SimCommunicatorTest, AgreedSizesReachTheHostsAgreedAllgather) {
  SimRuntime sim;
  LoopbackGroup group(2);
  std::vector<std::thread> threads;
  std::vector<absl::Status> results(2);
  std::vector<int> checked(2), agreed(2);
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      auto host = std::make_unique<CountingHost>(group.communicator(rank));
      CountingHost* counts = host.get();
      SimDeviceCommunicator dev(std::move(host), &sim, rank);
      results[rank] = [&]() -> absl::Status {
        const std::vector<int64_t> sizes = {3, 5};
        absl::StatusOr<DeviceBuffer> send =
            DeviceBuffer::Allocate(&sim, rank, sizes[rank]);
        if (!send.ok()) return send.status();
        absl::StatusOr<DeviceBuffer> recv =
            DeviceBuffer::Allocate(&sim, rank, 8);
        if (!recv.ok()) return recv.status();
        for (int i = 0; i < sizes[rank]; ++i) {
          send->as<uint8_t>()[i] = static_cast<uint8_t>(10 * rank + i);
        }
        absl::Status s =
            dev.AllgathervAgreedSizes(send->data(), recv->data(), sizes);
        if (!s.ok()) return s;
        const std::vector<uint8_t> want = {0, 1, 2, 10, 11, 12, 13, 14};
        for (int i = 0; i < 8; ++i) {
          if (recv->as<uint8_t>()[i] != want[i]) {
            return absl::InternalError(absl::StrCat(
                "byte ", i, " is ", static_cast<int>(recv->as<uint8_t>()[i])));
          }
        }
        std::vector<uint8_t> host_recv(8);
        absl::Status refused =
            dev.AllgathervAgreedSizes(send->data(), host_recv.data(), sizes);
        if (refused.code() != absl::StatusCode::kInvalidArgument ||
            refused.message().find("recv") == std::string::npos) {
          return absl::InternalError(
              absl::StrCat("host recv not refused: ", refused.ToString()));
        }
        return absl::OkStatus();
      }();
      checked[rank] = counts->checked_;
      agreed[rank] = counts->agreed_;
    });
  }
  for (std::thread& t : threads) t.join();
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(results[rank].ok()) << results[rank];
    EXPECT_EQ(agreed[rank], 1) << "rank " << rank;
    EXPECT_EQ(checked[rank], 0) << "rank " << rank;
  }
}

// A registry over a sub-group (a process set's) builds its device
// communicators over that sub-group: ranks 0 and 2 of 3 reduce among
// themselves.
TEST(SimCommunicatorTest, SubgroupRegistrySpansTheSubgroup) {
  SimRuntime sim;
  LoopbackGroup group(3);
  std::vector<std::thread> threads;
  std::vector<absl::Status> results(3);
  for (int rank = 0; rank < 3; ++rank) {
    threads.emplace_back([&, rank] {
      results[rank] = [&]() -> absl::Status {
        TERSE_ASSIGN_OR_RETURN(std::unique_ptr<CommunicatorRegistry> registry,
                               SimRegistry(group.communicator(rank), &sim));
        if (registry->ForSubgroup(nullptr).status().code() !=
            absl::StatusCode::kInvalidArgument) {
          return absl::InternalError("a null sub-group was accepted");
        }
        TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> sub,
                               registry->control()->CreateSubgroup({0, 2}));
        if (sub == nullptr) return absl::OkStatus();  // Rank 1: not a member.
        TERSE_ASSIGN_OR_RETURN(std::unique_ptr<CommunicatorRegistry> sets,
                               registry->ForSubgroup(sub.get()));
        if (sets->control()->size() != 2) {
          return absl::InternalError("sub-group registry's control size");
        }
        TERSE_ASSIGN_OR_RETURN(Communicator * dev,
                               sets->ForDevice(Device::Sim(rank)));
        if (dev->backend() != "sim" || dev->size() != 2) {
          return absl::InternalError(
              absl::StrCat(dev->backend(), " of ", dev->size(), " ranks"));
        }
        TERSE_ASSIGN_OR_RETURN(DeviceBuffer buf,
                               DeviceBuffer::Allocate(&sim, rank, 40));
        for (int i = 0; i < 10; ++i) buf.as<float>()[i] = (rank + 1) * i;
        TERSE_RETURN_IF_ERROR(
            dev->Allreduce(buf.data(), 10, DataType::kFloat32, ReduceOp::kSum));
        for (int i = 0; i < 10; ++i) {
          if (buf.as<float>()[i] != 4.0f * i) {  // Ranks 0 and 2: 1 + 3.
            return absl::InternalError(
                absl::StrCat("sum[", i, "] = ", buf.as<float>()[i]));
          }
        }
        return absl::OkStatus();
      }();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_TRUE(results[rank].ok()) << "rank " << rank << ": " << results[rank];
  }
}

TEST(SimCommunicatorTest, RegisterNeedsASimRuntime) {
  BackendTable table;
  EXPECT_FALSE(RegisterSimBackend(&table, nullptr).ok());
  SimRuntime sim;
  EXPECT_TRUE(RegisterSimBackend(&table, &sim).ok());
  EXPECT_THAT(RegisterSimBackend(&table, &sim).message(),
              HasSubstr("already registered"));
}

}  // namespace
}  // namespace terse
