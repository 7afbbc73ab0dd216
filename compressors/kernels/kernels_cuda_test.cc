// GPU tests: the CUDA kernels against the CPU ones. Skipped without a device.
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "common/cuda_probe.h"
#include "compressors/kernels/randomk.h"
#include "compressors/kernels/select.h"
#include "compressors/kernels/select_cuda.h"
#include "compressors/kernels/sparse_ops.h"
#include "compressors/kernels/sparse_ops_cuda.h"
#include "compressors/kernels/topk.h"
#include "compressors/kernels/topk_cuda.h"
#include "compressors/kernels/topk_filter_cuda.h"
#include "gtest/gtest.h"

namespace terse {
namespace kernels {
namespace {

// A device copy of a host vector, freed on destruction.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(const std::vector<T>& host) : size_(host.size()) {
    EXPECT_EQ(cudaMalloc(&ptr_, std::max<size_t>(1, size_) * sizeof(T)),
              cudaSuccess);
    if (size_ > 0) {
      EXPECT_EQ(cudaMemcpy(ptr_, host.data(), size_ * sizeof(T),
                           cudaMemcpyHostToDevice),
                cudaSuccess);
    }
  }
  explicit DeviceArray(size_t n) : DeviceArray(std::vector<T>(n)) {}
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() { return ptr_; }
  std::vector<T> ToHost() const {
    std::vector<T> host(size_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    if (size_ > 0) {
      EXPECT_EQ(cudaMemcpy(host.data(), ptr_, size_ * sizeof(T),
                           cudaMemcpyDeviceToHost),
                cudaSuccess);
    }
    return host;
  }

 private:
  T* ptr_ = nullptr;
  size_t size_;
};

class KernelsCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (ProbeCuda().device_count == 0) {
      GTEST_SKIP() << "no CUDA device: " << ProbeCuda().why_none;
    }
  }
};

std::vector<float> Inputs(int64_t d, int shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(d);
  for (int64_t i = 0; i < d; ++i) {
    if (shape == 0) x[i] = normal(rng);
    if (shape == 1) x[i] = static_cast<float>(rng() % 5) - 2.0f;  // Ties.
    if (shape == 2) {
      uint32_t bits = rng();
      std::memcpy(&x[i], &bits, 4);  // Any pattern, NaNs included.
    }
  }
  return x;
}

TEST_F(KernelsCudaTest, TopKMatchesCpu) {
  for (int shape = 0; shape < 3; ++shape) {
    for (int64_t d : {int64_t{1}, int64_t{1000}, int64_t{8192 * 3 + 17},
                      int64_t{1} << 20}) {
      const std::vector<float> x = Inputs(d, shape, 1 + shape);
      DeviceArray<float> dx(x);
      for (int64_t k : {int64_t{0}, int64_t{1}, d / 100, d / 2, d}) {
        std::vector<uint32_t> cpu(k);
        TopK(x.data(), d, k, cpu.data(), 2);
        DeviceArray<uint32_t> dout(static_cast<size_t>(k));
        ASSERT_EQ(cuda::TopK(dx.get(), d, k, dout.get(), nullptr), 0);
        ASSERT_EQ(dout.ToHost(), cpu)
            << "shape=" << shape << " d=" << d << " k=" << k;
      }
    }
  }
}

// Buckets hand TopK a member's span at any float offset: x not 16-byte
// aligned (the float4 loads' unaligned head and tail), and d not a multiple
// of 4.
TEST_F(KernelsCudaTest, TopKMatchesCpuAtUnalignedStarts) {
  const int64_t span = (int64_t{1} << 18) + 7;
  const std::vector<float> all = Inputs(span + 3, 0, 42);
  DeviceArray<float> dall(all);
  for (int64_t offset : {int64_t{1}, int64_t{2}, int64_t{3}}) {
    for (int64_t d : {int64_t{5}, int64_t{8193}, span - 3}) {
      const float* x = all.data() + offset;
      for (int64_t k : {int64_t{1}, d / 100 + 1, d / 3}) {
        std::vector<uint32_t> cpu(k);
        TopK(x, d, k, cpu.data(), 2);
        DeviceArray<uint32_t> dout(static_cast<size_t>(k));
        ASSERT_EQ(cuda::TopK(dall.get() + offset, d, k, dout.get(), nullptr),
                  0);
        ASSERT_EQ(dout.ToHost(), cpu)
            << "offset=" << offset << " d=" << d << " k=" << k;
      }
    }
  }
}

