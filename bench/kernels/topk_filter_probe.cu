// topk_filter_probe: where the CUDA sampled-threshold top-k spends its time
// (compressors/kernels/topk_filter_cuda.h), on a GPU. For d = 2^20, 2^24,
// 2^27 and k = d / 100 it times (CUDA events, 20 calls after one) the public
// TopK, and TopKByFilter with a caller's workspace and with cudaMallocAsync;
// then one call's block-0 phase clock (sample, filter, radix levels, output
// count, write) and which branch ran. Prints a table and one JSON line.
// `--keep-pool` first sets the default memory pool's release threshold to
// its maximum (is cudaMallocAsync's trimming the cost?). tools/gpu_check.sh
// builds it with nvcc and runs it.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "compressors/kernels/topk_cuda.h"
#include "compressors/kernels/topk_filter_cuda.h"

namespace {

using terse::kernels::cuda::FilterTopKProbe;
using terse::kernels::cuda::FilterTopKWorkspaceBytes;
using terse::kernels::cuda::TopK;
using terse::kernels::cuda::TopKByFilter;

bool Ok(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return true;
  std::printf("FAIL %s: %s\n", what, cudaGetErrorString(error));
  return false;
}

enum class Mode { kPublic, kWorkspace, kMalloc };

// Mean milliseconds per call over `calls`, after one untimed call.
double TimeCalls(Mode mode, const float* x, int64_t d, int64_t k,
                 uint32_t* indices, void* workspace, cudaStream_t stream,
                 int calls) {
  auto call = [&] {
    if (mode == Mode::kPublic) return TopK(x, d, k, indices, stream) == 0;
    return TopKByFilter(x, d, k, indices, stream,
                        mode == Mode::kWorkspace ? workspace : nullptr,
                        nullptr) == cudaSuccess;
  };
  if (!call() || cudaStreamSynchronize(stream) != cudaSuccess) return -1;
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start, stream);
  for (int c = 0; c < calls; ++c) call();
  cudaEventRecord(stop, stream);
  cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / calls;
}

}  // namespace

int main(int argc, char** argv) {
  const bool keep_pool = argc > 1 && std::strcmp(argv[1], "--keep-pool") == 0;
  if (keep_pool) {
    cudaMemPool_t pool;
    uint64_t most = UINT64_MAX;
    if (!Ok(cudaDeviceGetDefaultMemPool(&pool, 0), "default pool") ||
        !Ok(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold,
                                    &most),
            "release threshold")) {
      return 1;
    }
  }
  std::printf("%6s %9s %10s %10s %10s %9s %7s %7s %7s %7s %7s %8s\n", "d", "k",
              "public ms", "wspace ms", "malloc ms", "fallback", "sample",
              "filter", "levels", "count", "write", "total us");
  std::string json = "{\"bench\":\"topk_filter_probe\",\"keep_pool\":" +
                     std::string(keep_pool ? "true" : "false") + ",\"rows\":[";
  for (int lg : {20, 24, 27}) {
    const int64_t d = int64_t{1} << lg, k = d / 100;
    std::vector<float> host(d);
    uint32_t s = 12345u + lg;  // xorshift32: uniform in [-1, 1).
    for (float& v : host) {
      s ^= s << 13;
      s ^= s >> 17;
      s ^= s << 5;
      v = static_cast<int32_t>(s) * 4.6566e-10f;
    }
    float* x = nullptr;
    uint32_t* indices = nullptr;
    void* workspace = nullptr;
    FilterTopKProbe* probe = nullptr;
    cudaStream_t stream;
    if (!Ok(cudaMalloc(&x, 4 * d), "x") ||
        !Ok(cudaMalloc(&indices, 4 * k), "indices") ||
        !Ok(cudaMalloc(&workspace, FilterTopKWorkspaceBytes(d)), "workspace") ||
        !Ok(cudaMalloc(&probe, sizeof(FilterTopKProbe)), "probe") ||
        !Ok(cudaMemcpy(x, host.data(), 4 * d, cudaMemcpyHostToDevice),
            "copy") ||
        !Ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
            "stream")) {
      return 1;
    }
    const double t_public =
        TimeCalls(Mode::kPublic, x, d, k, indices, workspace, stream, 20);
    const double t_workspace =
        TimeCalls(Mode::kWorkspace, x, d, k, indices, workspace, stream, 20);
    const double t_malloc =
        TimeCalls(Mode::kMalloc, x, d, k, indices, workspace, stream, 20);
    FilterTopKProbe p{};
    if (!Ok(TopKByFilter(x, d, k, indices, stream, workspace, probe),
            "probe") ||
        !Ok(cudaStreamSynchronize(stream), "probe sync") ||
        !Ok(cudaMemcpy(&p, probe, sizeof p, cudaMemcpyDeviceToHost), "probe")) {
      return 1;
    }
    double us[5];
    for (int i = 0; i < 5; ++i)
      us[i] = (p.phase_ns[i + 1] - p.phase_ns[i]) / 1e3;
    const double total = (p.phase_ns[5] - p.phase_ns[0]) / 1e3;
    std::printf(
        "  2^%-3d %9lld %10.4f %10.4f %10.4f %9d %7.1f %7.1f %7.1f %7.1f "
        "%7.1f %8.1f\n",
        lg, static_cast<long long>(k), t_public, t_workspace, t_malloc,
        p.took_fallback, us[0], us[1], us[2], us[3], us[4], total);
    char row[512];
    std::snprintf(row, sizeof row,
                  "%s{\"log2_d\":%d,\"k\":%lld,\"public_ms\":%.4f,"
                  "\"workspace_ms\":%.4f,\"malloc_ms\":%.4f,\"fallback\":%d,"
                  "\"phase_us\":[%.1f,%.1f,%.1f,%.1f,%.1f]}",
                  lg == 20 ? "" : ",", lg, static_cast<long long>(k), t_public,
                  t_workspace, t_malloc, p.took_fallback, us[0], us[1], us[2],
                  us[3], us[4]);
    json += row;
    cudaFree(x);
    cudaFree(indices);
    cudaFree(workspace);
    cudaFree(probe);
    cudaStreamDestroy(stream);
  }
  std::printf("%s]}\n", json.c_str());
  return 0;
}
