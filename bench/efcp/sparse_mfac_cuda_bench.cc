// One SparseMfac (EFCP) step on the CPU class (efcp/sparse_mfac.h) against
// the CUDA class (efcp/sparse_mfac_cuda.h) on a full window, by default at
// d = 2^24, m = 1024, density 1% (k = 167772), window storage index32_fp32.
// Prints a small table and one JSON line with the ratio. Without a CUDA
// device it prints "skipped: no device" and exits 0.
//
// The window is filled as in efcp_bench: ImportWindow of m synthetic rows
// (random supports, values on the bf16 grid, their exact Gram matrix) into
// the CPU class, whose state blob the CUDA class restores, so both step on
// the same window; a step's cost depends on the window's shape only. The
// timed steps are real Steps on random gradients (device memory for the
// CUDA class); each time is the median over the timed steps after one
// warm-up step. The O(m^3) refresh that a step runs every m steps is not in
// the figures (it is the same host code in both classes).
//
// The CUDA step's m-row products (SparseDenseDots, SparseLinearCombination)
// are one kernel launch each (2 a step, whatever m; before, one launch per
// window row each: 2m a step); "row_kernel_launches_per_step" in the JSON.
//
// Usage: sparse_mfac_cuda_bench [--dim=D] [--window=M] [--density=F]
//          [--steps=N] [--cpu_steps=N] [--storage=index32_fp32|block16_bf16]
//   --steps      timed CUDA steps (default 10)
//   --cpu_steps  timed CPU steps (default 2; a CPU step at the defaults
//                takes about a second on 8 threads)
// Run time at the defaults: about 30 s on a 16-core host, most of it filling
// the window (synthetic rows, Gram, state blob) and the CPU steps.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/cuda_probe.h"
#include "bench/efcp/synthetic_window.h"
#include "common/half.h"
#include "efcp/sparse_mfac.h"
#include "efcp/sparse_mfac_cuda.h"

namespace terse {
namespace efcp {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// Median wall-clock milliseconds of `steps` calls after one warm-up call.
template <typename Fn>
double MedianMs(int steps, Fn step) {
  step();
  std::vector<double> wall;
  for (int i = 0; i < steps; ++i) {
    const Clock::time_point start = Clock::now();
    step();
    wall.push_back(Seconds(start) * 1e3);
  }
  std::sort(wall.begin(), wall.end());
  return wall[wall.size() / 2];
}

std::vector<float> RandomGradient(int64_t d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> g(d);
  for (float& v : g) v = uniform(rng);
  return g;
}

void Die(const char* what, const absl::Status& status) {
  std::fprintf(stderr, "sparse_mfac_cuda_bench: %s: %s\n", what,
               status.ToString().c_str());
  std::exit(1);
}

int Main(int argc, char** argv) {
  int64_t d = int64_t{1} << 24, m = 1024;
  double density = 0.01;
  int steps = 10, cpu_steps = 2;
  WindowStorage storage = WindowStorage::kIndex32Fp32;
  for (int i = 1; i < argc; ++i) {
    const char* arg = argv[i];
    if (std::strncmp(arg, "--dim=", 6) == 0) {
      d = std::atoll(arg + 6);
    } else if (std::strncmp(arg, "--window=", 9) == 0) {
      m = std::atoll(arg + 9);
    } else if (std::strncmp(arg, "--density=", 10) == 0) {
      density = std::atof(arg + 10);
    } else if (std::strncmp(arg, "--steps=", 8) == 0) {
      steps = std::max(1, std::atoi(arg + 8));
    } else if (std::strncmp(arg, "--cpu_steps=", 12) == 0) {
      cpu_steps = std::max(1, std::atoi(arg + 12));
    } else if (std::strcmp(arg, "--storage=index32_fp32") == 0) {
      storage = WindowStorage::kIndex32Fp32;
    } else if (std::strcmp(arg, "--storage=block16_bf16") == 0) {
      storage = WindowStorage::kBlock16Bf16;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--dim=D] [--window=M] [--density=F] "
                   "[--steps=N] [--cpu_steps=N] "
                   "[--storage=index32_fp32|block16_bf16]\n",
                   argv[0]);
      return 2;
    }
  }
  const CudaInfo info = ProbeCuda();
  if (info.device_count == 0) {
    std::printf("skipped: no device (%s)\n", info.why_none.c_str());
    return 0;
  }
  SparseMfacOptions options;
  options.dim = d;
  options.window = m;
  options.density = density;
  options.storage = storage;
  absl::StatusOr<std::unique_ptr<SparseMfac>> cpu = SparseMfac::Create(options);
  if (!cpu.ok()) Die("SparseMfac::Create", cpu.status());
  const int64_t k = (*cpu)->k();