// Inputs for the sampled-threshold path (topk_filter_cuda.h), which must
// equal the CPU whether its sample guides it (fast) or misleads it
// (fallback): shape 0 normal (fast), 1 five values (ties: fallback), 2 any
// bit pattern, 3 a quiet half then a loud one (the loud entries crowd a few
// tiles), 4 ascending magnitudes, 5 all zeros, 6 sparse (99.6% zeros).
std::vector<float> FilterInputs(int64_t d, int shape, uint32_t seed) {
  if (shape <= 2) return Inputs(d, shape, seed);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(d, 0.0f);
  for (int64_t i = 0; i < d; ++i) {
    if (shape == 3) x[i] = normal(rng) * (i < d / 2 ? 1e-6f : 1.0f);
    if (shape == 4) x[i] = static_cast<float>(i) * ((i & 1) ? -1.0f : 1.0f);
    if (shape == 6 && rng() % 256 == 0) x[i] = normal(rng);
  }
  return x;
}

TEST_F(KernelsCudaTest, TopKFilterPathMatchesCpu) {
  DeviceArray<cuda::FilterTopKProbe> probe(size_t{1});
  for (int shape = 0; shape < 7; ++shape) {
    for (int64_t d :
         {(int64_t{1} << 18) + 5, int64_t{1} << 20, (int64_t{3} << 20) + 1}) {
      const std::vector<float> x = FilterInputs(d, shape, 7 + shape);
      DeviceArray<float> dx(x);
      for (int64_t k : {int64_t{1}, d / 1000, d / 100, d / 32}) {
        ASSERT_TRUE(cuda::FilterTopKApplies(d, k)) << d << " " << k;
        std::vector<uint32_t> cpu(k);
        TopK(x.data(), d, k, cpu.data(), 2);
        DeviceArray<uint32_t> dout(static_cast<size_t>(k));
        ASSERT_EQ(cuda::TopKByFilter(dx.get(), d, k, dout.get(), nullptr,
                                     nullptr, probe.get()),
                  cudaSuccess);
        ASSERT_EQ(dout.ToHost(), cpu)
            << "shape=" << shape << " d=" << d << " k=" << k;
        const int32_t took_fallback = probe.ToHost()[0].took_fallback;
        // Normal data at k = 1% must take the one-pass path (the speed
        // claim rests on it); ties and all-zero inputs cannot.
        if (shape == 0 && k == d / 100) {
          EXPECT_EQ(took_fallback, 0) << d;
        }
        if (shape == 1 || shape == 5) {
          EXPECT_EQ(took_fallback, 1) << d;
        }
        // The public entry point takes the same path.
        DeviceArray<uint32_t> dpub(static_cast<size_t>(k));
        ASSERT_EQ(cuda::TopK(dx.get(), d, k, dpub.get(), nullptr), 0);
        ASSERT_EQ(dpub.ToHost(), cpu) << "TopK shape=" << shape;
      }
    }
  }
  // Outside its range it refuses without enqueuing anything.
  EXPECT_FALSE(cuda::FilterTopKApplies(int64_t{1} << 17, 100));
  EXPECT_FALSE(
      cuda::FilterTopKApplies(int64_t{1} << 20, (int64_t{1} << 20) / 16));
}

