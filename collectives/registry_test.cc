#include "collectives/registry.h"

#include <memory>
#include <vector>

#include "collectives/loopback/loopback.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Config WithBackend(const std::string& backend) {
  Config config = Config::Defaults();
  config.backend = backend;
  return config;
}

// A table whose "mpi" is a borrowed loopback rank and whose "nccl" counts
// how often it is built and records what it was given.
struct FakeBackends {
  explicit FakeBackends(Communicator* cpu,
                        absl::Status cuda_error = absl::OkStatus()) {
    table
        .Register("mpi", Device::Kind::kCpu,
                  [cpu](Device, Communicator* control)
                      -> absl::StatusOr<std::unique_ptr<Communicator>> {
                    EXPECT_EQ(control, nullptr);
                    return BorrowCommunicator(cpu);
                  })
        .IgnoreError();
    table
        .Register("nccl", Device::Kind::kCuda,
                  [this, cpu, cuda_error](Device device, Communicator* control)
                      -> absl::StatusOr<std::unique_ptr<Communicator>> {
                    ++builds;
                    devices.push_back(device.ordinal);
                    EXPECT_NE(control, nullptr);
                    if (!cuda_error.ok()) return cuda_error;
                    return BorrowCommunicator(cpu);
                  })
        .IgnoreError();
  }
  BackendTable table;
  int builds = 0;
  std::vector<int> devices;
};

TEST(RegistryTest, AutoPicksThePerDeviceBackendAndBuildsCudaLazilyOnce) {
  LoopbackGroup group(1);
  FakeBackends fake(group.communicator(0));
  auto registry = CommunicatorRegistry::Create(WithBackend("auto"), fake.table);
  ASSERT_TRUE(registry.ok()) << registry.status();
  Communicator* control = (*registry)->control();
  ASSERT_NE(control, nullptr);
  EXPECT_EQ(fake.builds, 0);  // Nothing CUDA until a CUDA tensor shows up.

  auto cpu = (*registry)->ForDevice(Device::Cpu());
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ(*cpu, control);

  auto gpu1 = (*registry)->ForDevice(Device::Cuda(1));
  ASSERT_TRUE(gpu1.ok()) << gpu1.status();
  auto again = (*registry)->ForDevice(Device::Cuda(1));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*gpu1, *again);
  EXPECT_NE(*gpu1, control);
  auto gpu0 = (*registry)->ForDevice(Device::Cuda(0));
  ASSERT_TRUE(gpu0.ok());
  EXPECT_NE(*gpu0, *gpu1);
  EXPECT_EQ(fake.builds, 2);
  EXPECT_THAT(fake.devices, ElementsAre(1, 0));
}

