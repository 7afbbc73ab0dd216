// terse through its engine against raw MPI, same buffers, same sizes, same
// run. Not a test: prints a table and one final JSON line.
//
//   mpirun -np 4 allreduce_bench [--min_bytes=4096] [--max_bytes=268435456]
//                                [--budget_bytes=268435456] [--rounds=4]
//                                [--raw_vs_raw=1  (A/A run: noise floor)]
//
// What is compared, per size (powers of 4 from min to max bytes):
//   terse  the process-wide C++ API (engine/api.h), as a trainer calls it:
//          AllreduceAsync(in place) + Wait, and AllgatherAsync + Wait +
//          TakeAllgatherResult (terse hands back a new buffer; raw MPI writes
//          into one allocated beforehand). Every op goes through the
//          background thread's negotiation cycle (TERSE_CYCLE_TIME_MS), the
//          response cache and the fusion buffer, so small sizes show terse's
//          per-op latency, large ones its bandwidth.
//   raw    MPI_Allreduce(MPI_IN_PLACE) / MPI_Allgather on MPI_COMM_WORLD.
// TERSE_* variables configure the engine as in training (TERSE_COMPRESSION
// left unset: dense).
//
// Interleaved rounds: each round runs a terse block (Init, one untimed
// warm-up op, `iters` timed ops of each kind, Shutdown) and a raw block
// (warm-up, `iters` timed ops), alternating which goes first; iters =
// max(2, min(50, budget / size)). The engine is stopped during raw blocks:
// MPI is initialised MPI_THREAD_SERIALIZED, so only one thread may call it.
// Every timed op is preceded by a barrier (terse's own Barrier() for terse),
// and the slowest rank's time counts. The table shows the median time over
// all rounds, algbw = size / time and busbw as nccl-tests defines it
// (allreduce: algbw * 2(n-1)/n; allgather: algbw * (n-1)/n with the gathered
// buffer as size); ratio = terse busbw / raw busbw, the median over rounds
// of (raw block median / terse block median), so load drifts of a shared
// machine between rounds cancel. The per-op time includes how unevenly the
// barrier before it releases the ranks (terse's Barrier is itself an engine
// op); the "loop" column is the ratio of allreduce's time per op over
// `iters` ops back to back after one barrier (slowest rank), as nccl-tests
// times busbw. f32 sum; the timed buffers hold zeros (the
// warm-up checks a real sum).
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
#include "engine/api.h"