  // Fill the CPU window, then hand the same state to the CUDA class.
  Clock::time_point start = Clock::now();
  std::string blob;
  {
    std::vector<SparseVector> rows;
    std::vector<double> gram;
    SyntheticWindow(d, m, k, &rows, &gram);
    absl::Status s = (*cpu)->ImportWindow(rows, gram);
    if (!s.ok()) Die("ImportWindow", s);
    blob = (*cpu)->SaveState();
  }
  absl::StatusOr<std::unique_ptr<CudaSparseMfac>> gpu =
      CudaSparseMfac::Create(options);
  if (!gpu.ok()) Die("CudaSparseMfac::Create", gpu.status());
  {
    absl::Status s = (*gpu)->RestoreState(blob);
    if (!s.ok()) Die("RestoreState", s);
    std::string().swap(blob);
  }
  const double fill_s = Seconds(start);

  std::vector<std::vector<float>> grads = {RandomGradient(d, 1),
                                           RandomGradient(d, 2)};
  std::vector<float> update(d);
  size_t next = 0;
  const double cpu_ms = MedianMs(cpu_steps, [&] {
    absl::Status s =
        (*cpu)->Step(grads[next++ % grads.size()], absl::MakeSpan(update));
    if (!s.ok()) Die("SparseMfac::Step", s);
  });

  float* dgrads[2] = {nullptr, nullptr};
  float* dupdate = nullptr;
  for (int i = 0; i < 3; ++i) {
    float** p = i < 2 ? &dgrads[i] : &dupdate;
    if (cudaMalloc(reinterpret_cast<void**>(p), sizeof(float) * d) !=
        cudaSuccess) {
      std::fprintf(stderr, "sparse_mfac_cuda_bench: cudaMalloc failed\n");
      return 1;
    }
    if (i < 2 && cudaMemcpy(*p, grads[i].data(), sizeof(float) * d,
                            cudaMemcpyHostToDevice) != cudaSuccess) {
      std::fprintf(stderr, "sparse_mfac_cuda_bench: cudaMemcpy failed\n");
      return 1;
    }
  }
  next = 0;
  const double cuda_ms = MedianMs(steps, [&] {
    absl::Status s = (*gpu)->Step(absl::MakeConstSpan(dgrads[next++ % 2], d),
                                  absl::MakeSpan(dupdate, d));
    if (!s.ok()) Die("CudaSparseMfac::Step", s);
  });
  for (float* p : {dgrads[0], dgrads[1], dupdate}) cudaFree(p);

  const std::string storage_name(WindowStorageName(storage));
  const double speedup = cuda_ms > 0 ? cpu_ms / cuda_ms : 0;
  std::printf(
      "SparseMfac step, d = %lld, m = %lld, k = %lld (%s); "
      "window filled in %.1f s\n",
      static_cast<long long>(d), static_cast<long long>(m),
      static_cast<long long>(k), storage_name.c_str(), fill_s);
  std::printf("%-16s %7s %12s\n", "class", "steps", "median_ms");
  std::printf("%-16s %7d %12.3f\n", "cpu SparseMfac", cpu_steps, cpu_ms);
  std::printf("%-16s %7d %12.3f\n", "cuda SparseMfac", steps, cuda_ms);
  std::printf(
      "{\"bench\":\"sparse_mfac_cuda\",\"d\":%lld,\"m\":%lld,\"k\":%lld,"
      "\"storage\":\"%s\",\"cpu_steps\":%d,\"cuda_steps\":%d,"
      "\"cpu_ms\":%.3f,\"cuda_ms\":%.3f,\"speedup\":%.2f,"
      "\"row_kernel_launches_per_step\":2,"
      "\"row_kernel_launches_per_step_before\":%lld}\n",
      static_cast<long long>(d), static_cast<long long>(m),
      static_cast<long long>(k), storage_name.c_str(), cpu_steps, steps, cpu_ms,
      cuda_ms, speedup, static_cast<long long>(2 * m));
  return 0;
}

}  // namespace
}  // namespace efcp
}  // namespace terse

int main(int argc, char** argv) { return terse::efcp::Main(argc, argv); }