TEST_F(KernelsCudaTest, SelectAtLeastMatchesCpu) {
  const int64_t d = (1 << 18) + 5;
  const std::vector<float> x = Inputs(d, 0, 3);
  DeviceArray<float> dx(x);
  for (float tau : {0.0f, 1.0f, 3.0f}) {
    std::vector<uint32_t> cpu;
    const int64_t n = SelectAtLeast(x.data(), d, ThresholdKey(tau), d, &cpu);
    int64_t count = -1;
    ASSERT_EQ(
        cuda::CountAtLeast(dx.get(), d, ThresholdKey(tau), &count, nullptr), 0);
    EXPECT_EQ(count, n);
    DeviceArray<uint32_t> dout(static_cast<size_t>(n));
    ASSERT_EQ(cuda::SelectAtLeast(dx.get(), d, ThresholdKey(tau), n, dout.get(),
                                  &count, nullptr),
              0);
    EXPECT_EQ(count, n);
    EXPECT_EQ(dout.ToHost(), cpu);
  }
}

TEST_F(KernelsCudaTest, SampledTopKMatchesCpuBitForBit) {
  for (int shape = 0; shape < 3; ++shape) {
    const int64_t d = (1 << 20) + 3;
    const std::vector<float> x = Inputs(d, shape, 20 + shape);
    DeviceArray<float> dx(x);
    for (int64_t k : {int64_t{1}, int64_t{1000}, d / 100, d / 3}) {
      SampledTopKOptions opt;
      opt.seed = 99;
      std::vector<uint32_t> cpu;
      SampledTopK(x.data(), d, k, opt, &cpu);
      DeviceArray<uint32_t> dout(static_cast<size_t>(k));
      int64_t n = -1;
      ASSERT_EQ(cuda::SampledTopK(dx.get(), d, k, opt, dout.get(), &n, nullptr),
                0);
      ASSERT_EQ(n, static_cast<int64_t>(cpu.size()));
      std::vector<uint32_t> gpu = dout.ToHost();
      gpu.resize(n);
      EXPECT_EQ(gpu, cpu) << "shape=" << shape << " k=" << k;
    }
  }
}

TEST_F(KernelsCudaTest, ThresholdSearchWithinBounds) {
  const int64_t d = (1 << 20) + 3;
  const std::vector<float> x = Inputs(d, 0, 30);
  DeviceArray<float> dx(x);
  for (int64_t k : {int64_t{1}, int64_t{1000}, d / 100}) {
    DeviceArray<uint32_t> dout(static_cast<size_t>(2 * k));
    int64_t n = -1;
    ASSERT_EQ(cuda::ThresholdSearch(dx.get(), d, k, ThresholdSearchOptions(),
                                    dout.get(), &n, nullptr),
              0);
    ASSERT_GE(n, k);
    ASSERT_LT(n, std::max<int64_t>(2 * k, k + 1));
    std::vector<uint32_t> gpu = dout.ToHost();
    gpu.resize(n);
    std::vector<uint32_t> exact(n);
    TopK(x.data(), d, n, exact.data());
    EXPECT_EQ(gpu, exact) << "k=" << k;
  }
}

TEST_F(KernelsCudaTest, RandomKMatchesCpu) {
  std::vector<uint32_t> cpu;
  RandomKIndices(MixSeed(1, 2, 3), 100000, 1000, &cpu);
  DeviceArray<uint32_t> dout(1000);
  ASSERT_EQ(
      cuda::RandomKIndices(MixSeed(1, 2, 3), 100000, 1000, dout.get(), nullptr),
      0);
  EXPECT_EQ(dout.ToHost(), cpu);
}

