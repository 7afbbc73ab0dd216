// engine_nccl_bench: terse's engine allreducing one CUDA tensor against raw
// ncclAllReduce on the same device buffers, in one run (issue 17: "engine
// allreduce of CUDA tensors vs raw ncclAllReduce, 1 MiB-1 GiB: >= 0.95x
// busbw"). Not a test: prints a table and one final JSON line, never
// asserts a time. Without a CUDA device on every rank it prints "skipped: no
// device" and exits 0.
//
//   mpirun -np N engine_nccl_bench [--min_bytes=1048576]
//                                  [--max_bytes=1073741824]
//                                  [--iters=20] [--warmup=3]
//
// Each rank uses GPU local_rank % device_count (NCCL refuses two ranks on one
// GPU: on a one-GPU machine, N = 1). Sizes: fp32, min_bytes, x4, ... up to
// max_bytes (default 1, 4, 16, 64, 256 MiB, 1 GiB). Two device buffers of the
// largest size, `in` (every element rank + 1) and `out`, serve both ways,
// out of place (in -> out, so no timed op changes its input and every
// repetition computes the same sum):
//   terse  AllreduceAsync(in, out, Sum) of one CUDA tensor through the
//          process-wide API (engine/api.h) then Wait (which blocks the host
//          until the device work is done), TERSE_* from the environment
//          (TERSE_GPU_OPERATIONS default nccl: the engine's own NCCL
//          communicator). One tensor of >= 1 MiB is a bucket of its own
//          whatever TERSE_FUSION_THRESHOLD is (EngineOptions::solo_bytes);
//          the device executor still copies it into the bucket's fusion
//          buffer and back out (engine/device_executor.cc).
//   raw    ncclAllReduce(in, out) on a second NCCL communicator of the bench
//          (ncclGetUniqueId broadcast over MPI), on its own non-blocking
//          stream, then cudaStreamSynchronize.
// Per size: `warmup` untimed pairs (the first checks both results over the
// whole buffer against n(n+1)/2), then `iters` timed pairs, alternating
// which way goes first. Every op is timed on the host from the call to its
// completion, after a barrier (terse's Barrier(): the engine's thread owns
// MPI while it runs, MPI being MPI_THREAD_SERIALIZED); the slowest rank's
// time counts, and each figure is the median over iterations.
// algbw = bytes / time, busbw = algbw * 2(n-1)/n (nccl-tests' definition;
// 0 for n = 1), GB = 1e9 bytes. ratio = raw time / terse time (= terse
// busbw / raw busbw when n > 1; with n = 1 the time ratio is the only
// figure: a single-rank ncclAllReduce out of place is one device copy).
// min_ratio_ge_1mib: the smallest ratio over sizes >= 1 MiB.
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/cuda_probe.h"
#include "engine/api.h"

