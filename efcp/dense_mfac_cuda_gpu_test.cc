// CudaDenseMfac against the CPU DenseMfac and the fp64 closed form. Skipped
// without a CUDA device.
#include <cuda_runtime.h>

#include <limits>
#include <random>
#include <vector>

#include "common/cuda_probe.h"
#include "efcp/dense_mfac.h"
#include "efcp/dense_mfac_cuda.h"
#include "efcp/oracle_testutil.h"
#include "gtest/gtest.h"

namespace terse {
namespace efcp {
namespace {

class DeviceVector {
 public:
  explicit DeviceVector(int64_t n) : n_(n) {
    EXPECT_EQ(cudaMalloc(&ptr_, sizeof(float) * n), cudaSuccess);
  }
  ~DeviceVector() { cudaFree(ptr_); }
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;
  void Upload(const std::vector<float>& host) {
    EXPECT_EQ(cudaMemcpy(ptr_, host.data(), sizeof(float) * n_,
                         cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  std::vector<float> Download() const {
    std::vector<float> host(n_);
    EXPECT_EQ(cudaMemcpy(host.data(), ptr_, sizeof(float) * n_,
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }
  absl::Span<float> span() { return absl::MakeSpan(ptr_, n_); }
  absl::Span<const float> const_span() const {
    return absl::MakeConstSpan(ptr_, n_);
  }

 private:
  float* ptr_ = nullptr;
  int64_t n_;
};

TEST(CudaDenseMfacGpuTest, MatchesCpuAndClosedForm) {
  if (ProbeCuda().device_count == 0) {
    GTEST_SKIP() << "no CUDA device: " << ProbeCuda().why_none;
  }
  DenseMfacOptions options;
  options.dim = 50;
  options.window = 8;
  options.damp = 1e-2;
  auto cpu = *DenseMfac::Create(options);
  absl::StatusOr<std::unique_ptr<CudaDenseMfac>> gpu_or =
      CudaDenseMfac::Create(options);
  ASSERT_TRUE(gpu_or.ok()) << gpu_or.status();
  CudaDenseMfac& gpu = **gpu_or;
  const int64_t d = options.dim;
  std::mt19937 rng(80);
  DeviceVector grad(d), update(d);
  RingReference ring(options.window);
  std::vector<float> u(d);
  for (int step = 0; step < 3 * options.window + 1; ++step) {
    const std::vector<float> g = RandomVector(d, &rng);
    ring.Push(g);
    ASSERT_TRUE(cpu->Step(g, absl::MakeSpan(u)).ok());
    grad.Upload(g);
    absl::Status status = gpu.Step(grad.const_span(), update.span());
    ASSERT_TRUE(status.ok()) << status;
    const std::vector<float> got = update.Download();
    EXPECT_LT(RelativeError(got, ToDouble(u)), 1e-5) << "step " << step;
    EXPECT_LT(RelativeError(got, MfacReference(ring.rows(), options.window,
                                               options.damp, ToDouble(g))),
              2e-6);
  }
  const std::vector<float> x = RandomVector(d, &rng);
  grad.Upload(x);
  ASSERT_TRUE(gpu.Apply(grad.const_span(), update.span()).ok());
  EXPECT_LT(RelativeError(update.Download(),
                          MfacReference(ring.rows(), options.window,
                                        options.damp, ToDouble(x))),
            2e-6);

  const std::string before = gpu.SaveState();
  std::vector<float> bad = RandomVector(d, &rng);
  bad[3] = std::numeric_limits<float>::infinity();
  grad.Upload(bad);
  EXPECT_EQ(gpu.Step(grad.const_span(), update.span()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu.SaveState(), before);

  // States interchange with the CPU class.
  auto cpu2 = *DenseMfac::Create(options);
  ASSERT_TRUE(cpu2->RestoreState(gpu.SaveState()).ok());
  ASSERT_TRUE(gpu.RestoreState(cpu->SaveState()).ok());
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> g = RandomVector(d, &rng);
    std::vector<float> u2(d);
    ASSERT_TRUE(cpu->Step(g, absl::MakeSpan(u)).ok());
    ASSERT_TRUE(cpu2->Step(g, absl::MakeSpan(u2)).ok());
    grad.Upload(g);
    ASSERT_TRUE(gpu.Step(grad.const_span(), update.span()).ok());
    EXPECT_LT(RelativeError(u2, ToDouble(u)), 1e-5);
    EXPECT_LT(RelativeError(update.Download(), ToDouble(u)), 1e-5);
  }
}

TEST(CudaDenseMfacGpuTest, HostPointersAreAStatusNotAFault) {
  if (ProbeCuda().device_count == 0) {
    GTEST_SKIP() << "no CUDA device: " << ProbeCuda().why_none;
  }
  DenseMfacOptions options;
  options.dim = 50;
  options.window = 4;
  options.damp = 1e-2;
  absl::StatusOr<std::unique_ptr<CudaDenseMfac>> gpu =
      CudaDenseMfac::Create(options);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  std::vector<float> host(50, 1.0f), out(50);
  absl::Status bad = (*gpu)->Step(host, absl::MakeSpan(out));
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument) << bad;
  EXPECT_NE(bad.message().find("gradient"), absl::string_view::npos) << bad;
  bad = (*gpu)->Apply(host, absl::MakeSpan(out));
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument) << bad;
}

}  // namespace
}  // namespace efcp
}  // namespace terse