TEST_F(KernelsCudaTest, GatherScatterMatchCpu) {
  const int64_t d = 100000;
  const std::vector<float> dense = Inputs(d, 0, 4);
  std::vector<uint32_t> idx;
  for (uint32_t i = 3; i < d; i += 7) idx.push_back(i);
  DeviceArray<float> ddense(dense);
  DeviceArray<uint32_t> didx(idx);
  DeviceArray<float> dvals(idx.size());
  ASSERT_EQ(
      cuda::Gather(ddense.get(), didx.get(), idx.size(), dvals.get(), nullptr),
      0);
  std::vector<float> vals(idx.size());
  Gather(dense.data(), idx.data(), idx.size(), vals.data());
  EXPECT_EQ(dvals.ToHost(), vals);
  ASSERT_EQ(cuda::ScatterAdd(didx.get(), dvals.get(), idx.size(), ddense.get(),
                             nullptr),
            0);
  std::vector<float> ref = dense;
  ScatterAdd(idx.data(), vals.data(), idx.size(), ref.data());
  EXPECT_EQ(ddense.ToHost(), ref);
}

// Runs the CUDA m-row kernels on rows idx/val (row i in format B when
// block16[i], else format A) against the CPU ones on the same encoded rows:
// dots within the rounding of a reordered double sum, the linear
// combination bit-identical.
void ExpectRowOpsMatchCpu(int64_t d,
                          const std::vector<std::vector<uint32_t>>& idx,
                          const std::vector<std::vector<float>>& val,
                          const std::vector<bool>& block16,
                          const std::vector<double>& coeffs) {
  const size_t m = idx.size();
  std::vector<std::vector<uint16_t>> i16(m), v16(m);
  std::vector<std::vector<uint32_t>> offsets(m);
  std::vector<SparseRow> host_rows(m), dev_rows(m);
  std::vector<std::unique_ptr<DeviceArray<uint32_t>>> d32;
  std::vector<std::unique_ptr<DeviceArray<float>>> dval;
  std::vector<std::unique_ptr<DeviceArray<uint16_t>>> d16;
  for (size_t i = 0; i < m; ++i) {
    if (!block16[i]) {
      host_rows[i].nnz = idx[i].size();
      host_rows[i].index32 = idx[i].data();
      host_rows[i].value32 = val[i].data();
      d32.emplace_back(new DeviceArray<uint32_t>(idx[i]));
      dval.emplace_back(new DeviceArray<float>(val[i]));
      dev_rows[i] = host_rows[i];
      dev_rows[i].index32 = d32.back()->get();
      dev_rows[i].value32 = dval.back()->get();
    } else {
      const int64_t slots = Block16Slots(idx[i].data(), idx[i].size());
      i16[i].resize(slots);
      v16[i].resize(slots);
      EncodeBlock16BF16(idx[i].data(), val[i].data(), idx[i].size(), slots,
                        i16[i].data(), v16[i].data());
      host_rows[i] = Block16Row(i16[i].data(), v16[i].data(), slots, d);
      Block16BlockStarts(host_rows[i], &offsets[i]);
      dev_rows[i] = host_rows[i];
      dev_rows[i].nnz = offsets[i].back();
      dev_rows[i].num_blocks = static_cast<int64_t>(offsets[i].size()) - 1;
      d16.emplace_back(new DeviceArray<uint16_t>(i16[i]));
      dev_rows[i].index16 = d16.back()->get();
      d16.emplace_back(new DeviceArray<uint16_t>(v16[i]));
      dev_rows[i].value16 = d16.back()->get();
      d32.emplace_back(new DeviceArray<uint32_t>(offsets[i]));
      dev_rows[i].block_starts = d32.back()->get();
    }
  }
  // The m-row kernels read the descriptors and coefficients on the device.
  DeviceArray<SparseRow> ddev_rows(dev_rows);
  DeviceArray<double> dcoeffs(coeffs);
  const std::vector<float> dense = Inputs(d, 0, 6);
  DeviceArray<float> ddense(dense);
  std::vector<double> cpu_dots(m);
  SparseDenseDots(host_rows.data(), m, dense.data(), cpu_dots.data());
  DeviceArray<double> ddots(m);
  ASSERT_EQ(cuda::SparseDenseDots(ddev_rows.get(), m, ddense.get(), ddots.get(),
                                  nullptr),
            0);
  const std::vector<double> gpu_dots = ddots.ToHost();
  for (size_t i = 0; i < m; ++i) {
    double scale = 0;  // sum of |value * dense|, the rounding's scale
    std::vector<uint32_t> ri;
    std::vector<float> rv;
    DecodeRow(host_rows[i], &ri, &rv);
    for (size_t j = 0; j < ri.size(); ++j) {
      scale += std::fabs(static_cast<double>(rv[j]) * dense[ri[j]]);
    }
    EXPECT_NEAR(gpu_dots[i], cpu_dots[i], 1e-10 * (1 + scale)) << "row " << i;
  }
  std::vector<float> cpu = dense;
  SparseLinearCombination(host_rows.data(), m, coeffs.data(), cpu.data());
  ASSERT_EQ(cuda::SparseLinearCombination(ddev_rows.get(), m, dcoeffs.get(), d,
                                          ddense.get(), nullptr),
            0);
  const std::vector<float> gpu = ddense.ToHost();
  ASSERT_EQ(gpu.size(), cpu.size());
  int64_t differ = 0;
  for (int64_t i = 0; i < d; ++i) {
    if (std::memcmp(&gpu[i], &cpu[i], 4) != 0 && ++differ <= 5) {
      ADD_FAILURE() << "dense[" << i << "]: gpu " << gpu[i] << " cpu "
                    << cpu[i];
    }
  }
  EXPECT_EQ(differ, 0);
}

