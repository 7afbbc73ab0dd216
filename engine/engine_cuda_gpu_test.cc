// The engine's device path on a real CUDA device (tag gpu; skipped without
// one): one rank over NCCL, and four ranks (threads) sharing one GPU with
// TERSE_GPU_OPERATIONS=mpi (host staging over loopback, the way several
// ranks share a GPU that NCCL would refuse). Results are compared with the
// sums computed on the host.
#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/loopback/loopback.h"
#include "collectives/nccl/nccl_communicator.h"
#include "collectives/registry.h"
#include "common/cuda_probe.h"
#include "common/status.h"
#include "device/cuda_runtime.h"
#include "engine/engine.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

// Value i of rank r: small integers, exact in fp32 sums.
float Value(int r, int64_t i) {
  return static_cast<float>((r + 1) * (i % 5 + 1));
}

// Allreduces (Sum) and averages two tensors on cuda:0 with the ready and
// done events on process set `set` (world ranks `members`; empty: every
// rank), and checks them on the host.
absl::Status AllreduceOnCuda(Engine& engine, CudaRuntime* cuda, int rank,
                             int32_t set = 0, std::vector<int> members = {}) {
  if (members.empty()) {
    for (int r = 0; r < engine.size(); ++r) members.push_back(r);
  }
  const int64_t n = (int64_t{1} << 20) + 3;
  std::vector<float> host(n);
  for (int64_t i = 0; i < n; ++i) host[i] = Value(rank, i);
  TERSE_ASSIGN_OR_RETURN(DeviceBuffer a,
                         DeviceBuffer::Allocate(cuda, 0, n * 4));
  TERSE_ASSIGN_OR_RETURN(DeviceBuffer b,
                         DeviceBuffer::Allocate(cuda, 0, n * 4));
  TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Stream> producer,
                         cuda->CreateStream(0));
  TERSE_RETURN_IF_ERROR(producer->Memcpy(a.data(), host.data(), n * 4));
  TERSE_RETURN_IF_ERROR(producer->Memcpy(b.data(), host.data(), n * 4));
  TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Event> ready, cuda->CreateEvent(0));
  TERSE_RETURN_IF_ERROR(producer->Record(ready.get()));
  std::shared_ptr<Event> shared_ready = std::move(ready);
  TensorView av(a.data(), n, DataType::kFloat32, Device::Cuda(0));
  TensorView bv(b.data(), n, DataType::kFloat32, Device::Cuda(0));
  TERSE_ASSIGN_OR_RETURN(
      Handle ha, engine.AllreduceAsync("a", av, av, {n}, ReduceOp::kSum, 1.0,
                                       1.0, nullptr, "", shared_ready, set));
  TERSE_ASSIGN_OR_RETURN(
      Handle hb,
      engine.AllreduceAsync("b", bv, bv, {n}, ReduceOp::kAverage, 1.0, 1.0,
                            nullptr, "", shared_ready, set));
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Event> done, engine.WaitIssued(ha));
  TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Stream> consumer,
                         cuda->CreateStream(0));
  std::vector<float> got(n);
  TERSE_RETURN_IF_ERROR(consumer->WaitEvent(done.get()));
  TERSE_RETURN_IF_ERROR(consumer->Memcpy(got.data(), a.data(), n * 4));
  TERSE_RETURN_IF_ERROR(consumer->Synchronize());
  TERSE_RETURN_IF_ERROR(engine.Wait(hb));
  std::vector<float> avg(n);
  TERSE_RETURN_IF_ERROR(producer->Memcpy(avg.data(), b.data(), n * 4));
  TERSE_RETURN_IF_ERROR(producer->Synchronize());
  const int size = static_cast<int>(members.size());
  for (int64_t i = 0; i < n; ++i) {
    float want = 0;
    for (int r : members) want += Value(r, i);
    if (got[i] != want || avg[i] != want / size) {
      return absl::InternalError(absl::StrCat("rank ", rank, " [", i, "]: sum ",
                                              got[i], " avg ", avg[i],
                                              ", want ", want));
    }
  }
  return absl::OkStatus();
}

