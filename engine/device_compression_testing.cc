#include "engine/device_compression_testing.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collectives/forwarding_communicator.h"
#include "collectives/loopback/loopback.h"
#include "collectives/registry.h"
#include "collectives/sim_communicator.h"
#include "common/status.h"
#include "engine/checkpoint_format.h"
#include "engine/checkpoint_io.h"
#include "engine/device_compression.h"

namespace terse {
namespace testing {

absl::StatusOr<Config> DeviceCompressionConfig(
    const std::string& compression, const std::string& cf,
    const std::map<std::string, std::string>& extra) {
  std::map<std::string, std::string> settings = {
      {"TERSE_COMPRESSION", compression},
      {"TERSE_CF", cf},
      {"TERSE_MIN_COMPRESS_BYTES", "0"}};
  for (const auto& [key, value] : extra) settings[key] = value;
  return Config::FromMap(settings);
}

namespace {

// A policy's description without the times it measured (wall-clock
// throughputs, which differ between two runs): gravac's "T_c=[...]" and
// the portfolio's "T_c=<value>" of each candidate.
std::string WithoutTimes(std::string policy) {
  for (size_t at; (at = policy.find("T_c=[")) != std::string::npos;) {
    const size_t end = policy.find(']', at);
    policy.erase(at,
                 end == std::string::npos ? std::string::npos : end + 1 - at);
  }
  for (size_t at = 0; (at = policy.find("T_c=", at)) != std::string::npos;) {
    at += 4;
    const size_t end = policy.find_first_of(" ]", at);
    policy.erase(at, end == std::string::npos ? std::string::npos : end - at);
  }
  return policy;
}

std::string StepLine(const BucketReport& r) {
  return absl::StrCat(WithoutTimes(r.policy), " sent ", r.compressor, " cf ",
                      r.cf, " bytes ", r.bytes_sent);
}

// The pending statistics of the one bucket in a checkpoint of `reducer`
// (a device reducer's come from its DeviceCompression).
absl::StatusOr<std::vector<double>> PendingNorms(
    const CompressedReducer& reducer) {
  TERSE_ASSIGN_OR_RETURN(const std::string bytes, reducer.SaveState());
  checkpoint::StringSource source(bytes);
  TERSE_ASSIGN_OR_RETURN(const checkpoint::Checkpoint saved,
                         checkpoint::ReadCheckpoint(&source));
  if (saved.header.buckets_size() != 1) {
    return absl::InternalError(absl::StrCat(
        "a checkpoint of ", saved.header.buckets_size(), " buckets, not 1"));
  }
  const auto& norms = saved.header.buckets(0).pending_norms();
  return std::vector<double>(norms.begin(), norms.end());
}

// The control communicator as the device path sees it: counts the bytes
// this rank sends through it.
class CountingCommunicator : public ForwardingCommunicator {
 public:
  using ForwardingCommunicator::ForwardingCommunicator;
  absl::Status Allreduce(void* buffer, int64_t count, DataType dtype,
                         ReduceOp op) override {
    sent += count * static_cast<int64_t>(DataTypeSize(dtype));
    return target()->Allreduce(buffer, count, dtype, op);
  }
  absl::Status Allgather(const void* send, void* recv,
                         int64_t bytes_per_rank) override {
    sent += bytes_per_rank;
    return target()->Allgather(send, recv, bytes_per_rank);
  }
  absl::Status Allgatherv(const void* send, void* recv,
                          const std::vector<int64_t>& recv_bytes) override {
    sent += recv_bytes[rank()];
    return target()->Allgatherv(send, recv, recv_bytes);
  }
  absl::Status Broadcast(void* buffer, int64_t bytes, int root) override {
    if (rank() == root) sent += bytes;
    return target()->Broadcast(buffer, bytes, root);
  }
  absl::Status BitwiseAnd(uint64_t* words, int64_t count) override {
    sent += 8 * count;
    return target()->BitwiseAnd(words, count);
  }
  absl::Status BitwiseOr(uint64_t* words, int64_t count) override {
    sent += 8 * count;
    return target()->BitwiseOr(words, count);
  }
  int64_t sent = 0;
};

}  // namespace

// Two tensors; 70001 elements, enough for DGC to sample (not exact top-k).
Bucket DeviceCompressionBucket() {
  Bucket b;
  b.id = 3;
  b.members.push_back({"layer0.weight", 40000});
  b.members.back().shape = {200, 200};  // A matrix; the bias has no shape.
  b.members.push_back({"layer0.bias", 30001});
  b.count = 70001;
  b.bytes = b.count * 4;
  b.device_kind = static_cast<int32_t>(Device::Kind::kSim);
  return b;
}

std::vector<float> DeviceCompressionGradient(int rank, int step, int64_t n) {
  std::mt19937 rng(977 * rank + 31 * step + 5);
  std::normal_distribution<float> noise(0.0f, 0.01f);
  std::vector<float> g(n);
  for (int64_t i = 0; i < n; ++i) {
    g[i] = noise(rng) * (1 + static_cast<float>(i % 13));
  }
  return g;
}

absl::Status RunDeviceAndCpu(int size, const std::string& compression,
                             const std::string& cf, int steps, Outcome* run,
                             DeviceRuntime* runtime,
                             const std::function<int(int)>& ordinal_of,
                             const std::map<std::string, std::string>& extra,
                             bool device_gather, const CorruptGathered& corrupt,
                             const Bucket* bucket_in, bool record_pending) {
  TERSE_ASSIGN_OR_RETURN(const Config config,
                         DeviceCompressionConfig(compression, cf, extra));
  const Bucket bucket =
      bucket_in != nullptr ? *bucket_in : DeviceCompressionBucket();
  const int64_t n = bucket.count;
  run->device.assign(steps, std::vector<std::vector<float>>(size));
  run->cpu = run->device;
  run->residuals.assign(size, {});
  run->device_report.assign(size, {});
  run->cpu_report.assign(size, {});
  run->store_residual.assign(size, {});
  run->device_steps.assign(steps, std::vector<std::string>(size));
  run->cpu_steps = run->device_steps;
  run->device_pending.assign(record_pending ? steps : 0,
                             std::vector<std::vector<double>>(size));
  run->cpu_pending = run->device_pending;
  run->control_bytes.assign(steps, std::vector<int64_t>(size, 0));
  run->device_bytes = run->control_bytes;
  return RunLoopbackRanks(size, [&](int rank, Communicator* comm) {
    CountingCommunicator control(comm);
    CompressedReducer device_reducer(config, rank, size);
    CompressedReducer cpu_reducer(config, rank, size);
    const int ordinal = ordinal_of(rank);
    TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Stream> stream,
                           runtime->CreateStream(ordinal));
    TERSE_ASSIGN_OR_RETURN(DeviceBuffer buffer,
                           DeviceBuffer::Allocate(runtime, ordinal, n * 4));
    std::vector<uint8_t> staging;
    {
      DeviceCompression dc(config, rank, size, &device_reducer);
      const DeviceCompression::Target target{runtime, ordinal, stream.get()};
      // The executor's staged collective (TERSE_GPU_OPERATIONS=mpi): device
      // to host, the host collective, host to device, in stream order.
      auto allreduce = [&](void* data, int64_t count, DataType type) {
        const int64_t bytes = count * static_cast<int64_t>(DataTypeSize(type));
        staging.resize(bytes);
        TERSE_RETURN_IF_ERROR(stream->Memcpy(staging.data(), data, bytes));
        TERSE_RETURN_IF_ERROR(stream->Synchronize());
        TERSE_RETURN_IF_ERROR(
            comm->Allreduce(staging.data(), count, type, ReduceOp::kSum));
        TERSE_RETURN_IF_ERROR(stream->Memcpy(data, staging.data(), bytes));
        return stream->Synchronize();
      };
      // The executor's device collective (TERSE_GPU_OPERATIONS=nccl).
      std::unique_ptr<Communicator> device_comm;
      DeviceCompression::DeviceAllgatherv gather;
      int64_t gathered = 0;  // The bytes this rank sent through it.
      if (device_gather) {
        device_comm = std::make_unique<SimDeviceCommunicator>(
            BorrowCommunicator(comm), runtime, ordinal);
        gather = [&](const void* send, void* recv,
                     const std::vector<int64_t>& recv_bytes) -> absl::Status {
          TERSE_RETURN_IF_ERROR(stream->Synchronize());
          gathered += recv_bytes[rank];
          TERSE_RETURN_IF_ERROR(
              device_comm->Allgatherv(send, recv, recv_bytes));
          if (corrupt) corrupt(rank, recv, recv_bytes);
          return device_comm->Synchronize();
        };
      }
      for (int step = 0; step < steps; ++step) {
        const std::vector<float> g = DeviceCompressionGradient(rank, step, n);
        TERSE_RETURN_IF_ERROR(stream->Memcpy(buffer.data(), g.data(), n * 4));
        const int64_t control_before = control.sent;
        const int64_t gathered_before = gathered;
        TERSE_RETURN_IF_ERROR(dc.Reduce(bucket, buffer.data(), ReduceOp::kSum,
                                        step, target, &control, allreduce,
                                        gather));
        run->control_bytes[step][rank] = control.sent - control_before;
        run->device_bytes[step][rank] = gathered - gathered_before;
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
        run->device_steps[step][rank] =
            StepLine(device_reducer.Reports().at(0));
        run->cpu_steps[step][rank] = StepLine(cpu_reducer.Reports().at(0));
        if (record_pending) {
          TERSE_ASSIGN_OR_RETURN(run->device_pending[step][rank],
                                 PendingNorms(device_reducer));
          TERSE_ASSIGN_OR_RETURN(run->cpu_pending[step][rank],
                                 PendingNorms(cpu_reducer));
        }
      }
      TERSE_ASSIGN_OR_RETURN(std::vector<ResidualStore::Entry> entries,
                             dc.ExportResiduals());
      for (ResidualStore::Entry& e : entries) {
        run->residuals[rank][e.name] = std::move(e.values);
      }
      run->device_report[rank] = device_reducer.Reports().at(0);
      run->cpu_report[rank] = cpu_reducer.Reports().at(0);
      run->store_residual[rank] =
          device_reducer.Residual(bucket.members[0].name, 40000);
    }
    return absl::OkStatus();
  });
}

absl::Status ExpectBitwiseEqual(const Outcome& run, const std::string& what) {
  for (size_t step = 0; step < run.device_pending.size(); ++step) {
    for (size_t r = 0; r < run.device_pending[step].size(); ++r) {
      const std::vector<double>& d = run.device_pending[step][r];
      const std::vector<double>& c = run.cpu_pending[step][r];
      for (size_t i = 0; i < std::max(d.size(), c.size()); ++i) {
        if (i >= d.size() || i >= c.size() ||
            std::memcmp(&d[i], &c[i], sizeof(double)) != 0) {
          return absl::InternalError(absl::StrCat(
              what, " step ", step, " rank ", r, ": pending statistic ", i,
              " device ", i < d.size() ? absl::StrCat(d[i]) : "none", ", cpu ",
              i < c.size() ? absl::StrCat(c[i]) : "none"));
        }
      }
    }
  }
  for (size_t step = 0; step < run.device_steps.size(); ++step) {
    for (size_t r = 0; r < run.device_steps[step].size(); ++r) {
      if (run.device_steps[step][r] != run.cpu_steps[step][r]) {
        return absl::InternalError(absl::StrCat(
            what, " step ", step, " rank ", r, ": device ",
            run.device_steps[step][r], "; cpu ", run.cpu_steps[step][r]));
      }
    }
  }
  for (size_t step = 0; step < run.device.size(); ++step) {
    for (size_t r = 0; r < run.device[step].size(); ++r) {
      const std::vector<float>& d = run.device[step][r];
      const std::vector<float>& c = run.cpu[step][r];
      if (d.size() != c.size()) {
        return absl::InternalError(absl::StrCat(what, ": sizes differ"));
      }
      for (size_t i = 0; i < d.size(); ++i) {
        if (std::memcmp(&d[i], &c[i], 4) != 0) {
          return absl::InternalError(
              absl::StrCat(what, " step ", step, " rank ", r, " [", i,
                           "]: device ", d[i], ", cpu ", c[i]));
        }
      }
    }
    for (size_t r = 0; r < run.device_report.size(); ++r) {
      const BucketReport& d = run.device_report[r];
      const BucketReport& c = run.cpu_report[r];
      if (d.compressor != c.compressor || d.bytes_sent != c.bytes_sent ||
          WithoutTimes(d.policy) != WithoutTimes(c.policy)) {
        return absl::InternalError(
            absl::StrCat(what, " rank ", r, ": device reported ", d.compressor,
                         " ", d.bytes_sent, " bytes ", d.policy, "; cpu ",
                         c.compressor, " ", c.bytes_sent, " bytes ", c.policy));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ExpectClose(const Outcome& run, const std::string& what,
                         double tolerance) {
  for (size_t step = 0; step < run.device.size(); ++step) {
    for (size_t r = 0; r < run.device[step].size(); ++r) {
      const std::vector<float>& d = run.device[step][r];
      const std::vector<float>& c = run.cpu[step][r];
      if (d.size() != c.size()) {
        return absl::InternalError(absl::StrCat(what, ": sizes differ"));
      }
      double scale = 0;
      for (float v : c) scale = std::max(scale, std::fabs(double{v}));
      for (size_t i = 0; i < d.size(); ++i) {
        if (!(std::fabs(double{d[i]} - c[i]) <= tolerance * scale)) {
          return absl::InternalError(absl::StrCat(
              what, " step ", step, " rank ", r, " [", i, "]: device ", d[i],
              ", cpu ", c[i], " (tolerance ", tolerance * scale, ")"));
        }
      }
    }
  }
  for (size_t r = 0; r < run.device_report.size(); ++r) {
    if (run.device_report[r].compressor != run.cpu_report[r].compressor) {
      return absl::InternalError(absl::StrCat(
          what, " rank ", r, ": device sent ", run.device_report[r].compressor,
          ", cpu ", run.cpu_report[r].compressor));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckConservation(const Outcome& run, int size) {
  const Bucket bucket = DeviceCompressionBucket();
  const int64_t n = bucket.count;
  const int steps = static_cast<int>(run.device.size());
  std::vector<double> gradients(n, 0.0), kept(n, 0.0), magnitude(n, 0.0);
  for (int step = 0; step < steps; ++step) {
    for (int r = 0; r < size; ++r) {
      const std::vector<float> g = DeviceCompressionGradient(r, step, n);
      for (int64_t i = 0; i < n; ++i) {
        gradients[i] += g[i];
        magnitude[i] += std::fabs(g[i]);
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      kept[i] += run.device[step][0][i];
      magnitude[i] += std::fabs(run.device[step][0][i]);
    }
  }
  for (int r = 0; r < size; ++r) {
    int64_t offset = 0;
    for (const BucketMember& m : bucket.members) {
      auto it = run.residuals[r].find(m.name);
      if (it != run.residuals[r].end()) {
        if (static_cast<int64_t>(it->second.size()) != m.count) {
          return absl::InternalError(
              absl::StrCat("residual of ", m.name, " on rank ", r, " has ",
                           it->second.size(), " entries, not ", m.count));
        }
        for (int64_t i = 0; i < m.count; ++i) {
          kept[offset + i] += it->second[i];
          magnitude[offset + i] += std::fabs(it->second[i]);
        }
      }
      offset += m.count;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    if (!(std::fabs(kept[i] - gradients[i]) <= 1e-5 * magnitude[i] + 1e-9)) {
      return absl::InternalError(absl::StrCat("[", i, "]: sent + residuals ",
                                              kept[i], ", gradients ",
                                              gradients[i]));
    }
  }
  return absl::OkStatus();
}

}  // namespace testing
}  // namespace terse
