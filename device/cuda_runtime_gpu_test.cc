// The CUDA runtime on a real device (tag gpu): memory, streams, events, the
// pointer check and the scaling kernel against the CPU oracle. Without a
// device every test reports a skip (and the gpu stage is not counted).
#include <cuda_runtime_api.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "common/cuda_probe.h"
#include "common/half.h"
#include "device/cuda_kernels.h"
#include "device/cuda_runtime.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

class CudaRuntimeGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (ProbeCuda().device_count == 0) {
      GTEST_SKIP() << "no CUDA device: " << ProbeCuda().why_none;
    }
  }
  CudaRuntime cuda_;
};

TEST_F(CudaRuntimeGpuTest, CopiesAndOrdersAcrossStreams) {
  absl::StatusOr<DeviceBuffer> a = DeviceBuffer::Allocate(&cuda_, 0, 4096);
  absl::StatusOr<DeviceBuffer> b = DeviceBuffer::Allocate(&cuda_, 0, 4096);
  ASSERT_TRUE(a.ok() && b.ok());
  absl::StatusOr<std::unique_ptr<Stream>> s1 = cuda_.CreateStream(0);
  absl::StatusOr<std::unique_ptr<Stream>> s2 = cuda_.CreateStream(0);
  absl::StatusOr<std::unique_ptr<Event>> ready = cuda_.CreateEvent(0);
  ASSERT_TRUE(s1.ok() && s2.ok() && ready.ok());
  absl::StatusOr<DeviceBuffer> pinned =
      DeviceBuffer::Allocate(&cuda_, 0, 4096, /*host=*/true);
  ASSERT_TRUE(pinned.ok());
  std::vector<float> src(1024);
  std::iota(src.begin(), src.end(), 0.0f);
  std::memcpy(pinned->data(), src.data(), 4096);
  ASSERT_TRUE((*s1)->Memcpy(a->data(), pinned->data(), 4096).ok());
  ASSERT_TRUE((*s1)->Record(ready->get()).ok());
  ASSERT_TRUE((*s2)->WaitEvent(ready->get()).ok());
  ASSERT_TRUE((*s2)->Memcpy(b->data(), a->data(), 4096).ok());
  std::vector<float> out(1024);
  ASSERT_TRUE((*s2)->Memcpy(out.data(), b->data(), 4096).ok());
  ASSERT_TRUE((*s2)->Synchronize().ok());
  EXPECT_EQ(out, src);
  EXPECT_TRUE(*(*ready)->Query());
}

// RecordOnStream on a stream the runtime did not create (a framework's):
// a runtime stream that waits on the event sees the producer's copy, and
// once the first event is destroyed the second record reuses it.
TEST_F(CudaRuntimeGpuTest, ProducerEventsComeFromThePool) {
  cudaStream_t producer = nullptr;
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking),
            cudaSuccess);
  absl::StatusOr<DeviceBuffer> a = DeviceBuffer::Allocate(&cuda_, 0, 4096);
  absl::StatusOr<DeviceBuffer> pinned =
      DeviceBuffer::Allocate(&cuda_, 0, 4096, /*host=*/true);
  absl::StatusOr<std::unique_ptr<Stream>> consumer = cuda_.CreateStream(0);
  ASSERT_TRUE(a.ok() && pinned.ok() && consumer.ok());
  std::vector<float> out(1024);
  for (int op = 0; op < 3; ++op) {
    std::vector<float> src(1024);
    std::iota(src.begin(), src.end(), static_cast<float>(op));
    std::memcpy(pinned->data(), src.data(), 4096);
    ASSERT_EQ(cudaMemcpyAsync(a->data(), pinned->data(), 4096,
                              cudaMemcpyHostToDevice, producer),
              cudaSuccess);
    absl::StatusOr<std::unique_ptr<Event>> ready =
        cuda_.RecordOnStream(0, producer);
    ASSERT_TRUE(ready.ok()) << ready.status();
    const EventPool::Stats stats = cuda_.producer_event_stats();
    EXPECT_EQ(stats.created, 1) << op;  // One event, then reuse.
    EXPECT_EQ(stats.reused, op);
    ASSERT_TRUE((*consumer)->WaitEvent(ready->get()).ok());
    ASSERT_TRUE((*consumer)->Memcpy(out.data(), a->data(), 4096).ok());
    ASSERT_TRUE((*consumer)->Synchronize().ok());
    EXPECT_EQ(out, src) << op;
    EXPECT_TRUE((*ready)->HostWait().ok());
    EXPECT_TRUE(*(*ready)->Query());
  }  // Each op's event goes back to the pool here.
  // Two alive at once: the second is a new one.
  absl::StatusOr<std::unique_ptr<Event>> first =
      cuda_.RecordOnStream(0, producer);
  absl::StatusOr<std::unique_ptr<Event>> second =
      cuda_.RecordOnStream(0, producer);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(cuda_.producer_event_stats().created, 2);
  EXPECT_EQ(cuda_.producer_event_stats().reused, 3);
  EXPECT_TRUE((*second)->HostWait().ok());
  first->reset();
  second->reset();
  ASSERT_EQ(cudaStreamDestroy(producer), cudaSuccess);
}