// Compressed allreduces of CUDA tensors through the engine (DeviceCompression):
// fp16, bf16, and topk / dgc / randomk keeping every entry (cf 1), on small
// integers that every format carries exactly, so the result is the host sum;
// and gravac's portfolio (several families, on the device: DeviceCompression's
// PolicyStep), here over none / fp16 / bf16, which carry those integers
// exactly whatever the policy picks on each step.
absl::Status CompressedOnCuda(Engine& engine, CudaRuntime* cuda, int rank) {
  const int64_t n = 5000;
  std::vector<float> host(n);
  for (int64_t i = 0; i < n; ++i) host[i] = Value(rank, i);
  TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Stream> stream, cuda->CreateStream(0));
  for (const char* spec : {"fp16", "bf16", "topk:1", "dgc:1", "randomk:1"}) {
    TERSE_ASSIGN_OR_RETURN(DeviceBuffer a,
                           DeviceBuffer::Allocate(cuda, 0, n * 4));
    TERSE_RETURN_IF_ERROR(stream->Memcpy(a.data(), host.data(), n * 4));
    TERSE_RETURN_IF_ERROR(stream->Synchronize());
    TensorView av(a.data(), n, DataType::kFloat32, Device::Cuda(0));
    for (int step = 0; step < 2; ++step) {
      if (step == 1) {
        TERSE_RETURN_IF_ERROR(stream->Memcpy(a.data(), host.data(), n * 4));
        TERSE_RETURN_IF_ERROR(stream->Synchronize());
      }
      TERSE_ASSIGN_OR_RETURN(
          Handle h,
          engine.AllreduceAsync(absl::StrCat("c.", spec), av, av, {n},
                                ReduceOp::kSum, 1.0, 1.0, nullptr, spec));
      TERSE_RETURN_IF_ERROR(engine.Wait(h));
      std::vector<float> got(n);
      TERSE_RETURN_IF_ERROR(stream->Memcpy(got.data(), a.data(), n * 4));
      TERSE_RETURN_IF_ERROR(stream->Synchronize());
      for (int64_t i = 0; i < n; ++i) {
        float want = 0;
        for (int r = 0; r < engine.size(); ++r) want += Value(r, i);
        if (got[i] != want) {
          return absl::InternalError(absl::StrCat(
              spec, " rank ", rank, " [", i, "]: ", got[i], ", want ", want));
        }
      }
    }
  }
  TERSE_ASSIGN_OR_RETURN(DeviceBuffer p,
                         DeviceBuffer::Allocate(cuda, 0, n * 4));
  TensorView pv(p.data(), n, DataType::kFloat32, Device::Cuda(0));
  for (int step = 0; step < 12; ++step) {
    TERSE_RETURN_IF_ERROR(stream->Memcpy(p.data(), host.data(), n * 4));
    TERSE_RETURN_IF_ERROR(stream->Synchronize());
    TERSE_ASSIGN_OR_RETURN(
        Handle h,
        engine.AllreduceAsync("portfolio", pv, pv, {n}, ReduceOp::kSum, 1.0,
                              1.0, nullptr, "gravac"));
    TERSE_RETURN_IF_ERROR(engine.Wait(h));
    std::vector<float> got(n);
    TERSE_RETURN_IF_ERROR(stream->Memcpy(got.data(), p.data(), n * 4));
    TERSE_RETURN_IF_ERROR(stream->Synchronize());
    for (int64_t i = 0; i < n; ++i) {
      float want = 0;
      for (int r = 0; r < engine.size(); ++r) want += Value(r, i);
      if (got[i] != want) {
        return absl::InternalError(
            absl::StrCat("gravac portfolio step ", step, " rank ", rank, " [",
                         i, "]: ", got[i], ", want ", want));
      }
    }
  }
  return absl::OkStatus();
}

class EngineCudaGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (ProbeCuda().device_count == 0) {
      GTEST_SKIP() << "no CUDA device: " << ProbeCuda().why_none;
    }
    runtimes_.Register(&cuda_).IgnoreError();
  }
  CudaRuntime cuda_;
  DeviceRuntimes runtimes_;
};