TEST_F(KernelsCudaTest, RowOpsMatchCpu) {
  const int64_t d = 3 * kBlock16Size + 11;
  std::vector<std::vector<uint32_t>> idx(4);
  std::vector<std::vector<float>> val(4);
  for (int i = 0; i < 4; ++i) {
    for (uint32_t j = i; j < d; j += 13 + i) {
      // Row 3 skips block 1: its encoding needs a jump marker.
      if (i == 3 && j / kBlock16Size == 1) continue;
      idx[i].push_back(j);
    }
    val[i] = Inputs(idx[i].size(), 0, 10 + i);
  }
  // Rows 0, 2 in format A; rows 1, 3 in format B.
  ExpectRowOpsMatchCpu(d, idx, val, {false, true, false, true},
                       {0.5, -2.0, 1e-3, 3.0});
}

// Many rows (more than one batch of chunk ranges) with overlapping random
// supports, both formats, empty rows, jump markers right before a block's
// relative index 0, and a dense length that ends inside a chunk: the one
// launch over all rows keeps the CPU's bits.
TEST_F(KernelsCudaTest, ManyRowOpsMatchCpu) {
  const int64_t d = 4 * kBlock16Size + 8192 + 1234;
  const int m = 300;
  std::mt19937 rng(11);
  std::vector<std::vector<uint32_t>> idx(m);
  std::vector<std::vector<float>> val(m);
  std::vector<bool> block16(m);
  std::vector<double> coeffs(m);
  std::normal_distribution<double> normal;
  for (int i = 0; i < m; ++i) {
    block16[i] = i % 3 != 0;
    coeffs[i] = normal(rng);
    if (i % 50 == 7) continue;                // An empty row.
    const uint32_t density = 1 + rng() % 40;  // per mille
    for (uint32_t j = 0; j < d; ++j) {
      const int64_t block = j / kBlock16Size;
      // Some rows skip blocks 1 and 2, then start block 3 at relative 0.
      if (i % 7 == 1 && (block == 1 || block == 2)) continue;
      if ((i % 7 == 1 && j == 3 * kBlock16Size) || rng() % 1000 < density) {
        idx[i].push_back(j);
      }
    }
    val[i] = Inputs(idx[i].size(), 0, 100 + i);
  }
  ExpectRowOpsMatchCpu(d, idx, val, block16, coeffs);
}

}  // namespace
}  // namespace kernels
}  // namespace terse
