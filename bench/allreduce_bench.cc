// terse's MPI Allreduce/Allgather side by side with raw MPI, same buffers,
// same run. Not a test: prints a table and one final JSON line.
//
//   mpirun -np 4 allreduce_bench [--min_bytes=4096] [--max_bytes=268435456]
//                                [--budget_bytes=536870912]
//                                [--raw_vs_raw=1  (A/A run: noise floor)]
//
// For each size (powers of 4 from min to max bytes) it runs
// max(3, min(500, budget / size)) iterations; each iteration times terse and
// raw MPI back to back, alternating which goes first, each after a barrier,
// and the slowest rank's time counts. The table shows the median time, algbw
// = size / time and busbw as nccl-tests defines it (allreduce: algbw *
// 2(n-1)/n; allgather: algbw * (n-1)/n with the gathered buffer as size), and
// ratio = terse busbw / raw busbw, as the median of the per-iteration ratios
// (each pair ran back to back, so load drifts on a shared machine cancel). f32
// sum; buffers hold zeros so values stay finite however many iterations run.
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "collectives/mpi/mpi_communicator.h"

namespace terse {
namespace {

struct Flags {
  int64_t min_bytes = 4096;
  int64_t max_bytes = int64_t{256} << 20;
  int64_t budget_bytes = int64_t{1} << 29;
  // 1: time raw MPI against itself (an A/A run that shows the noise floor).
  int64_t raw_vs_raw = 0;
};

bool ParseFlag(const char* arg, const char* name, int64_t* value) {
  size_t n = std::strlen(name);
  if (std::strncmp(arg, name, n) != 0 || arg[n] != '=') return false;
  *value = std::strtoll(arg + n + 1, nullptr, 10);
  return true;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

struct Pair {
  double terse_s;  // Median time.
  double raw_s;
  // Median over iterations of raw_i / terse_i: terse's busbw over raw's,
  // from runs adjacent in time, so slow drifts of a shared machine's load
  // cancel.
  double ratio;
};

// Median over iterations of the slowest rank's time, for both variants.
Pair TimePair(int iterations, const std::function<void()>& terse_op,
              const std::function<void()>& raw_op) {
  std::vector<double> times(2 * iterations);  // [terse..., raw...]
  terse_op();  // Warm up both (connections, page faults).
  raw_op();
  for (int i = 0; i < iterations; ++i) {
    for (int k = 0; k < 2; ++k) {
      const bool terse_turn = (k == 0) == (i % 2 == 0);
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      (terse_turn ? terse_op : raw_op)();
      double dt = MPI_Wtime() - t0;
      times[terse_turn ? i : iterations + i] = dt;
    }
  }
  MPI_Allreduce(MPI_IN_PLACE, times.data(), static_cast<int>(times.size()),
                MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  std::vector<double> ratios(iterations);
  for (int i = 0; i < iterations; ++i) {
    ratios[i] = times[iterations + i] / times[i];
  }
  return {Median({times.begin(), times.begin() + iterations}),
          Median({times.begin() + iterations, times.end()}), Median(ratios)};
}

std::string SizeName(int64_t bytes) {
  if (bytes >= (1 << 20)) return absl::StrCat(bytes >> 20, "MiB");
  return absl::StrCat(bytes >> 10, "KiB");
}

int Run(const Flags& flags) {
  auto created = MpiCommunicator::Create();
  if (!created.ok()) {
    std::fprintf(stderr, "%s\n", created.status().ToString().c_str());
    return 1;
  }
  MpiCommunicator& comm = **created;
  const int n = comm.size();
  const bool root = comm.rank() == 0;
  const double ar_factor = 2.0 * (n - 1) / n, ag_factor = (n - 1.0) / n;
  if (root) {
    std::printf(
        "# %s, %d ranks, f32 sum; times are medians of the slowest rank\n",
        flags.raw_vs_raw ? "A/A run: raw MPI (ratio columns: raw/raw)"
                         : "terse MPI vs raw MPI",
        n);
    std::printf("%-7s %5s | %10s %10s %8s %8s %6s | %10s %10s %8s %8s %6s\n",
                "size", "iters", "ar_terse", "ar_raw", "busbw_t", "busbw_r",
                "ratio", "ag_terse", "ag_raw", "busbw_t", "busbw_r", "ratio");
    std::printf("%-7s %5s | %10s %10s %8s %8s %6s | %10s %10s %8s %8s %6s\n",
                "", "", "us", "us", "GB/s", "GB/s", "", "us", "us", "GB/s",
                "GB/s", "");
  }
  std::vector<std::string> ar_json, ag_json;
  double min_ar_ratio_1mib = 1e9;
  for (int64_t bytes = flags.min_bytes; bytes <= flags.max_bytes; bytes *= 4) {
    const int64_t count = bytes / 4;
    const int iterations = static_cast<int>(std::max<int64_t>(
        3, std::min<int64_t>(500, flags.budget_bytes / bytes)));
    std::vector<float> buffer(count, 0.0f);
    Pair ar = TimePair(
        iterations,
        [&] {
          if (flags.raw_vs_raw) {
            MPI_Allreduce(MPI_IN_PLACE, buffer.data(), static_cast<int>(count),
                          MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            return;
          }
          absl::Status s = comm.Allreduce(buffer.data(), count,
                                          DataType::kFloat32, ReduceOp::kSum);
          if (!s.ok()) MPI_Abort(MPI_COMM_WORLD, 1);
        },
        [&] {
          MPI_Allreduce(MPI_IN_PLACE, buffer.data(), static_cast<int>(count),
                        MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        });
    std::vector<float>().swap(buffer);
    // Allgather: the gathered buffer is `bytes`; each rank sends bytes / n.
    const int64_t per_rank = bytes / n;
    std::vector<uint8_t> send(per_rank, 1), recv(per_rank * n, 0);
    Pair ag = TimePair(
        iterations,
        [&] {
          if (flags.raw_vs_raw) {
            MPI_Allgather(send.data(), static_cast<int>(per_rank), MPI_BYTE,
                          recv.data(), static_cast<int>(per_rank), MPI_BYTE,
                          MPI_COMM_WORLD);
            return;
          }
          absl::Status s = comm.Allgather(send.data(), recv.data(), per_rank);
          if (!s.ok()) MPI_Abort(MPI_COMM_WORLD, 1);
        },
        [&] {
          MPI_Allgather(send.data(), static_cast<int>(per_rank), MPI_BYTE,
                        recv.data(), static_cast<int>(per_rank), MPI_BYTE,
                        MPI_COMM_WORLD);
        });
    const double ag_bytes = static_cast<double>(per_rank * n);
    const double ar_t = bytes / ar.terse_s * ar_factor / 1e9;
    const double ar_r = bytes / ar.raw_s * ar_factor / 1e9;
    const double ag_t = ag_bytes / ag.terse_s * ag_factor / 1e9;
    const double ag_r = ag_bytes / ag.raw_s * ag_factor / 1e9;
    if (root) {
      std::printf(
          "%-7s %5d | %10.1f %10.1f %8.3f %8.3f %6.3f | %10.1f %10.1f %8.3f "
          "%8.3f %6.3f\n",
          SizeName(bytes).c_str(), iterations, ar.terse_s * 1e6, ar.raw_s * 1e6,
          ar_t, ar_r, ar_t / ar_r, ag.terse_s * 1e6, ag.raw_s * 1e6, ag_t, ag_r,
          ag_t / ag_r);
      std::fflush(stdout);
    }
    ar_json.push_back(absl::StrFormat("\"%d\":%.4f", bytes, ar.ratio));
    ag_json.push_back(absl::StrFormat("\"%d\":%.4f", bytes, ag.ratio));
    if (bytes >= (1 << 20)) {
      min_ar_ratio_1mib = std::min(min_ar_ratio_1mib, ar.ratio);
    }
  }
  if (root) {
    std::printf(
        "{\"bench\":\"allreduce_bench\",\"raw_vs_raw\":%s,\"ranks\":%d,"
        "\"dtype\":\"f32\","
        "\"allreduce_busbw_ratio\":{%s},\"allgather_busbw_ratio\":{%s},"
        "\"min_allreduce_ratio_ge_1MiB\":%.4f}\n",
        flags.raw_vs_raw ? "true" : "false", n,
        absl::StrJoin(ar_json, ",").c_str(),
        absl::StrJoin(ag_json, ",").c_str(),
        min_ar_ratio_1mib > 1e8 ? 0.0 : min_ar_ratio_1mib);
  }
  return 0;
}

}  // namespace
}  // namespace terse

int main(int argc, char** argv) {
  terse::Flags flags;
  for (int i = 1; i < argc; ++i) {
    if (!terse::ParseFlag(argv[i], "--min_bytes", &flags.min_bytes) &&
        !terse::ParseFlag(argv[i], "--max_bytes", &flags.max_bytes) &&
        !terse::ParseFlag(argv[i], "--budget_bytes", &flags.budget_bytes) &&
        !terse::ParseFlag(argv[i], "--raw_vs_raw", &flags.raw_vs_raw)) {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  if (flags.min_bytes < 64 || flags.max_bytes > (int64_t{1} << 31) - 4096) {
    std::fprintf(stderr, "sizes must lie in [64 B, 2 GiB)\n");
    return 2;
  }
  return terse::Run(flags);
}
