// EFCP benchmark: DenseMfac against SparseMfac (both window storages) at
// d = 2^20, density 1%, m = 256 / 512 / 1024, then SparseMfac alone at
// d = 2^24 (m = 256 by default: at m = 1024 one step takes seconds here and
// the run would not fit two minutes). Reports the median step time and the
// window memory side by side, then one JSON line with the ratios.
//
// A step's cost does not depend on the window's contents, only on its
// shape, so each sparse window is filled at once with ImportWindow (rows
// with random supports, values on the bf16 grid, and their exact Gram
// matrix, cheap to compute because rows in different classes have disjoint
// supports) instead of m real steps; the dense window always multiplies all
// m rows, so it needs no filling. The timed steps are real Steps on random
// gradients. The O(m^3) refactorisation, run every m steps, is timed on its
// own and added amortised (/m). Besides the wall clock, each step's process
// CPU time (all threads) is reported: on a machine shared with other work it
// still measures what a step costs.
//
// Usage: efcp_bench [--steps=N] [--large=0|1] [--large_m=M]
//   --steps  timed steps per configuration at d = 2^20 (default 3; the
//            sparse ones run 2 more, they are cheap); d = 2^24 times one.
//   --large  0 skips d = 2^24.
//   --large_m  the window at d = 2^24 (default 256).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench/efcp/synthetic_window.h"
#include "common/half.h"
#include "efcp/dense_mfac.h"
#include "efcp/error_feedback.h"
#include "efcp/sparse_mfac.h"