TEST(RegistryTest, NcclWithACpuTensorIsAClearError) {
  LoopbackGroup group(1);
  FakeBackends fake(group.communicator(0));
  auto registry = CommunicatorRegistry::Create(WithBackend("nccl"), fake.table);
  ASSERT_TRUE(registry.ok()) << registry.status();
  EXPECT_NE((*registry)->control(), nullptr);  // Control plane still on MPI.
  auto cpu = (*registry)->ForDevice(Device::Cpu());
  EXPECT_EQ(cpu.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(cpu.status().message(),
              HasSubstr("TERSE_BACKEND=nccl cannot move a tensor on cpu"));
  EXPECT_THAT(cpu.status().message(), HasSubstr("CUDA tensors only"));
  EXPECT_TRUE((*registry)->ForDevice(Device::Cuda(0)).ok());
}

TEST(RegistryTest, MpiWithACudaTensorIsAClearError) {
  LoopbackGroup group(1);
  FakeBackends fake(group.communicator(0));
  auto registry = CommunicatorRegistry::Create(WithBackend("mpi"), fake.table);
  ASSERT_TRUE(registry.ok()) << registry.status();
  auto gpu = (*registry)->ForDevice(Device::Cuda(0));
  EXPECT_EQ(gpu.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(gpu.status().message(),
              HasSubstr("TERSE_BACKEND=mpi cannot move a tensor on cuda:0"));
  EXPECT_THAT(gpu.status().message(), HasSubstr("not CUDA-aware"));
  EXPECT_EQ(fake.builds, 0);
  EXPECT_TRUE((*registry)->ForDevice(Device::Cpu()).ok());
}

TEST(RegistryTest, UnknownBackendNamesTheAcceptedOnes) {
  LoopbackGroup group(1);
  FakeBackends fake(group.communicator(0));
  auto registry = CommunicatorRegistry::Create(WithBackend("gloo"), fake.table);
  EXPECT_EQ(registry.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(registry.status().message(),
              HasSubstr("TERSE_BACKEND=gloo is not a registered backend; "
                        "accepted: auto, mpi, nccl"));
}

TEST(RegistryTest, AFailedCudaBuildIsRememberedNotRetried) {
  LoopbackGroup group(1);
  FakeBackends fake(group.communicator(0),
                    absl::FailedPreconditionError("no CUDA device"));
  auto registry = CommunicatorRegistry::Create(WithBackend("auto"), fake.table);
  ASSERT_TRUE(registry.ok());
  for (int i = 0; i < 2; ++i) {
    auto gpu = (*registry)->ForDevice(Device::Cuda(0));
    EXPECT_EQ(gpu.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(gpu.status().message(),
                HasSubstr("building the nccl communicator for cuda:0: no CUDA "
                          "device"));
  }
  EXPECT_EQ(fake.builds, 1);
  EXPECT_TRUE((*registry)->ForDevice(Device::Cpu()).ok());
}

TEST(RegistryTest, ACpuBackendIsRequired) {
  BackendTable table;
  ASSERT_TRUE(
      table
          .Register("nccl", Device::Kind::kCuda,
                    [](Device, Communicator*)
                        -> absl::StatusOr<std::unique_ptr<Communicator>> {
                      return absl::InternalError("unused");
                    })
          .ok());
  auto registry = CommunicatorRegistry::Create(WithBackend("auto"), table);
  EXPECT_EQ(registry.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(RegistryTest, ControlFactoryErrorsPropagate) {
  BackendTable table;
  ASSERT_TRUE(
      table
          .Register("mpi", Device::Kind::kCpu,
                    [](Device, Communicator*)
                        -> absl::StatusOr<std::unique_ptr<Communicator>> {
                      return absl::FailedPreconditionError("no MPI");
                    })
          .ok());
  auto registry = CommunicatorRegistry::Create(WithBackend("auto"), table);
  EXPECT_EQ(registry.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(registry.status().message(), HasSubstr("no MPI"));
}

TEST(RegistryTest, RegisterRejectsDuplicatesAndReservedNames) {
  BackendTable table;
  auto factory =
      [](Device,
         Communicator*) -> absl::StatusOr<std::unique_ptr<Communicator>> {
    return absl::InternalError("unused");
  };
  EXPECT_TRUE(table.Register("mpi", Device::Kind::kCpu, factory).ok());
  EXPECT_EQ(table.Register("mpi", Device::Kind::kCpu, factory).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(table.Register("auto", Device::Kind::kCpu, factory).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table.Register("", Device::Kind::kCpu, factory).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RegistryTest, BuiltinBackendsAreMpiForCpuAndNcclForCuda) {
  BackendTable table = BuiltinBackends();
  ASSERT_NE(table.FirstFor(Device::Kind::kCpu), nullptr);
  EXPECT_EQ(table.FirstFor(Device::Kind::kCpu)->name, "mpi");
  ASSERT_NE(table.FirstFor(Device::Kind::kCuda), nullptr);
  EXPECT_EQ(table.FirstFor(Device::Kind::kCuda)->name, "nccl");
}

TEST(RegistryTest, BorrowedControlCommunicatorsWorkAcrossRanks) {
  absl::Status s = RunLoopbackRanks(3, [](int rank, Communicator* comm) {
    FakeBackends fake(comm);
    auto registry =
        CommunicatorRegistry::Create(WithBackend("auto"), fake.table);
    if (!registry.ok()) return registry.status();
    Communicator* control = (*registry)->control();
    EXPECT_EQ(control->rank(), rank);
    EXPECT_EQ(control->size(), 3);
    EXPECT_EQ(control->backend(), "loopback");
    int64_t v = rank + 1;
    absl::Status st =
        control->Allreduce(&v, 1, DataType::kInt64, ReduceOp::kSum);
    if (!st.ok()) return st;
    EXPECT_EQ(v, 6);
    return control->Synchronize();
  });
  EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace terse