TEST_F(CudaRuntimeGpuTest, PointerCheckTellsDeviceFromHost) {
  absl::StatusOr<DeviceBuffer> a = DeviceBuffer::Allocate(&cuda_, 0, 64);
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(cuda_.CheckDeviceMemory(a->data(), 64, 0, "dev").ok());
  std::vector<float> host(16);
  absl::Status h = cuda_.CheckDeviceMemory(host.data(), 64, 0, "tensor 'g'");
  EXPECT_EQ(h.code(), absl::StatusCode::kInvalidArgument) << h;
  // The context is still usable afterwards.
  EXPECT_TRUE(cuda_.CheckDeviceMemory(a->data(), 64, 0, "dev").ok());
}

TEST_F(CudaRuntimeGpuTest, ScaledCopyMatchesTheCpu) {
  const int n = 5000;
  absl::StatusOr<std::unique_ptr<Stream>> s = cuda_.CreateStream(0);
  ASSERT_TRUE(s.ok());
  absl::StatusOr<DeviceBuffer> dev = DeviceBuffer::Allocate(&cuda_, 0, n * 4);
  ASSERT_TRUE(dev.ok());
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) x[i] = 0.25f * i - 7.0f;
  ASSERT_TRUE((*s)->Memcpy(dev->data(), x.data(), n * 4).ok());
  ASSERT_TRUE(CudaScaledCopy(0, (*s)->native_handle(), dev->data(), dev->data(),
                             n, DataType::kFloat32, 0.5)
                  .ok());
  ASSERT_TRUE((*s)->Memcpy(y.data(), dev->data(), n * 4).ok());
  ASSERT_TRUE((*s)->Synchronize().ok());
  for (int i = 0; i < n; ++i) EXPECT_EQ(y[i], x[i] * 0.5f) << i;

  std::vector<uint16_t> h(n), hy(n);
  for (int i = 0; i < n; ++i) h[i] = FloatToBFloat16(0.125f * (i % 97));
  ASSERT_TRUE((*s)->Memcpy(dev->data(), h.data(), n * 2).ok());
  ASSERT_TRUE(CudaScaledCopy(0, (*s)->native_handle(), dev->data(), dev->data(),
                             n, DataType::kBFloat16, 3.0)
                  .ok());
  ASSERT_TRUE((*s)->Memcpy(hy.data(), dev->data(), n * 2).ok());
  ASSERT_TRUE((*s)->Synchronize().ok());
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(hy[i], FloatToBFloat16(BFloat16ToFloat(h[i]) * 3.0f)) << i;
  }
}

}  // namespace
}  // namespace terse