namespace terse {
namespace efcp {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// CPU time of the whole process (all threads), in ms: on a shared machine
// it measures the work a step does even when the wall clock waits for a
// core.
double ProcessCpuMs() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

struct Result {
  std::string what;
  int64_t d = 0;
  int64_t m = 0;
  double step_ms = 0;       // median of the timed steps (wall clock)
  double cpu_ms = 0;        // median CPU time of the timed steps
  double refactor_ms = 0;   // one O(m^3) refactorisation
  double amortized_ms = 0;  // step + refactor / m
  int64_t window_bytes = 0;
  int64_t total_bytes = 0;
};

std::vector<float> RandomGradient(int64_t d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> g(d);
  for (float& v : g) v = normal(rng);
  return g;
}

// Median wall-clock and CPU milliseconds of `steps` calls after a warm-up.
template <typename Fn>
void MedianMs(int steps, Fn step, double* wall_ms, double* cpu_ms) {
  step();  // warm-up
  std::vector<double> wall, cpu;
  for (int i = 0; i < steps; ++i) {
    const Clock::time_point start = Clock::now();
    const double cpu_start = ProcessCpuMs();
    step();
    cpu.push_back(ProcessCpuMs() - cpu_start);
    wall.push_back(Seconds(start) * 1e3);
  }
  std::sort(wall.begin(), wall.end());
  std::sort(cpu.begin(), cpu.end());
  *wall_ms = wall[wall.size() / 2];
  *cpu_ms = cpu[cpu.size() / 2];
}

Result RunDense(int64_t d, int64_t m, int steps,
                const std::vector<std::vector<float>>& grads) {
  DenseMfacOptions options;
  options.dim = d;
  options.window = m;
  auto mfac = *DenseMfac::Create(options);
  std::vector<float> update(d);
  size_t next = 0;
  Result r;
  r.what = "dense_mfac";
  r.d = d;
  r.m = m;
  MedianMs(
      steps,
      [&] {
        absl::Status s =
            mfac->Step(grads[next++ % grads.size()], absl::MakeSpan(update));
        if (!s.ok()) std::abort();
      },
      &r.step_ms, &r.cpu_ms);
  const Clock::time_point start = Clock::now();
  mfac->Refactorize();
  r.refactor_ms = Seconds(start) * 1e3;
  r.amortized_ms = r.step_ms + r.refactor_ms / m;
  r.window_bytes = mfac->memory().window;
  r.total_bytes = mfac->memory_bytes();
  return r;
}

Result RunSparse(int64_t d, int64_t m, WindowStorage storage, int steps,
                 const std::vector<std::vector<float>>& grads) {
  SparseMfacOptions options;
  options.dim = d;
  options.window = m;
  options.density = 0.01;
  options.storage = storage;
  auto mfac = *SparseMfac::Create(options);
  {
    std::vector<SparseVector> rows;
    std::vector<double> gram;
    SyntheticWindow(d, m, mfac->k(), &rows, &gram);
    absl::Status s = mfac->ImportWindow(rows, gram);
    if (!s.ok()) {
      std::fprintf(stderr, "import failed: %s\n", s.ToString().c_str());
      std::abort();
    }
  }
  std::vector<float> update(d);
  size_t next = 0;
  Result r;
  r.what =
      std::string("sparse_mfac/") + std::string(WindowStorageName(storage));
  r.d = d;
  r.m = m;
  MedianMs(
      steps,
      [&] {
        absl::Status s =
            mfac->Step(grads[next++ % grads.size()], absl::MakeSpan(update));
        if (!s.ok()) std::abort();
      },
      &r.step_ms, &r.cpu_ms);
  const Clock::time_point start = Clock::now();
  mfac->Refactorize();
  r.refactor_ms = Seconds(start) * 1e3;
  r.amortized_ms = r.step_ms + r.refactor_ms / m;
  r.window_bytes = mfac->memory().window;
  r.total_bytes = mfac->memory_bytes();
  return r;
}

void Print(const Result& r, int64_t dense_window_bytes) {
  std::printf(
      "%-26s %9lld %5lld %10.2f %10.2f %10.2f %10.2f %12.1f %9.4f%% %12.1f\n",
      r.what.c_str(), static_cast<long long>(r.d), static_cast<long long>(r.m),
      r.step_ms, r.cpu_ms, r.refactor_ms, r.amortized_ms,
      r.window_bytes / 1048576.0, 100.0 * r.window_bytes / dense_window_bytes,
      r.total_bytes / 1048576.0);
  std::fflush(stdout);
}

int Main(int argc, char** argv) {
  int steps = 3;
  bool large = true;
  int64_t m_large = 256;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--steps=", 8) == 0) {
      steps = std::max(1, std::atoi(argv[i] + 8));
    } else if (std::strncmp(argv[i], "--large_m=", 10) == 0) {
      m_large = std::max(1, std::atoi(argv[i] + 10));
    } else if (std::strncmp(argv[i], "--large=", 8) == 0) {
      large = std::atoi(argv[i] + 8) != 0;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--steps=N] [--large=0|1] [--large_m=M]\n",
                   argv[0]);
      return 2;
    }
  }
  const Clock::time_point bench_start = Clock::now();
  std::printf(
      "EFCP bench: density 1%%, median of %d steps after 1 warm-up; "
      "refactor = one O(m^3) refresh (every m steps)\n",
      steps);
  std::printf("%-26s %9s %5s %10s %10s %10s %10s %12s %10s %12s\n",
              "preconditioner", "d", "m", "step_ms", "cpu_ms", "refact_ms",
              "amort_ms", "window_MiB", "%dense", "total_MiB");
  const int64_t d = int64_t{1} << 20;
  const std::vector<std::vector<float>> grads = {RandomGradient(d, 1),
                                                 RandomGradient(d, 2)};
  std::vector<Result> dense, sparse_a, sparse_b;
  for (int64_t m : {256, 512, 1024}) {
    const int64_t dense_bytes = m * d * 4;
    dense.push_back(RunDense(d, m, steps, grads));
    Print(dense.back(), dense_bytes);
    sparse_a.push_back(
        RunSparse(d, m, WindowStorage::kIndex32Fp32, steps + 2, grads));
    Print(sparse_a.back(), dense_bytes);
    sparse_b.push_back(
        RunSparse(d, m, WindowStorage::kBlock16Bf16, steps + 2, grads));
    Print(sparse_b.back(), dense_bytes);
  }
  Result large_a, large_b;
  const int64_t d_large = int64_t{1} << 24;
  if (large) {
    std::printf(
        "%-26s %9lld %5lld  (window %.0f GiB: too large for this shared "
        "machine, and each step would stream it twice; not run)\n",
        "dense_mfac", static_cast<long long>(d_large),
        static_cast<long long>(m_large), m_large * d_large * 4.0 / (1 << 30));
    const std::vector<std::vector<float>> big = {RandomGradient(d_large, 3)};
    large_a =
        RunSparse(d_large, m_large, WindowStorage::kIndex32Fp32, steps, big);
    Print(large_a, m_large * d_large * 4);
    large_b =
        RunSparse(d_large, m_large, WindowStorage::kBlock16Bf16, steps, big);
    Print(large_b, m_large * d_large * 4);
  }
  const double dense_bytes_1024 = 1024.0 * d * 4;
  std::printf(
      "{\"bench\":\"efcp\",\"d\":%lld,\"density\":0.01,"
      "\"window_ratio_index32_fp32\":%.5f,\"window_ratio_block16_bf16\":%.5f,"
      "\"speedup_sparse_index32_fp32_vs_dense_m1024\":%.1f,"
      "\"speedup_sparse_block16_bf16_vs_dense_m1024\":%.1f,"
      "\"cpu_speedup_sparse_index32_fp32_vs_dense_m1024\":%.1f,"
      "\"cpu_speedup_sparse_block16_bf16_vs_dense_m1024\":%.1f,"
      "\"dense_step_growth_m512_to_m1024\":%.2f,"
      "\"dense_cpu_growth_m512_to_m1024\":%.2f,"
      "\"dense_amortized_growth_m512_to_m1024\":%.2f,"
      "\"dense_step_ms_m1024\":%.1f,\"sparse_index32_fp32_step_ms_m1024\":%.2f,"
      "\"sparse_block16_bf16_step_ms_m1024\":%.2f,"
      "\"sparse_d2p24_m\":%lld,\"sparse_d2p24_index32_fp32_step_ms\":%.1f,"
      "\"sparse_d2p24_block16_bf16_step_ms\":%.1f,"
      "\"total_seconds\":%.1f}\n",
      static_cast<long long>(d), sparse_a[2].window_bytes / dense_bytes_1024,
      sparse_b[2].window_bytes / dense_bytes_1024,
      dense[2].amortized_ms / sparse_a[2].amortized_ms,
      dense[2].amortized_ms / sparse_b[2].amortized_ms,
      dense[2].cpu_ms / sparse_a[2].cpu_ms,
      dense[2].cpu_ms / sparse_b[2].cpu_ms, dense[2].step_ms / dense[1].step_ms,
      dense[2].cpu_ms / dense[1].cpu_ms,
      dense[2].amortized_ms / dense[1].amortized_ms, dense[2].step_ms,
      sparse_a[2].step_ms, sparse_b[2].step_ms, static_cast<long long>(m_large),
      large ? large_a.step_ms : -1.0, large ? large_b.step_ms : -1.0,
      Seconds(bench_start));
  return 0;
}

}  // namespace
}  // namespace efcp
}  // namespace terse

int main(int argc, char** argv) { return terse::efcp::Main(argc, argv); }
