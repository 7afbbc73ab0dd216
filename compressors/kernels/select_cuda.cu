// Host-driven CUDA selection: the device counts and compacts, the host runs
// the planners of select.h. See select_cuda.h.
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "compressors/kernels/randomk.h"
#include "compressors/kernels/select_cuda.h"
#include "compressors/kernels/sparse_ops_cuda.h"
#include "compressors/kernels/topk_cuda.h"

namespace terse {
namespace kernels {
namespace cuda {
namespace {

constexpr int kThreads = 256;

// keys[j * run + r] = key of x[starts[j] + r].
__global__ void SampleKernel(const float* x, const int64_t* starts,
                             int64_t runs, int run, uint32_t* keys) {
  const int64_t n = runs * run;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    keys[i] = __float_as_uint(x[starts[i / run] + i % run]) & 0x7fffffffu;
  }
}

// out[j] = cand[pick[j]].
__global__ void ComposeKernel(const uint32_t* cand, const uint32_t* pick,
                              int64_t k, uint32_t* out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       j < k; j += stride) {
    out[j] = cand[pick[j]];
  }
}

// Per block: the sum (double) and max of |x| over a grid-stride share.
__global__ void AbsSumMaxKernel(const float* x, int64_t d, double* sums,
                                float* maxima) {
  __shared__ double s_sum[kThreads];
  __shared__ float s_max[kThreads];
  double sum = 0;
  float max = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < d; i += stride) {
    const float a = fabsf(x[i]);
    sum += a;
    max = fmaxf(max, a);
  }
  s_sum[threadIdx.x] = sum;
  s_max[threadIdx.x] = max;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) {
      s_sum[threadIdx.x] += s_sum[threadIdx.x + w];
      s_max[threadIdx.x] = fmaxf(s_max[threadIdx.x], s_max[threadIdx.x + w]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    sums[blockIdx.x] = s_sum[0];
    maxima[blockIdx.x] = s_max[0];
  }
}

int GridFor(int64_t n) {
  int64_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks > 4096) blocks = 4096;
  return blocks < 1 ? 1 : static_cast<int>(blocks);
}