TEST_F(EngineCudaGpuTest, OneRankOverNccl) {
  LoopbackGroup group(1);
  Communicator* comm = group.communicator(0);
  BackendTable table;
  ASSERT_TRUE(
      table
          .Register("loop", Device::Kind::kCpu,
                    [comm](Device, Communicator*)
                        -> absl::StatusOr<std::unique_ptr<Communicator>> {
                      return BorrowCommunicator(comm);
                    })
          .ok());
  ASSERT_TRUE(
      table
          .Register("nccl", Device::Kind::kCuda,
                    [](Device d, Communicator* control)
                        -> absl::StatusOr<std::unique_ptr<Communicator>> {
                      TERSE_ASSIGN_OR_RETURN(
                          std::unique_ptr<NcclCommunicator> c,
                          NcclCommunicator::Create(control, d.ordinal));
                      return std::unique_ptr<Communicator>(std::move(c));
                    })
          .ok());
  Config config = Config::Defaults();
  config.cycle_time_ms = 1;
  absl::StatusOr<std::unique_ptr<CommunicatorRegistry>> registry =
      CommunicatorRegistry::Create(config, std::move(table));
  ASSERT_TRUE(registry.ok()) << registry.status();
  EngineOptions options;
  options.devices = &runtimes_;
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create(config, registry->get(), options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  absl::Status status = AllreduceOnCuda(**engine, &cuda_, 0);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_TRUE((*engine)->Shutdown().ok());
}

// `ranks` loopback ranks sharing the GPU, their device buckets staged
// through the host (TERSE_GPU_OPERATIONS=mpi): `body` on each rank's
// engine, then a barrier and shutdown.
absl::Status RunStaged(
    int ranks, Config config, EngineOptions options,
    const std::function<absl::Status(Engine&, int rank)>& body) {
  config.cycle_time_ms = 1;
  config.gpu_operations = "mpi";
  return RunLoopbackRanks(ranks, [&](int rank, Communicator* comm) {
    TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                           Engine::Create(config, comm, options));
    absl::Status s = body(*engine, rank);
    if (s.ok()) s = engine->Barrier();
    absl::Status shut = engine->Shutdown();
    return s.ok() ? shut : s;
  });
}

TEST_F(EngineCudaGpuTest, FourRanksOnOneGpuStagedThroughTheHost) {
  EngineOptions options;
  options.devices = &runtimes_;
  absl::Status status =
      RunStaged(4, Config::Defaults(), options, [&](Engine& engine, int rank) {
        return AllreduceOnCuda(engine, &cuda_, rank);
      });
  EXPECT_TRUE(status.ok()) << status;
}

// Static process sets {0, 2} and {1, 3}: each set's device executor stages
// its CUDA buckets over the set's own communicator.
TEST_F(EngineCudaGpuTest, ProcessSetsOnOneGpuStagedThroughTheHost) {
  EngineOptions options;
  options.devices = &runtimes_;
  options.process_sets = {{0, 2}, {1, 3}};
  absl::Status status =
      RunStaged(4, Config::Defaults(), options, [&](Engine& engine, int rank) {
        const int32_t set = rank % 2 == 0 ? 1 : 2;
        return AllreduceOnCuda(engine, &cuda_, rank, set,
                               {rank % 2, rank % 2 + 2});
      });
  EXPECT_TRUE(status.ok()) << status;
}

TEST_F(EngineCudaGpuTest, CompressedOnOneGpuStagedThroughTheHost) {
  Config config = Config::Defaults();
  config.min_compress_bytes = 0;
  config.gravac_candidates = {"none", "fp16", "bf16"};
  EngineOptions options;
  options.devices = &runtimes_;
  absl::Status status =
      RunStaged(2, config, options, [&](Engine& engine, int rank) {
        return CompressedOnCuda(engine, &cuda_, rank);
      });
  EXPECT_TRUE(status.ok()) << status;
}

}  // namespace
}  // namespace terse
