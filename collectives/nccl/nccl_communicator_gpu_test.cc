// NcclCommunicator on a GPU: the conformance suite on device memory (one
// rank; and two ranks as threads, one device each, when two devices exist),
// CPU buffers rejected, a caller-given stream, the control-plane calls of
// the two allgathervs. Skips without a device.
#include <cuda_runtime_api.h>

#include <vector>

#include "absl/strings/str_join.h"
#include "collectives/conformance.h"
#include "collectives/forwarding_communicator.h"
#include "collectives/loopback/loopback.h"
#include "collectives/nccl/cuda_test_memory.h"
#include "collectives/nccl/nccl_communicator.h"
#include "common/cuda_probe.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

using ::testing::HasSubstr;

class NcclGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    devices_ = ProbeCuda().device_count;
    if (devices_ == 0) GTEST_SKIP() << "no CUDA device";
  }
  int devices_ = 0;
};

std::vector<std::string> Conformance(NcclCommunicator& comm) {
  CudaTestMemory memory(comm.device());
  ConformanceOptions options;
  options.memory = &memory;
  options.half_partial_roundings = comm.size() - 1;  // Ring, like MPI.
  options.detects_count_mismatch = false;            // NCCL cannot see it.
  options.unreduced_dtypes = {DataType::kInt16};     // NCCL has no int16.
  return RunConformance(comm, options);
}

TEST_F(NcclGpuTest, OneRankConforms) {
  LoopbackGroup group(1);
  auto comm = NcclCommunicator::Create(group.communicator(0), 0);
  ASSERT_TRUE(comm.ok()) << comm.status();
  std::vector<std::string> failures = Conformance(**comm);
  EXPECT_TRUE(failures.empty()) << absl::StrJoin(failures, "\n");
}

TEST_F(NcclGpuTest, TwoRanksOnTwoDevicesConform) {
  if (devices_ < 2) GTEST_SKIP() << "needs two devices";
  std::vector<std::vector<std::string>> failures(2);
  absl::Status s = RunLoopbackRanks(2, [&](int rank, Communicator* control) {
    auto comm = NcclCommunicator::Create(control, rank);
    if (!comm.ok()) return comm.status();
    failures[rank] = Conformance(**comm);
    return absl::OkStatus();
  });
  ASSERT_TRUE(s.ok()) << s;
  for (const auto& f : failures) {
    EXPECT_TRUE(f.empty()) << absl::StrJoin(f, "\n");
  }
}

TEST_F(NcclGpuTest, CpuBuffersAreInvalidArgumentNotACrash) {
  LoopbackGroup group(1);
  auto created = NcclCommunicator::Create(group.communicator(0), 0);
  ASSERT_TRUE(created.ok()) << created.status();
  NcclCommunicator& comm = **created;
  std::vector<float> host(16, 1.0f);
  absl::Status s =
      comm.Allreduce(host.data(), 16, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("a CPU buffer"));
  EXPECT_EQ(comm.Broadcast(host.data(), 64, 0).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<float> recv(16);
  EXPECT_EQ(comm.Allgather(host.data(), recv.data(), 64).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm.Allgatherv(host.data(), recv.data(), {64}).code(),
            absl::StatusCode::kInvalidArgument);
  // Bitwise ops take host words (negotiation vectors live on the host).
  uint64_t words[2] = {0xf0, 0x0f};
  EXPECT_TRUE(comm.BitwiseAnd(words, 2).ok());
  EXPECT_EQ(words[0], 0xf0u);
  // The communicator is still healthy.
  EXPECT_TRUE(comm.Synchronize().ok());
}

TEST_F(NcclGpuTest, UsesTheCallersStream) {
  LoopbackGroup group(1);
  auto created = NcclCommunicator::Create(group.communicator(0), 0);
  ASSERT_TRUE(created.ok()) << created.status();
  NcclCommunicator& comm = **created;
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  EXPECT_TRUE(comm.UseStream(stream));
  EXPECT_EQ(comm.stream(), stream);
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 4 * sizeof(float)), cudaSuccess);
  float h[4] = {1, 2, 3, 4};
  ASSERT_EQ(cudaMemcpyAsync(d, h, sizeof(h), cudaMemcpyHostToDevice, stream),
            cudaSuccess);
  ASSERT_TRUE(
      comm.Allreduce(d, 4, DataType::kFloat32, ReduceOp::kAverage).ok());
  float out[4] = {0, 0, 0, 0};
  ASSERT_EQ(
      cudaMemcpyAsync(out, d, sizeof(out), cudaMemcpyDeviceToHost, stream),
      cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(out[3], 4.0f);
  EXPECT_TRUE(comm.UseStream(nullptr));
  EXPECT_NE(comm.stream(), stream);
  cudaFree(d);
  cudaStreamDestroy(stream);
}

// Counts the control plane's allgathers.
class CountingControl : public ForwardingCommunicator {
 public:
  explicit CountingControl(Communicator* target)
      : ForwardingCommunicator(target) {}
  absl::Status Allgather(const void* send, void* recv,
                         int64_t bytes_per_rank) override {
    ++allgathers;
    return target()->Allgather(send, recv, bytes_per_rank);
  }
  int allgathers = 0;
};

// Allgatherv checks its sizes with one control-plane allgather;
// AllgathervAgreedSizes (sizes from a collective) moves the same bytes
// without it.
TEST_F(NcclGpuTest, AgreedSizesSkipTheControlPlanesCheck) {
  LoopbackGroup group(1);
  CountingControl control(group.communicator(0));
  auto created = NcclCommunicator::Create(&control, 0);
  ASSERT_TRUE(created.ok()) << created.status();
  NcclCommunicator& comm = **created;
  uint8_t* send = nullptr;
  uint8_t* recv = nullptr;
  ASSERT_EQ(cudaMalloc(&send, 16), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&recv, 32), cudaSuccess);
  std::vector<uint8_t> bytes(16);
  for (int i = 0; i < 16; ++i) bytes[i] = static_cast<uint8_t>(3 * i + 1);
  ASSERT_EQ(cudaMemcpy(send, bytes.data(), 16, cudaMemcpyHostToDevice),
            cudaSuccess);

  const int before = control.allgathers;
  ASSERT_TRUE(comm.Allgatherv(send, recv, {16}).ok());
  EXPECT_EQ(control.allgathers, before + 1);
  ASSERT_TRUE(comm.AllgathervAgreedSizes(send, recv + 16, {16}).ok());
  EXPECT_EQ(control.allgathers, before + 1);
  ASSERT_TRUE(comm.Synchronize().ok());

  std::vector<uint8_t> got(32);
  ASSERT_EQ(cudaMemcpy(got.data(), recv, 32, cudaMemcpyDeviceToHost),
            cudaSuccess);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(got[i], bytes[i % 16]) << i;
  cudaFree(send);
  cudaFree(recv);
}

}  // namespace
}  // namespace terse
