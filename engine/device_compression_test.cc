// DeviceCompression on the simulated device, ranks as threads over
// loopback: each compressor equals the CompressedReducer (the CPU path) on
// the same gradients bit for bit over several steps (residuals carried on
// the device); error feedback conserves the gradient (fp64 oracle); the
// residuals live in device memory and join checkpoints. The simulated
// streams run late on purpose, so a missing wait fails these tests.
#include "engine/device_compression.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/loopback/loopback.h"
#include "common/status.h"
#include "device/sim_runtime.h"
#include "engine/compressed_reducer.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

Config MakeConfig(const std::string& compression, const std::string& cf) {
  absl::StatusOr<Config> c = Config::FromMap({{"TERSE_COMPRESSION", compression},
                                              {"TERSE_CF", cf},
                                              {"TERSE_MIN_COMPRESS_BYTES", "0"}});
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

// Two tensors; 70001 elements, enough for DGC to sample (not exact top-k).
Bucket MakeBucket() {
  Bucket b;
  b.id = 3;
  b.members.push_back({"layer0.weight", 40000});
  b.members.push_back({"layer0.bias", 30001});
  b.count = 70001;
  b.bytes = b.count * 4;
  b.device_kind = static_cast<int32_t>(Device::Kind::kSim);
  return b;
}

std::vector<float> Gradient(int rank, int step, int64_t n) {
  std::mt19937 rng(977 * rank + 31 * step + 5);
  std::normal_distribution<float> noise(0.0f, 0.01f);
  std::vector<float> g(n);
  for (int64_t i = 0; i < n; ++i) {
    g[i] = noise(rng) * (1 + static_cast<float>(i % 13));
  }
  return g;
}

struct Outcome {
  // [step][rank]: the device path's and the CPU path's reduced bucket.
  std::vector<std::vector<std::vector<float>>> device, cpu;
  // [rank]: the device path's residuals after the last step, by tensor.
  std::vector<std::map<std::string, std::vector<float>>> residuals;
  // [rank]: what the device reducer and the CPU reducer reported.
  std::vector<BucketReport> device_report, cpu_report;
  // [rank]: the device reducer's own store (must not hold device residuals).
  std::vector<std::vector<float>> store_residual;
};

absl::Status RunBoth(int size, const Config& config, int steps, Outcome* run,
                     SimRuntime* sim) {
  const Bucket bucket = MakeBucket();
  const int64_t n = bucket.count;
  run->device.assign(steps, std::vector<std::vector<float>>(size));
  run->cpu = run->device;
  run->residuals.assign(size, {});
  run->device_report.assign(size, {});
  run->cpu_report.assign(size, {});
  run->store_residual.assign(size, {});
  return RunLoopbackRanks(size, [&](int rank, Communicator* comm) {
    CompressedReducer device_reducer(config, rank, size);
    CompressedReducer cpu_reducer(config, rank, size);
    TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Stream> stream,
                           sim->CreateStream(rank));
    TERSE_ASSIGN_OR_RETURN(DeviceBuffer buffer,
                           DeviceBuffer::Allocate(sim, rank, n * 4));
    {
      DeviceCompression dc(config, rank, size, &device_reducer);
      const DeviceCompression::Target target{sim, rank, stream.get()};
      // The executor's staged collective: after the stream, on the host.
      auto allreduce = [&](void* data, int64_t count, DataType type) {
        TERSE_RETURN_IF_ERROR(stream->Synchronize());
        return comm->Allreduce(data, count, type, ReduceOp::kSum);
      };
      for (int step = 0; step < steps; ++step) {
        const std::vector<float> g = Gradient(rank, step, n);
        TERSE_RETURN_IF_ERROR(stream->Memcpy(buffer.data(), g.data(), n * 4));
        TERSE_RETURN_IF_ERROR(dc.Reduce(bucket, buffer.data(), ReduceOp::kSum,
                                        step, target, comm, allreduce));
        std::vector<float>& out = run->device[step][rank];
        out.resize(n);
        TERSE_RETURN_IF_ERROR(stream->Memcpy(out.data(), buffer.data(), n * 4));
        TERSE_RETURN_IF_ERROR(stream->Synchronize());

        std::vector<float> host = g;
        BucketReduceContext ctx;
        ctx.bucket = &bucket;
        ctx.data = host.data();
        ctx.comm = comm;
        ctx.step = step;
        TERSE_RETURN_IF_ERROR(cpu_reducer.Reduce(ctx));
        run->cpu[step][rank] = host;
      }
      TERSE_ASSIGN_OR_RETURN(std::vector<ResidualStore::Entry> entries,
                             dc.ExportResiduals());
      for (ResidualStore::Entry& e : entries) {
        run->residuals[rank][e.name] = std::move(e.values);
      }
      run->device_report[rank] = device_reducer.Reports().at(0);
      run->cpu_report[rank] = cpu_reducer.Reports().at(0);
      run->store_residual[rank] =
          device_reducer.Residual("layer0.weight", 40000);
    }
    return absl::OkStatus();
  });
}

class DeviceCompressionTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DeviceCompressionTest, EqualsTheCpuPathBitForBit) {
  SimRuntime sim(SimOptions{std::chrono::microseconds(300), 4});
  const std::string compression = GetParam();
  for (int size : {2, 3}) {
    Outcome run;
    absl::Status st =
        RunBoth(size, MakeConfig(compression, "50"), 3, &run, &sim);
    ASSERT_TRUE(st.ok()) << st;
    for (size_t step = 0; step < run.device.size(); ++step) {
      for (int r = 0; r < size; ++r) {
        const std::vector<float>& d = run.device[step][r];
        const std::vector<float>& c = run.cpu[step][r];
        ASSERT_EQ(d.size(), c.size());
        for (size_t i = 0; i < d.size(); ++i) {
          ASSERT_EQ(std::memcmp(&d[i], &c[i], 4), 0)
              << compression << " size " << size << " step " << step
              << " rank " << r << " [" << i << "]: device " << d[i]
              << ", cpu " << c[i];
        }
      }
    }
    for (int r = 0; r < size; ++r) {
      EXPECT_EQ(run.device_report[r].compressor, compression);
      EXPECT_EQ(run.device_report[r].compressor,
                run.cpu_report[r].compressor);
      EXPECT_EQ(run.device_report[r].bytes_sent,
                run.cpu_report[r].bytes_sent);
      EXPECT_EQ(run.device_report[r].policy, run.cpu_report[r].policy);
    }
  }
  EXPECT_EQ(sim.live_allocations(), 0);
}

INSTANTIATE_TEST_SUITE_P(Compressors, DeviceCompressionTest,
                         ::testing::Values("fp16", "bf16", "topk", "dgc"),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           return i.param;
                         });

// Error feedback loses nothing: over the steps, what the ranks sent (the
// sums) plus what stays in their residuals is the sum of every gradient,
// against an fp64 oracle. The residuals live in device memory, not in the
// reducer's store.
TEST(DeviceCompressionConservationTest, SentPlusResidualIsTheGradientSum) {
  SimRuntime sim(SimOptions{std::chrono::microseconds(300), 4});
  for (const std::string compression : {"topk", "dgc"}) {
    const int size = 3, steps = 4;
    Outcome run;
    absl::Status st =
        RunBoth(size, MakeConfig(compression, "20"), steps, &run, &sim);
    ASSERT_TRUE(st.ok()) << st;
    const Bucket bucket = MakeBucket();
    const int64_t n = bucket.count;
    std::vector<double> gradients(n, 0.0), sent(n, 0.0), left(n, 0.0);
    std::vector<double> magnitude(n, 0.0);
    for (int step = 0; step < steps; ++step) {
      for (int r = 0; r < size; ++r) {
        const std::vector<float> g = Gradient(r, step, n);
        for (int64_t i = 0; i < n; ++i) {
          gradients[i] += g[i];
          magnitude[i] += std::fabs(g[i]);
        }
      }
      for (int64_t i = 0; i < n; ++i) sent[i] += run.device[step][0][i];
    }
    for (int r = 0; r < size; ++r) {
      ASSERT_EQ(run.residuals[r].size(), 2u) << compression;
      int64_t offset = 0;
      for (const BucketMember& m : bucket.members) {
        const std::vector<float>& res = run.residuals[r].at(m.name);
        ASSERT_EQ(static_cast<int64_t>(res.size()), m.count);
        for (int64_t i = 0; i < m.count; ++i) left[offset + i] += res[i];
        offset += m.count;
      }
      // Held on the device only.
      for (float v : run.store_residual[r]) ASSERT_EQ(v, 0.0f);
    }
    int64_t sent_entries = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (run.device[steps - 1][0][i] != 0) ++sent_entries;
      ASSERT_NEAR(sent[i] + left[i], gradients[i], 1e-5 * magnitude[i] + 1e-9)
          << compression << " [" << i << "]";
    }
    // Compression happened (most entries stayed behind).
    EXPECT_LT(sent_entries, n / 2) << compression;
    EXPECT_GT(sent_entries, 0) << compression;
  }
}

}  // namespace
}  // namespace terse
