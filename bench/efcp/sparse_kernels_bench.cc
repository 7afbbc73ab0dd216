// The two m-row sparse kernels EFCP's step spends its O(m*k) time in
// (compressors/kernels/sparse_ops.h): SparseDenseDots and
// SparseLinearCombination, at d = 2^20, m = 1024, density 1% (k = 10485),
// random ascending supports, both row formats, one thread and the default
// thread count. Prints a table (median wall and process-CPU ms of --reps
// calls, and CPU ns per stored entry: on a shared machine the CPU time still
// measures the work) and one JSON line. Not a test: no time is asserted.
//
// Usage: sparse_kernels_bench [--reps=N] [--m=M]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "common/half.h"
#include "compressors/kernels/sparse_ops.h"

namespace terse {
namespace kernels {
namespace {

using Clock = std::chrono::steady_clock;

struct Window {
  std::vector<std::vector<uint32_t>> index32;
  std::vector<std::vector<float>> value32;
  std::vector<std::vector<uint16_t>> index16, value16;
  std::vector<SparseRow> a, b;  // format A and format B views
};

Window MakeWindow(int64_t d, int64_t m, int64_t k) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  Window w;
  w.index32.resize(m);
  w.value32.resize(m);
  w.index16.resize(m);
  w.value16.resize(m);
  std::vector<uint32_t> all(d);
  for (int64_t i = 0; i < d; ++i) all[i] = static_cast<uint32_t>(i);
  for (int64_t r = 0; r < m; ++r) {
    // k distinct indices: a partial Fisher-Yates shuffle, then sorted.
    for (int64_t j = 0; j < k; ++j) {
      std::uniform_int_distribution<int64_t> pick(j, d - 1);
      std::swap(all[j], all[pick(rng)]);
    }
    w.index32[r].assign(all.begin(), all.begin() + k);
    std::sort(w.index32[r].begin(), w.index32[r].end());
    w.value32[r].resize(k);
    for (float& v : w.value32[r]) v = uniform(rng);
    // k slots, as in the window: a row that needs markers drops entries.
    const int64_t kept =
        FitBlock16(w.index32[r].data(), w.value32[r].data(), k, k);
    w.index16[r].resize(k);
    w.value16[r].resize(k);
    const int64_t slots =
        EncodeBlock16BF16(w.index32[r].data(), w.value32[r].data(), kept, k,
                          w.index16[r].data(), w.value16[r].data());
    SparseRow row;
    row.nnz = kept;
    row.index32 = w.index32[r].data();
    row.value32 = w.value32[r].data();
    w.a.push_back(row);
    w.b.push_back(
        Block16Row(w.index16[r].data(), w.value16[r].data(), slots, d));
  }
  return w;
}

double ProcessCpuMs() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

struct Timing {
  double wall_ms = 0;
  double cpu_ms = 0;
};

// Medians of `reps` calls after a warm-up.
template <typename Fn>
Timing Median(int reps, Fn fn) {
  fn();
  std::vector<double> wall, cpu;
  for (int i = 0; i < reps; ++i) {
    const Clock::time_point start = Clock::now();
    const double cpu_start = ProcessCpuMs();
    fn();
    cpu.push_back(ProcessCpuMs() - cpu_start);
    wall.push_back(
        std::chrono::duration<double, std::milli>(Clock::now() - start)
            .count());
  }
  std::sort(wall.begin(), wall.end());
  std::sort(cpu.begin(), cpu.end());
  return {wall[wall.size() / 2], cpu[cpu.size() / 2]};
}

int Main(int argc, char** argv) {
  int reps = 5;
  int64_t m = 1024;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--reps=", 7) == 0) {
      reps = std::max(1, std::atoi(argv[i] + 7));
    } else if (std::strncmp(argv[i], "--m=", 4) == 0) {
      m = std::max(1, std::atoi(argv[i] + 4));
    } else {
      std::fprintf(stderr, "usage: %s [--reps=N] [--m=M]\n", argv[0]);
      return 2;
    }
  }
  const int64_t d = int64_t{1} << 20;
  const int64_t k = d / 100;
  const Window w = MakeWindow(d, m, k);
  std::vector<float> dense(d);
  std::mt19937 rng(8);
  std::normal_distribution<float> normal;
  for (float& v : dense) v = normal(rng);
  std::vector<double> dots(m), coeffs(m);
  for (double& c : coeffs) c = normal(rng) * 1e-3;
  const double entries = static_cast<double>(m) * k;

  std::printf("sparse kernels: d=%lld m=%lld k=%lld, median of %d\n",
              static_cast<long long>(d), static_cast<long long>(m),
              static_cast<long long>(k), reps);
  std::printf("%-24s %-13s %8s %9s %9s %12s\n", "kernel", "format", "threads",
              "wall_ms", "cpu_ms", "cpu_ns/entry");
  std::string json = "{\"bench\":\"sparse_kernels\"";
  for (int threads : {1, 0}) {
    for (int format = 0; format < 2; ++format) {
      const std::vector<SparseRow>& rows = format == 0 ? w.a : w.b;
      const char* name = format == 0 ? "index32_fp32" : "block16_bf16";
      const Timing dot = Median(reps, [&] {
        SparseDenseDots(rows.data(), m, dense.data(), dots.data(), threads);
      });
      const Timing comb = Median(reps, [&] {
        SparseLinearCombination(rows.data(), m, coeffs.data(), dense.data(),
                                threads);
      });
      const char* label = threads == 1 ? "1" : "default";
      std::printf("%-24s %-13s %8s %9.2f %9.2f %12.2f\n", "SparseDenseDots",
                  name, label, dot.wall_ms, dot.cpu_ms,
                  dot.cpu_ms * 1e6 / entries);
      std::printf("%-24s %-13s %8s %9.2f %9.2f %12.2f\n",
                  "SparseLinearCombination", name, label, comb.wall_ms,
                  comb.cpu_ms, comb.cpu_ms * 1e6 / entries);
      const std::string key = std::string(name) + "_t" + label;
      json += ",\"dots_cpu_ms_" + key + "\":" + std::to_string(dot.cpu_ms) +
              ",\"comb_cpu_ms_" + key + "\":" + std::to_string(comb.cpu_ms);
    }
  }
  std::printf("%s}\n", json.c_str());
  return 0;
}

}  // namespace
}  // namespace kernels
}  // namespace terse

int main(int argc, char** argv) { return terse::kernels::Main(argc, argv); }
