#include "collectives/sim_communicator.h"

#include <thread>
#include <vector>

#include "collectives/loopback/loopback.h"
#include "device/sim_runtime.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

using ::testing::HasSubstr;

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
        BackendTable table;
        Communicator* comm = group.communicator(rank);
        absl::Status reg = table.Register(
            "loop", Device::Kind::kCpu,
            [comm](Device, Communicator*)
                -> absl::StatusOr<std::unique_ptr<Communicator>> {
              return BorrowCommunicator(comm);
            });
        if (!reg.ok()) return reg;
        reg = RegisterSimBackend(&table, &sim);
        if (!reg.ok()) return reg;
        absl::StatusOr<std::unique_ptr<CommunicatorRegistry>> registry =
            CommunicatorRegistry::Create(Config(), std::move(table));
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
