// CudaSparseMfac against the CPU SparseMfac on the same gradients. Skipped
// without a CUDA device.
#include <cuda_runtime.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "common/cuda_probe.h"
#include "efcp/oracle_testutil.h"
#include "efcp/sparse_mfac.h"
#include "efcp/sparse_mfac_cuda.h"
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

class CudaSparseMfacGpuTest : public ::testing::TestWithParam<WindowStorage> {
 protected:
  void SetUp() override {
    if (ProbeCuda().device_count == 0) {
      GTEST_SKIP() << "no CUDA device: " << ProbeCuda().why_none;
    }
  }
};

TEST_P(CudaSparseMfacGpuTest, MatchesCpu) {
  SparseMfacOptions options;
  options.dim = 150000;  // three 65536-wide blocks
  options.window = 8;
  options.damp = 1e-2;
  options.density = 0.01;
  options.storage = GetParam();
  auto cpu = *SparseMfac::Create(options);
  absl::StatusOr<std::unique_ptr<CudaSparseMfac>> gpu_or =
      CudaSparseMfac::Create(options);
  ASSERT_TRUE(gpu_or.ok()) << gpu_or.status();
  CudaSparseMfac& gpu = **gpu_or;
  const int64_t d = options.dim;
  std::mt19937 rng(70);
  DeviceVector grad(d), update(d);
  std::vector<float> u(d);
  for (int step = 0; step < 2 * options.window + 3; ++step) {
    const std::vector<float> g = RandomVector(d, &rng);
    ASSERT_TRUE(cpu->Step(g, absl::MakeSpan(u)).ok());
    grad.Upload(g);
    absl::Status status = gpu.Step(grad.const_span(), update.span());
    ASSERT_TRUE(status.ok()) << status;
    EXPECT_LT(RelativeError(update.Download(), ToDouble(u)), 1e-5)
        << "step " << step;
  }
  // Same kept entries (TopK is bit-identical), so the same error buffers and
  // windows.
  EXPECT_EQ(*gpu.error(), cpu->error());
  std::vector<uint32_t> ia, ib;
  std::vector<float> va, vb;
  for (int64_t slot = 0; slot < options.window; ++slot) {
    cpu->window().ReadRow(slot, &ia, &va);
    gpu.window().ReadRow(slot, &ib, &vb);
    EXPECT_EQ(ia, ib);
    EXPECT_EQ(va, vb);
  }
  // Apply to another vector.
  const std::vector<float> x = RandomVector(d, &rng);
  ASSERT_TRUE(cpu->Apply(x, absl::MakeSpan(u)).ok());
  grad.Upload(x);
  ASSERT_TRUE(gpu.Apply(grad.const_span(), update.span()).ok());
  EXPECT_LT(RelativeError(update.Download(), ToDouble(u)), 1e-5);
  // The device copy of a block16 window adds the kernels' decode index:
  // ceil(d / 65536) + 1 = 4 block starts a row (sparse_mfac_cuda.h).
  const int64_t decode_index =
      options.storage == WindowStorage::kBlock16Bf16 ? options.window * 4 * 4
                                                     : 0;
  EXPECT_EQ(gpu.memory().window, cpu->memory().window + decode_index);

  // A NaN gradient changes nothing.
  const std::string before = gpu.SaveState();
  std::vector<float> bad = RandomVector(d, &rng);
  bad[d - 1] = std::numeric_limits<float>::quiet_NaN();
  grad.Upload(bad);
  EXPECT_EQ(gpu.Step(grad.const_span(), update.span()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu.SaveState(), before);

  // States interchange: GPU -> CPU and CPU -> GPU continue alike.
  auto cpu2 = *SparseMfac::Create(options);
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

TEST_P(CudaSparseMfacGpuTest, HostPointersAreAStatusNotAFault) {
  SparseMfacOptions options;
  options.dim = 1000;
  options.window = 4;
  options.damp = 1e-2;
  options.density = 0.01;
  options.storage = GetParam();
  absl::StatusOr<std::unique_ptr<CudaSparseMfac>> gpu =
      CudaSparseMfac::Create(options);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  std::vector<float> host_grad(1000, 1.0f), host_out(1000);
  DeviceVector grad(1000), update(1000);
  absl::Status bad = (*gpu)->Step(host_grad, update.span());
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument) << bad;
  EXPECT_NE(bad.message().find("gradient"), absl::string_view::npos) << bad;
  bad = (*gpu)->Apply(grad.const_span(), absl::MakeSpan(host_out));
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument) << bad;
  // The context is not poisoned: a correct call still works.
  grad.Upload(host_grad);
  EXPECT_TRUE((*gpu)->Step(grad.const_span(), update.span()).ok());
}

INSTANTIATE_TEST_SUITE_P(Storages, CudaSparseMfacGpuTest,
                         ::testing::Values(WindowStorage::kIndex32Fp32,
                                           WindowStorage::kBlock16Bf16),
                         [](const auto& info) {
                           return std::string(WindowStorageName(info.param));
                         });

}  // namespace
}  // namespace efcp
}  // namespace terse