namespace terse {
namespace {

struct Flags {
  int64_t min_bytes = int64_t{1} << 20;
  int64_t max_bytes = int64_t{1} << 30;
  int64_t iters = 20;
  int64_t warmup = 3;
};

bool ParseFlag(const char* arg, const char* name, int64_t* value) {
  const size_t n = std::strlen(name);
  if (std::strncmp(arg, name, n) != 0 || arg[n] != '=') return false;
  *value = std::strtoll(arg + n + 1, nullptr, 10);
  return true;
}

void Die(const std::string& what) {
  std::fprintf(stderr, "engine_nccl_bench: %s\n", what.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

void Check(const absl::Status& s) {
  if (!s.ok()) Die(s.ToString());
}

void CudaCheck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    Die(absl::StrCat(what, ": ", cudaGetErrorString(e)));
  }
}

void NcclCheck(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) {
    Die(absl::StrCat(what, ": ", ncclGetErrorString(r), " (",
                     ncclGetLastError(nullptr), ")"));
  }
}

double Now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.empty() ? 0 : v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

void MaxOverRanks(std::vector<double>* t) {
  MPI_Allreduce(MPI_IN_PLACE, t->data(), static_cast<int>(t->size()),
                MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
}

std::string SizeName(int64_t bytes) {
  if (bytes >= (int64_t{1} << 30) && bytes % (int64_t{1} << 30) == 0) {
    return absl::StrCat(bytes >> 30, " GiB");
  }
  if (bytes >= (1 << 20)) return absl::StrCat(bytes >> 20, " MiB");
  return absl::StrCat(bytes >> 10, " KiB");
}

// Host staging for filling and checking device buffers, in chunks.
constexpr int64_t kChunkFloats = int64_t{1} << 20;  // 4 MiB.

void FillDevice(float* dst, int64_t count, float value) {
  std::vector<float> host(std::min(count, kChunkFloats), value);
  for (int64_t at = 0; at < count; at += kChunkFloats) {
    const int64_t n = std::min(kChunkFloats, count - at);
    CudaCheck(cudaMemcpy(dst + at, host.data(), n * sizeof(float),
                         cudaMemcpyHostToDevice),
              "fill: cudaMemcpy");
  }
  // A pageable copy may return before its DMA is done, and the engine's and
  // the raw way's streams are non-blocking (no implicit order with it).
  CudaCheck(cudaDeviceSynchronize(), "fill: cudaDeviceSynchronize");
}

// out[0, count) = 0, done before any stream reads it (cudaMemset is
// asynchronous to the host on device memory).
void ZeroDevice(float* dst, int64_t count) {
  CudaCheck(cudaMemset(dst, 0, count * sizeof(float)), "cudaMemset");
  CudaCheck(cudaDeviceSynchronize(), "zero: cudaDeviceSynchronize");
}

// Every element of `src` equals `want` (small integers: exact in fp32).
void CheckDevice(const float* src, int64_t count, float want, const char* way,
                 int rank) {
  std::vector<float> host(std::min(count, kChunkFloats));
  for (int64_t at = 0; at < count; at += kChunkFloats) {
    const int64_t n = std::min(kChunkFloats, count - at);
    CudaCheck(cudaMemcpy(host.data(), src + at, n * sizeof(float),
                         cudaMemcpyDeviceToHost),
              "check: cudaMemcpy");
    for (int64_t i = 0; i < n; ++i) {
      if (host[i] != want) {
        Die(absl::StrCat(way, " allreduce of ", count * 4, " bytes: rank ",
                         rank, " [", at + i, "] = ", host[i], ", want ", want));
      }
    }
  }
}

int Run(const Flags& flags) {
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const bool root = rank == 0;
  if (flags.min_bytes < 4 || flags.max_bytes < flags.min_bytes ||
      flags.iters < 1 || flags.warmup < 1) {
    Die("need 4 <= min_bytes <= max_bytes, iters >= 1, warmup >= 1");
  }

  // Every rank needs a device, or none runs (NCCL would hang the others).
  const CudaInfo info = ProbeCuda();
  int have = info.device_count > 0 ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &have, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (have == 0) {
    if (root) {
      std::printf("engine_nccl_bench: skipped: no device (rank 0: %s)\n",
                  info.device_count > 0 ? "another rank has none"
                                        : info.why_none.c_str());
    }
    return 0;
  }

  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL,
                      &local);
  int local_rank = 0;
  MPI_Comm_rank(local, &local_rank);
  MPI_Comm_free(&local);
  const int device = local_rank % info.device_count;
  CudaCheck(cudaSetDevice(device), "cudaSetDevice");
  cudaDeviceProp prop;
  CudaCheck(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");

  std::vector<int64_t> sizes;
  for (int64_t b = flags.min_bytes; b <= flags.max_bytes; b *= 4) {
    sizes.push_back(b / 4 * 4);
  }
  const int64_t max_count = sizes.back() / 4;

  // The buffers both ways share.
  float* in = nullptr;
  float* out = nullptr;
  CudaCheck(cudaMalloc(&in, max_count * sizeof(float)), "cudaMalloc(in)");
  CudaCheck(cudaMalloc(&out, max_count * sizeof(float)), "cudaMalloc(out)");
  FillDevice(in, max_count, rank + 1.0f);
  const float want = n * (n + 1) / 2.0f;

  // The raw way's NCCL communicator and stream (MPI is ours until Init).
  ncclUniqueId id;
  if (root) NcclCheck(ncclGetUniqueId(&id), "ncclGetUniqueId");
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm = nullptr;
  NcclCheck(ncclCommInitRank(&comm, n, id, rank),
            "ncclCommInitRank (two ranks on one GPU?)");
  cudaStream_t stream = nullptr;
  CudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
            "cudaStreamCreateWithFlags");

  absl::StatusOr<Config> config = Config::FromEnvironment();
  Check(config.status());
  if (root) {
    double load = -1;
    if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
      if (std::fscanf(f, "%lf", &load) != 1) load = -1;
      std::fclose(f);
    }
    std::printf(
        "engine_nccl_bench: %d ranks, rank 0 on GPU %d of %d (%s), CUDA "
        "runtime %d, NCCL %d, fp32 sum out of place, %lld warm-up + %lld "
        "timed pairs per size, load average %.1f\n"
        "terse: TERSE_GPU_OPERATIONS=%s, TERSE_CYCLE_TIME_MS=%g, "
        "TERSE_FUSION_THRESHOLD=%lld\n",
        n, device, info.device_count, prop.name, info.runtime_version,
        info.nccl_version, static_cast<long long>(flags.warmup),
        static_cast<long long>(flags.iters), load,
        config->gpu_operations.c_str(), config->cycle_time_ms,
        static_cast<long long>(config->fusion_threshold_bytes));
    std::fflush(stdout);
  }
  Check(Init(*config));
  // From here until Shutdown the engine's thread owns MPI.