// A cudaMallocAsync buffer freed on the stream at scope exit.
template <typename T>
class Scratch {
 public:
  Scratch(int64_t n, cudaStream_t s) : stream_(s) {
    err_ = cudaMallocAsync(reinterpret_cast<void**>(&ptr_),
                           sizeof(T) * static_cast<size_t>(n > 0 ? n : 1), s);
  }
  ~Scratch() {
    if (err_ == cudaSuccess) cudaFreeAsync(ptr_, stream_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  T* get() const { return ptr_; }
  cudaError_t error() const { return err_; }

 private:
  T* ptr_ = nullptr;
  cudaStream_t stream_;
  cudaError_t err_;
};

#define TERSE_CUDA_TRY(expr)                            \
  do {                                                  \
    const int terse_cuda_err_ = static_cast<int>(expr); \
    if (terse_cuda_err_ != 0) return terse_cuda_err_;   \
  } while (0)

// The exact top-k of the n candidate positions `cand` into `out`.
int TrimToK(const float* x, const uint32_t* cand, int64_t n, int64_t k,
            uint32_t* out, cudaStream_t s) {
  Scratch<float> values(n, s);
  Scratch<uint32_t> pick(k, s);
  TERSE_CUDA_TRY(values.error());
  TERSE_CUDA_TRY(pick.error());
  TERSE_CUDA_TRY(Gather(x, cand, n, values.get(), s));
  TERSE_CUDA_TRY(TopK(values.get(), n, k, pick.get(), s));
  ComposeKernel<<<GridFor(k), kThreads, 0, s>>>(cand, pick.get(), k, out);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int SampledTopK(const float* x, int64_t d, int64_t k,
                const SampledTopKOptions& options, uint32_t* indices,
                int64_t* count, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  *count = 0;
  if (k <= 0) return cudaSuccess;
  if (!SampledTopKPlanner::Applies(d, k)) {
    *count = k;
    return TopK(x, d, k, indices, stream);
  }
  std::vector<int64_t> starts;
  SampledTopKPlanner::RunStarts(d, options, &starts);
  const int run = static_cast<int>(SampledTopKPlanner::kSampleRun);
  const int64_t runs = static_cast<int64_t>(starts.size());
  std::vector<uint32_t> keys(runs * run);
  {
    Scratch<int64_t> dev_starts(runs, s);
    Scratch<uint32_t> dev_keys(runs * run, s);
    TERSE_CUDA_TRY(dev_starts.error());
    TERSE_CUDA_TRY(dev_keys.error());
    TERSE_CUDA_TRY(cudaMemcpyAsync(dev_starts.get(), starts.data(),
                                   sizeof(int64_t) * runs,
                                   cudaMemcpyHostToDevice, s));
    SampleKernel<<<GridFor(runs * run), kThreads, 0, s>>>(
        x, dev_starts.get(), runs, run, dev_keys.get());
    TERSE_CUDA_TRY(cudaGetLastError());
    TERSE_CUDA_TRY(cudaMemcpyAsync(keys.data(), dev_keys.get(),
                                   sizeof(uint32_t) * runs * run,
                                   cudaMemcpyDeviceToHost, s));
    TERSE_CUDA_TRY(cudaStreamSynchronize(s));
  }
  SampledTopKPlanner planner(std::move(keys), d, k, options);
  Scratch<uint32_t> cand(planner.cap(), s);
  TERSE_CUDA_TRY(cand.error());
  while (true) {
    int64_t n = 0;
    TERSE_CUDA_TRY(SelectAtLeast(x, d, planner.key(), planner.cap(), cand.get(),
                                 &n, stream));
    switch (planner.Observe(n)) {
      case SampledTopKPlanner::Step::kTrimToK:
        TERSE_CUDA_TRY(TrimToK(x, cand.get(), n, k, indices, s));
        *count = k;
        return static_cast<int>(cudaStreamSynchronize(s));
      case SampledTopKPlanner::Step::kAccept:
        TERSE_CUDA_TRY(cudaMemcpyAsync(indices, cand.get(),
                                       sizeof(uint32_t) * n,
                                       cudaMemcpyDeviceToDevice, s));
        *count = n;
        return static_cast<int>(cudaStreamSynchronize(s));
      case SampledTopKPlanner::Step::kRetry:
        continue;
      case SampledTopKPlanner::Step::kFallback:
        *count = k;
        TERSE_CUDA_TRY(TopK(x, d, k, indices, stream));
        return static_cast<int>(cudaStreamSynchronize(s));
    }
  }
}

int ThresholdSearch(const float* x, int64_t d, int64_t k,
                    const ThresholdSearchOptions& options, uint32_t* indices,
                    int64_t* count, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  *count = 0;
  if (k <= 0) return cudaSuccess;
  if (k < d) {
    const int blocks = GridFor(d);
    std::vector<double> sums(blocks);
    std::vector<float> maxima(blocks);
    {
      Scratch<double> dev_sums(blocks, s);
      Scratch<float> dev_max(blocks, s);
      TERSE_CUDA_TRY(dev_sums.error());
      TERSE_CUDA_TRY(dev_max.error());
      AbsSumMaxKernel<<<blocks, kThreads, 0, s>>>(x, d, dev_sums.get(),
                                                  dev_max.get());
      TERSE_CUDA_TRY(cudaGetLastError());
      TERSE_CUDA_TRY(cudaMemcpyAsync(sums.data(), dev_sums.get(),
                                     sizeof(double) * blocks,
                                     cudaMemcpyDeviceToHost, s));
      TERSE_CUDA_TRY(cudaMemcpyAsync(maxima.data(), dev_max.get(),
                                     sizeof(float) * blocks,
                                     cudaMemcpyDeviceToHost, s));
      TERSE_CUDA_TRY(cudaStreamSynchronize(s));
    }
    double sum = 0;
    float max = 0;
    for (int b = 0; b < blocks; ++b) {
      sum += sums[b];
      max = max > maxima[b] ? max : maxima[b];
    }
    ThresholdSearchPlanner planner(sum / static_cast<double>(d), max, k,
                                   options);
    while (planner.usable()) {
      int64_t n = 0;
      TERSE_CUDA_TRY(SelectAtLeast(x, d, planner.key(), planner.cap(), indices,
                                   &n, stream));
      const ThresholdSearchPlanner::Step step = planner.Observe(n);
      if (step == ThresholdSearchPlanner::Step::kAccept) {
        *count = n;
        return static_cast<int>(cudaStreamSynchronize(s));
      }
      if (step == ThresholdSearchPlanner::Step::kFallback) break;
    }
  }
  *count = k;
  TERSE_CUDA_TRY(TopK(x, d, k, indices, stream));
  return static_cast<int>(cudaStreamSynchronize(s));
}

int RandomKIndices(uint64_t seed, int64_t d, int64_t k, uint32_t* indices,
                   void* stream) {
  std::vector<uint32_t> host;
  kernels::RandomKIndices(seed, d, k, &host);
  if (k <= 0) return cudaSuccess;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  TERSE_CUDA_TRY(cudaMemcpyAsync(indices, host.data(), sizeof(uint32_t) * k,
                                 cudaMemcpyHostToDevice, s));
  return static_cast<int>(cudaStreamSynchronize(s));
}

}  // namespace cuda
}  // namespace kernels
}  // namespace terse