namespace terse {
namespace {

struct Flags {
  int64_t min_bytes = 4096;
  int64_t max_bytes = int64_t{256} << 20;
  int64_t budget_bytes = int64_t{256} << 20;
  int64_t rounds = 4;
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
  return v.empty() ? 0 : v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

void Die(const std::string& what) {
  std::fprintf(stderr, "allreduce_bench: %s\n", what.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

void Check(const absl::Status& s) {
  if (!s.ok()) Die(s.ToString());
}

void MaxOverRanks(std::vector<double>* t) {
  MPI_Allreduce(MPI_IN_PLACE, t->data(), static_cast<int>(t->size()),
                MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
}

// The ops of one size, on buffers shared by both variants.
struct Ops {
  int n = 1;
  int64_t count = 0;     // Floats allreduced.
  int64_t per_rank = 0;  // Bytes each rank contributes to the allgather.
  std::vector<float> buffer;
  std::vector<uint8_t> send, recv;
  std::string ar_name, ag_name;

  void RawAllreduce() {
    MPI_Allreduce(MPI_IN_PLACE, buffer.data(), static_cast<int>(count),
                  MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
  void RawAllgather() {
    MPI_Allgather(send.data(), static_cast<int>(per_rank), MPI_BYTE,
                  recv.data(), static_cast<int>(per_rank), MPI_BYTE,
                  MPI_COMM_WORLD);
  }
  void TerseAllreduce() {
    TensorView v(buffer.data(), count, DataType::kFloat32);
    absl::StatusOr<Handle> h =
        AllreduceAsync(ar_name, v, v, {count}, ReduceOp::kSum);
    Check(h.status());
    Check(Wait(*h));
  }
  void TerseAllgather() {
    TensorView v(send.data(), per_rank, DataType::kUInt8);
    absl::StatusOr<Handle> h = AllgatherAsync(ag_name, v, {per_rank});
    Check(h.status());
    Check(Wait(*h));
    absl::StatusOr<AllgatherResult> r = TakeAllgatherResult(*h);
    Check(r.status());
    if (static_cast<int64_t>(r->data.size()) != per_rank * n) {
      Die("terse allgather: wrong result size");
    }
  }
};

// Block times (slowest rank per op) of one variant.
struct Block {
  std::vector<double> ar, ag;
  // Allreduce, `iters` ops back to back after one barrier: seconds per op
  // (slowest rank), as nccl-tests times its loop.
  double ar_loop = 0;
};

Block TimeBlock(int iters, bool terse, bool raw_vs_raw, Ops& ops) {
  const bool engine = terse && !raw_vs_raw;
  if (engine) {
    Config config = Config::Defaults();
    absl::StatusOr<Config> env = Config::FromEnvironment();
    if (env.ok()) config = *env;
    Check(Init(config));
  }
  auto barrier = [&] {
    if (engine) {
      Check(Barrier());
    } else {
      MPI_Barrier(MPI_COMM_WORLD);
    }
  };
  auto allreduce = [&] {
    if (engine) {
      ops.TerseAllreduce();
    } else {
      ops.RawAllreduce();
    }
  };
  auto allgather = [&] {
    if (engine) {
      ops.TerseAllgather();
    } else {
      ops.RawAllgather();
    }
  };
  // Warm-up (connections, page faults, the response cache) with a check.
  std::fill(ops.buffer.begin(), ops.buffer.end(), 1.0f);
  allreduce();
  if (ops.buffer.front() != ops.n || ops.buffer.back() != ops.n) {
    Die(absl::StrCat(engine ? "terse" : "raw", " allreduce: wrong sum"));
  }
  std::fill(ops.buffer.begin(), ops.buffer.end(), 0.0f);
  allgather();
  Block b;
  auto time = [&](const std::function<void()>& op, std::vector<double>* out) {
    for (int i = 0; i < iters; ++i) {
      barrier();
      const double t0 = MPI_Wtime();
      op();
      out->push_back(MPI_Wtime() - t0);
    }
  };
  time(allreduce, &b.ar);
  time(allgather, &b.ag);
  barrier();
  const double loop_start = MPI_Wtime();
  for (int i = 0; i < iters; ++i) allreduce();
  std::vector<double> loop = {(MPI_Wtime() - loop_start) / iters};
  if (engine) Check(Shutdown());
  MaxOverRanks(&b.ar);  // The engine is stopped: MPI is ours again.
  MaxOverRanks(&b.ag);
  MaxOverRanks(&loop);
  b.ar_loop = loop[0];
  return b;
}

std::string SizeName(int64_t bytes) {
  if (bytes >= (1 << 20)) return absl::StrCat(bytes >> 20, "MiB");
  return absl::StrCat(bytes >> 10, "KiB");
}

int Run(const Flags& flags) {
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const bool root = rank == 0;
  const double ar_factor = 2.0 * (n - 1) / n, ag_factor = (n - 1.0) / n;
  if (root) {
    double load = -1;
    if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
      if (std::fscanf(f, "%lf", &load) != 1) load = -1;
      std::fclose(f);
    }
    std::printf(
        "# %s, %d ranks, f32 sum, %lld rounds; times are medians of the "
        "slowest rank; load average %.1f (1 min)\n",
        flags.raw_vs_raw
            ? "A/A run: raw MPI against raw MPI (ratio columns: raw/raw)"
            : "terse engine (AllreduceAsync/AllgatherAsync + Wait) vs raw "
              "MPI_Allreduce/MPI_Allgather",
        n, static_cast<long long>(flags.rounds), load);
    std::printf(
        "%-7s %5s | %10s %10s %8s %8s %6s %6s | %10s %10s %8s %8s %6s\n",
        "size", "iters", "ar_terse", "ar_raw", "busbw_t", "busbw_r", "ratio",
        "loop", "ag_terse", "ag_raw", "busbw_t", "busbw_r", "ratio");
    std::printf(
        "%-7s %5s | %10s %10s %8s %8s %6s %6s | %10s %10s %8s %8s %6s\n", "",
        "", "us", "us", "GB/s", "GB/s", "", "", "us", "us", "GB/s", "GB/s", "");
  }
  std::vector<std::string> ar_json, ag_json, loop_json;
  double min_ar_ratio_1mib = 1e9, min_loop_ratio_1mib = 1e9;
  for (int64_t bytes = flags.min_bytes; bytes <= flags.max_bytes; bytes *= 4) {
    const int iters = static_cast<int>(std::max<int64_t>(
        2, std::min<int64_t>(50, flags.budget_bytes / bytes)));
    Ops ops;
    ops.n = n;
    ops.count = bytes / 4;
    ops.buffer.assign(ops.count, 0.0f);
    // Allgather: the gathered buffer is `bytes`; each rank sends bytes / n.
    ops.per_rank = bytes / n;
    ops.send.assign(ops.per_rank, 1);
    ops.recv.assign(ops.per_rank * n, 0);
    ops.ar_name = absl::StrCat("ar.", bytes);
    ops.ag_name = absl::StrCat("ag.", bytes);
    Block terse, raw;
    std::vector<double> ar_ratios, ag_ratios, loop_ratios;
    for (int r = 0; r < flags.rounds; ++r) {
      Block t, w;
      if (r % 2 == 0) {
        t = TimeBlock(iters, true, flags.raw_vs_raw, ops);
        w = TimeBlock(iters, false, flags.raw_vs_raw, ops);
      } else {
        w = TimeBlock(iters, false, flags.raw_vs_raw, ops);
        t = TimeBlock(iters, true, flags.raw_vs_raw, ops);
      }
      ar_ratios.push_back(Median(w.ar) / Median(t.ar));
      ag_ratios.push_back(Median(w.ag) / Median(t.ag));
      loop_ratios.push_back(w.ar_loop / t.ar_loop);
      terse.ar.insert(terse.ar.end(), t.ar.begin(), t.ar.end());
      terse.ag.insert(terse.ag.end(), t.ag.begin(), t.ag.end());
      raw.ar.insert(raw.ar.end(), w.ar.begin(), w.ar.end());
      raw.ag.insert(raw.ag.end(), w.ag.begin(), w.ag.end());
    }
    const double ar_ratio = Median(ar_ratios), ag_ratio = Median(ag_ratios);
    const double loop_ratio = Median(loop_ratios);
    const double ag_bytes = static_cast<double>(ops.per_rank * n);
    const double ar_t = bytes / Median(terse.ar) * ar_factor / 1e9;
    const double ar_r = bytes / Median(raw.ar) * ar_factor / 1e9;
    const double ag_t = ag_bytes / Median(terse.ag) * ag_factor / 1e9;
    const double ag_r = ag_bytes / Median(raw.ag) * ag_factor / 1e9;
    if (root) {
      std::printf(
          "%-7s %5d | %10.1f %10.1f %8.3f %8.3f %6.3f %6.3f | %10.1f %10.1f "
          "%8.3f %8.3f %6.3f\n",
          SizeName(bytes).c_str(), iters, Median(terse.ar) * 1e6,
          Median(raw.ar) * 1e6, ar_t, ar_r, ar_ratio, loop_ratio,
          Median(terse.ag) * 1e6, Median(raw.ag) * 1e6, ag_t, ag_r, ag_ratio);
      std::fflush(stdout);
    }
    ar_json.push_back(absl::StrFormat("\"%d\":%.4f", bytes, ar_ratio));
    ag_json.push_back(absl::StrFormat("\"%d\":%.4f", bytes, ag_ratio));
    loop_json.push_back(absl::StrFormat("\"%d\":%.4f", bytes, loop_ratio));
    if (bytes >= (1 << 20)) {
      min_ar_ratio_1mib = std::min(min_ar_ratio_1mib, ar_ratio);
      min_loop_ratio_1mib = std::min(min_loop_ratio_1mib, loop_ratio);
    }
  }
  if (root) {
    std::printf(
        "{\"bench\":\"allreduce_bench\",\"compares\":\"%s\","
        "\"raw_vs_raw\":%s,\"ranks\":%d,\"dtype\":\"f32\",\"rounds\":%lld,"
        "\"allreduce_busbw_ratio\":{%s},\"allgather_busbw_ratio\":{%s},"
        "\"min_allreduce_ratio_ge_1MiB\":%.4f,"
        "\"allreduce_loop_busbw_ratio\":{%s},"
        "\"min_allreduce_loop_ratio_ge_1MiB\":%.4f}\n",
        flags.raw_vs_raw ? "raw MPI vs raw MPI"
                         : "terse engine vs raw MPI (busbw terse/raw)",
        flags.raw_vs_raw ? "true" : "false", n,
        static_cast<long long>(flags.rounds),
        absl::StrJoin(ar_json, ",").c_str(),
        absl::StrJoin(ag_json, ",").c_str(),
        min_ar_ratio_1mib > 1e8 ? 0.0 : min_ar_ratio_1mib,
        absl::StrJoin(loop_json, ",").c_str(),
        min_loop_ratio_1mib > 1e8 ? 0.0 : min_loop_ratio_1mib);
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
        !terse::ParseFlag(argv[i], "--rounds", &flags.rounds) &&
        !terse::ParseFlag(argv[i], "--raw_vs_raw", &flags.raw_vs_raw)) {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  if (flags.min_bytes < 64 || flags.max_bytes > (int64_t{1} << 31) - 4096 ||
      flags.rounds < 1) {
    std::fprintf(stderr, "sizes must lie in [64 B, 2 GiB), rounds >= 1\n");
    return 2;
  }
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  const int rc = terse::Run(flags);
  MPI_Finalize();
  return rc;
}