  const Device cuda = Device::Cuda(device);
  auto barrier = [] { Check(Barrier()); };
  auto terse = [&](const std::string& name, int64_t count) {
    TensorView vin(in, count, DataType::kFloat32, cuda);
    TensorView vout(out, count, DataType::kFloat32, cuda);
    absl::StatusOr<Handle> h =
        AllreduceAsync(name, vin, vout, {count}, ReduceOp::kSum);
    Check(h.status());
    Check(Wait(*h));
  };
  auto raw = [&](int64_t count) {
    NcclCheck(ncclAllReduce(in, out, static_cast<size_t>(count), ncclFloat,
                            ncclSum, comm, stream),
              "ncclAllReduce");
    CudaCheck(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  };
  auto timed = [&](const std::function<void()>& op) {
    barrier();
    const double t0 = Now();
    op();
    return Now() - t0;
  };

  std::vector<std::vector<double>> terse_t(sizes.size()), raw_t(sizes.size());
  for (size_t s = 0; s < sizes.size(); ++s) {
    const int64_t count = sizes[s] / 4;
    const std::string name = absl::StrCat("engine_nccl.", sizes[s]);
    for (int64_t w = 0; w < flags.warmup; ++w) {
      const bool check = w == 0;
      if (check) ZeroDevice(out, count);
      barrier();
      terse(name, count);
      if (check) CheckDevice(out, count, want, "terse", rank);
      if (check) ZeroDevice(out, count);
      barrier();
      raw(count);
      if (check) CheckDevice(out, count, want, "raw", rank);
    }
    for (int64_t i = 0; i < flags.iters; ++i) {
      auto run_terse = [&] {
        terse_t[s].push_back(timed([&] { terse(name, count); }));
      };
      auto run_raw = [&] { raw_t[s].push_back(timed([&] { raw(count); })); };
      if (i % 2 == 0) {
        run_terse();
        run_raw();
      } else {
        run_raw();
        run_terse();
      }
    }
  }
  Check(Shutdown());  // MPI is ours again.
  for (size_t s = 0; s < sizes.size(); ++s) {
    MaxOverRanks(&terse_t[s]);
    MaxOverRanks(&raw_t[s]);
  }

  const double factor = 2.0 * (n - 1) / n;
  std::string rows;
  double min_ratio = 0;
  bool any = false;
  if (root) {
    std::printf("%10s %10s %10s %12s %12s %12s %12s %8s\n", "size", "terse ms",
                "raw ms", "terse algbw", "raw algbw", "terse busbw",
                "raw busbw", "ratio");
  }
  for (size_t s = 0; s < sizes.size(); ++s) {
    const double bytes = static_cast<double>(sizes[s]);
    const double a = Median(terse_t[s]), b = Median(raw_t[s]);
    const double ratio = b / a;
    const double a_alg = bytes / a / 1e9, b_alg = bytes / b / 1e9;
    if (sizes[s] >= (int64_t{1} << 20)) {
      min_ratio = any ? std::min(min_ratio, ratio) : ratio;
      any = true;
    }
    if (root) {
      std::printf("%10s %10.3f %10.3f %12.2f %12.2f %12.2f %12.2f %8.3f\n",
                  SizeName(sizes[s]).c_str(), a * 1e3, b * 1e3, a_alg, b_alg,
                  a_alg * factor, b_alg * factor, ratio);
    }
    absl::StrAppend(&rows, s == 0 ? "" : ",", "{\"bytes\":", sizes[s],
                    ",\"terse_ms\":", a * 1e3, ",\"raw_ms\":", b * 1e3,
                    ",\"terse_busbw_gbs\":", a_alg * factor,
                    ",\"raw_busbw_gbs\":", b_alg * factor, ",\"ratio\":", ratio,
                    "}");
  }
  const std::string min_json = any ? absl::StrCat(min_ratio) : "null";
  if (root) {
    std::printf(
        "ratio = raw time / terse time%s; busbw = algbw * 2(n-1)/n, GB/s "
        "(1e9)\n",
        n > 1 ? " = terse busbw / raw busbw" : " (1 rank: busbw is 0)");
    std::printf(
        "{\"bench\":\"engine_nccl\",\"ranks\":%d,\"gpu\":\"%s\","
        "\"gpu_operations\":\"%s\",\"iters\":%lld,\"rows\":[%s],"
        "\"min_ratio_ge_1mib\":%s}\n",
        n, prop.name, config->gpu_operations.c_str(),
        static_cast<long long>(flags.iters), rows.c_str(), min_json.c_str());
  }

  NcclCheck(ncclCommDestroy(comm), "ncclCommDestroy");
  CudaCheck(cudaStreamDestroy(stream), "cudaStreamDestroy");
  CudaCheck(cudaFree(in), "cudaFree");
  CudaCheck(cudaFree(out), "cudaFree");
  return 0;
}

}  // namespace
}  // namespace terse

int main(int argc, char** argv) {
  using namespace terse;
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    if (!ParseFlag(argv[i], "--min_bytes", &flags.min_bytes) &&
        !ParseFlag(argv[i], "--max_bytes", &flags.max_bytes) &&
        !ParseFlag(argv[i], "--iters", &flags.iters) &&
        !ParseFlag(argv[i], "--warmup", &flags.warmup)) {
      Die(absl::StrCat("unknown flag ", argv[i],
                       " (--min_bytes= --max_bytes= --iters= --warmup=)"));
    }
  }
  const int rc = Run(flags);
  MPI_Finalize();
  return rc;
}
