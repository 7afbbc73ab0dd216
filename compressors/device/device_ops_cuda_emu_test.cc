// The kernels behind device_ops_cuda.h (the very sources the GPU builds)
// run on the CPU by cuda_emu (compressors/kernels/cuda_emu), against the
// simulated device's DeviceOps, which are the CPU kernels in stream order. CI
// has no GPU: this is where the CUDA kernels' indexing, warp folds, block
// reductions and fixed summation orders are checked on every build. The
// tolerances are device_ops_cuda_gpu_test's: bitwise except the squared
// norm and the PowerSGD products and orthonormalisation.
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compressors/device/device_ops.h"
#include "compressors/device/device_ops_cuda.h"  // As device_ops_cuda_emu.
#include "compressors/device/device_ops_testing.h"
#include "compressors/device/qsgd_bits.h"
#include "compressors/kernels/cuda_emu/cuda_emu.h"
#include "device/sim_runtime.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

namespace emu = ::terse::device_ops_cuda_emu;

std::vector<float> Normal(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  return x;
}

// Emulated device memory (the cuda_emu arena), a copy of `host`.
template <typename T>
T* Emu(const std::vector<T>& host) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(1, host.size()) * sizeof(T)),
            cudaSuccess);
  if (!host.empty()) std::memcpy(p, host.data(), host.size() * sizeof(T));
  return static_cast<T*>(p);
}
template <typename T>
std::vector<T> Host(const T* p, int64_t n) {
  return std::vector<T>(p, p + n);
}

// The simulated device's ops, with upload and download.
class Sim {
 public:
  Sim() {
    stream_ = std::move(sim_.CreateStream(0)).value();
    ops_ = std::move(MakeDeviceOps(&sim_, 0)).value();
  }
  template <typename T>
  T* Up(const std::vector<T>& host) {
    DeviceBuffer b =
        std::move(DeviceBuffer::Allocate(
                      &sim_, 0, std::max<int64_t>(1, host.size()) * sizeof(T)))
            .value();
    if (!host.empty())
      std::memcpy(b.data(), host.data(), host.size() * sizeof(T));
    T* p = b.as<T>();
    buffers_.push_back(std::move(b));
    return p;
  }
  template <typename T>
  std::vector<T> Down(const T* p, int64_t n) {
    EXPECT_TRUE(stream_->Synchronize().ok());
    return std::vector<T>(p, p + n);
  }
  DeviceOps* ops() { return ops_.get(); }
  Stream* stream() { return stream_.get(); }

 private:
  SimRuntime sim_;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<DeviceOps> ops_;
  std::vector<DeviceBuffer> buffers_;
};

template <typename T>
void ExpectSameBits(const std::vector<T>& emu_result, const std::vector<T>& cpu,
                    const std::string& what) {
  ASSERT_EQ(emu_result.size(), cpu.size()) << what;
  for (size_t i = 0; i < cpu.size(); ++i) {
    const bool both_nan = std::is_floating_point<T>::value &&
                          std::isnan(static_cast<double>(emu_result[i])) &&
                          std::isnan(static_cast<double>(cpu[i]));
    ASSERT_TRUE(both_nan ||
                std::memcmp(&emu_result[i], &cpu[i], sizeof(T)) == 0)
        << what << "[" << i << "]: emulated CUDA " << emu_result[i] << ", CPU "
        << cpu[i];
  }
}

// Inputs whose scales and norms fall on different floats when the sum runs
// in another order: the fixed order is what must match.
std::vector<float> Inputs(int64_t d, uint32_t seed) {
  std::vector<float> x = Normal(d, seed);
  for (int64_t i = 0; i < d; i += 97) x[i] *= 1e6f;  // A wide range.
  return x;
}

void CheckSign(const std::vector<float>& x, int64_t block) {
  const int64_t d = static_cast<int64_t>(x.size());
  const std::string what = absl::StrCat("SignEncode d=", d, " block=", block);
  const int64_t blocks = (d + block - 1) / block, bytes = (d + 7) / 8;
  Sim sim;
  float* sscales = sim.Up(std::vector<float>(blocks));
  uint8_t* sbits = sim.Up(std::vector<uint8_t>(bytes));
  ASSERT_TRUE(
      sim.ops()
          ->SignEncode(sim.stream(), sim.Up(x), d, block, sscales, sbits)
          .ok());
  float* escales = Emu(std::vector<float>(blocks, -1.0f));
  uint8_t* ebits = Emu(std::vector<uint8_t>(bytes, 0xff));
  ASSERT_TRUE(
      emu::SignEncode(0, nullptr, Emu(x), d, block, escales, ebits).ok());
  ExpectSameBits(Host(escales, blocks), sim.Down(sscales, blocks),
                 what + " scales");
  ExpectSameBits(Host(ebits, bytes), sim.Down(sbits, bytes), what + " bits");
  const std::vector<float> base = Normal(d, 9);
  float* sdense = sim.Up(base);
  ASSERT_TRUE(
      sim.ops()
          ->SignDecodeAdd(sim.stream(), sscales, sbits, d, block, sdense)
          .ok());
  float* edense = Emu(base);
  ASSERT_TRUE(
      emu::SignDecodeAdd(0, nullptr, escales, ebits, d, block, edense).ok());
  ExpectSameBits(Host(edense, d), sim.Down(sdense, d), what + " decode");
}

// Every case runs under each of cuda_emu's thread orders: a kernel that
// reads another thread's write without a barrier between them gives another
// result in one of them.
class DeviceOpsCudaEmuTest
    : public ::testing::TestWithParam<cuda_emu::ThreadOrder> {
 protected:
  void SetUp() override { cuda_emu::SetThreadOrder(GetParam(), 3); }
  void TearDown() override {
    cuda_emu::SetThreadOrder(cuda_emu::ThreadOrder::kAscending);
  }
};

TEST_P(DeviceOpsCudaEmuTest, SignEncodeAndDecodeAreTheCpus) {
  for (int64_t d : {int64_t{5}, int64_t{4097}, int64_t{70001}}) {
    const std::vector<float> x = Inputs(d, 3 + d);
    // 40001: two thread blocks of 10 and 8 chunks; the first takes two
    // rounds of its 8 warps.
    for (int64_t block : {int64_t{64}, int64_t{1000}, int64_t{4096},
                          int64_t{4097}, int64_t{40001}, d}) {
      CheckSign(x, block);
    }
  }
  CheckSign(Inputs(4097, 1), 1);
  // Inputs whose mean |x| lands on another float in any other summation
  // order (the lane fold, then the chunk order of a thread block).
  for (int64_t stride : {int64_t{1}, int64_t{4096}}) {
    const std::vector<float> tie = testing::OrderSensitiveValues(stride, false);
    CheckSign(tie, static_cast<int64_t>(tie.size()));
  }
}

void CheckQsgd(const std::vector<float>& x, int64_t bucket, int levels,
               std::mt19937_64* rng) {
  const int64_t d = static_cast<int64_t>(x.size());
  const std::string what =
      absl::StrCat("QsgdEncode d=", d, " bucket=", bucket, " levels=", levels);
  const int64_t buckets = (d + bucket - 1) / bucket;
  const int bits = qsgd_bits::CodeBits(levels);
  const int64_t words = qsgd_bits::PackedWords(d, bits);
  std::vector<uint64_t> seeds(buckets);
  for (uint64_t& s : seeds) s = (*rng)();
  Sim sim;
  float* snorms = sim.Up(std::vector<float>(buckets));
  uint8_t* scodes = sim.Up(std::vector<uint8_t>(words * 4));
  ASSERT_TRUE(sim.ops()
                  ->QsgdEncode(sim.stream(), sim.Up(x), d, bucket, levels,
                               sim.Up(seeds), snorms, scodes)
                  .ok());
  float* enorms = Emu(std::vector<float>(buckets, -1.0f));
  uint8_t* ecodes = Emu(std::vector<uint8_t>(words * 4));
  ASSERT_TRUE(emu::QsgdEncode(0, nullptr, Emu(x), d, bucket, levels, Emu(seeds),
                              enorms, ecodes)
                  .ok());
  ExpectSameBits(Host(enorms, buckets), sim.Down(snorms, buckets),
                 what + " norms");
  ExpectSameBits(Host(ecodes, words * 4), sim.Down(scodes, words * 4),
                 what + " codes");
  const std::vector<float> base = Normal(d, 11);
  float* sdense = sim.Up(base);
  ASSERT_TRUE(sim.ops()
                  ->QsgdDecodeAdd(sim.stream(), snorms, scodes, d, bucket,
                                  levels, sdense)
                  .ok());
  float* edense = Emu(base);
  ASSERT_TRUE(
      emu::QsgdDecodeAdd(0, nullptr, enorms, ecodes, d, bucket, levels, edense)
          .ok());
  ExpectSameBits(Host(edense, d), sim.Down(sdense, d), what + " decode");
}

TEST_P(DeviceOpsCudaEmuTest, QsgdEncodeAndDecodeAreTheCpus) {
  std::mt19937_64 rng(17);
  for (int64_t d : {int64_t{5}, int64_t{4097}, int64_t{70001}}) {
    const std::vector<float> x = Inputs(d, 5 + d);
    for (int64_t bucket :
         {int64_t{512}, int64_t{4096}, int64_t{4097}, int64_t{40001}, d}) {
      for (int levels : {1, 4, 127}) CheckQsgd(x, bucket, levels, &rng);
    }
  }
  for (int64_t stride : {int64_t{1}, int64_t{4096}}) {  // As for SignEncode.
    const std::vector<float> tie = testing::OrderSensitiveValues(stride, true);
    CheckQsgd(tie, static_cast<int64_t>(tie.size()), 8, &rng);
  }
}

// Writes element i's `bits`-bit code into a packed QSGD code stream.
void PutCode(std::vector<uint8_t>* codes, int64_t i, int bits, uint32_t code) {
  const uint64_t pos = static_cast<uint64_t>(i) * bits;
  for (int b = 0; b < bits; ++b) {
    const uint8_t mask = static_cast<uint8_t>(1u << ((pos + b) & 7));
    uint8_t& byte = (*codes)[(pos + b) >> 3];
    byte = ((code >> b) & 1u) ? (byte | mask) : (byte & ~mask);
  }
}

// CheckQsgdCodes on both devices: the same flag, nonzero exactly when
// `want_bad`.
void CheckCodes(const std::vector<uint8_t>& codes, int64_t d, int levels,
                bool want_bad, const std::string& what) {
  Sim sim;
  uint32_t* sbad = sim.Up(std::vector<uint32_t>{7});
  ASSERT_TRUE(sim.ops()
                  ->CheckQsgdCodes(sim.stream(), sim.Up(codes), d, levels, sbad)
                  .ok())
      << what;
  uint32_t* ebad = Emu(std::vector<uint32_t>{7});
  ASSERT_TRUE(emu::CheckQsgdCodes(0, nullptr, Emu(codes), d, levels, ebad).ok())
      << what;
  const uint32_t on_sim = sim.Down(sbad, 1)[0];
  EXPECT_EQ(on_sim != 0, want_bad) << what << ": simulated device";
  EXPECT_EQ(Host(ebad, 1)[0], on_sim) << what << ": emulated CUDA";
}

TEST_P(DeviceOpsCudaEmuTest, CheckQsgdCodesIsTheCpuDecodersCheck) {
  std::mt19937_64 rng(23);
  for (int64_t d : {int64_t{1}, int64_t{5}, int64_t{4097}, int64_t{70001}}) {
    // Levels whose codes can hold a level above s (2, 4, 100) and ones
    // whose cannot (1, 127: every code's level is at most s).
    for (int levels : {1, 2, 4, 100, 127}) {
      const int bits = qsgd_bits::CodeBits(levels);
      const uint32_t max_level = (1u << (bits - 1)) - 1;
      std::vector<uint8_t> codes(qsgd_bits::PackedBytes(d, bits));
      for (int64_t i = 0; i < d; ++i) {
        const uint32_t level = static_cast<uint32_t>(rng() % (levels + 1));
        PutCode(&codes, i, bits, level << 1 | static_cast<uint32_t>(rng() & 1));
      }
      const std::string what = absl::StrCat("d=", d, " levels=", levels);
      CheckCodes(codes, d, levels, false, what + " valid");
      if ((d * bits) % 8 != 0) {  // The last byte's unused bits are ignored.
        std::vector<uint8_t> tail = codes;
        tail.back() |= static_cast<uint8_t>(0xff << ((d * bits) % 8));
        CheckCodes(tail, d, levels, false, what + " tail bits set");
      }
      for (int64_t at : {int64_t{0}, d / 2, d - 1}) {
        std::vector<uint8_t> bad = codes;
        PutCode(&bad, at, bits, max_level << 1 | 1u);
        CheckCodes(bad, d, levels, max_level > static_cast<uint32_t>(levels),
                   absl::StrCat(what, " level ", max_level, " at ", at));
      }
    }
  }
}

TEST_P(DeviceOpsCudaEmuTest, OrthonormalizeColumnsIsTheCpusWithinARounding) {
  struct Case {
    int64_t rows, r;
    std::vector<float> p;
  };
  std::vector<Case> cases = {{1000, 4, Normal(4000, 21)},
                             {37, 1, Normal(37, 23)},
                             {300, 3, Normal(900, 13)}};
  // Degenerate columns: 3 e_0, 5 e_0 (vanishes against it), zero, one with
  // an infinity, one with a NaN (both zeroed), one ordinary.
  const int64_t dr = 64, dc = 6;
  std::vector<float> degenerate(dr * dc, 0.0f);
  const std::vector<float> fill = Normal(dr * dc, 27);
  for (int64_t i = 0; i < dr; ++i) {
    for (int64_t c = 3; c < dc; ++c) degenerate[i * dc + c] = fill[i * dc + c];
  }
  degenerate[0] = 3.0f;
  degenerate[1] = 5.0f;
  degenerate[5 * dc + 3] = std::numeric_limits<float>::infinity();
  degenerate[7 * dc + 4] = std::numeric_limits<float>::quiet_NaN();
  cases.push_back({dr, dc, degenerate});
  for (const Case& c : cases) {
    Sim sim;
    float* sp = sim.Up(c.p);
    ASSERT_TRUE(
        sim.ops()->OrthonormalizeColumns(sim.stream(), sp, c.rows, c.r).ok());
    const std::vector<float> cpu = sim.Down(sp, c.rows * c.r);
    float* ep = Emu(c.p);
    ASSERT_TRUE(emu::OrthonormalizeColumns(0, nullptr, ep, c.rows, c.r).ok());
    const std::vector<float> got = Host(ep, c.rows * c.r);
    for (size_t i = 0; i < cpu.size(); ++i) {
      if (cpu[i] == 0.0f) {
        ASSERT_EQ(got[i], 0.0f) << c.rows << "x" << c.r << " [" << i << "]";
      } else {
        ASSERT_NEAR(got[i], cpu[i], 1e-6 * std::abs(cpu[i]) + 1e-9)
            << c.rows << "x" << c.r << " [" << i << "]";
      }
    }
  }
}

// Lengths for every grid shape of the three kernels: one partial warp, a
// partial block, one block of sums over several max blocks, several blocks
// of sums with a partial last one. Values over a wide range, some
// non-finite in the long cases; each sketch adds to a nonzero start, twice
// through one scratch that starts as garbage. Each length under another
// thread order (the shared sums are zeroed and flushed across barriers).
TEST_P(DeviceOpsCudaEmuTest, CountSketchIsTheCpus) {
  constexpr cuda_emu::ThreadOrder kOrders[] = {
      cuda_emu::ThreadOrder::kAscending, cuda_emu::ThreadOrder::kDescending,
      cuda_emu::ThreadOrder::kShuffled};
  int run = 0;
  for (int64_t n : {int64_t{1}, int64_t{31}, int64_t{257}, int64_t{5001},
                    int64_t{3 * 4096 + 17}}) {
    const cuda_emu::ThreadOrder order = kOrders[run % 3];
    cuda_emu::SetThreadOrder(order, ++run);
    std::vector<float> x = Inputs(n, 51 + n), y = Normal(n, 52 + n, 1e-3f);
    // One magnitude above the rest, in a lane, warp and block other than
    // the first: the scale follows the largest magnitude's binade.
    if (n > 1) x[n - 2] = -1e12f;
    if (n > 5000) {
      x[n / 2] = std::numeric_limits<float>::infinity();
      x[n / 3] = -std::numeric_limits<float>::infinity();
      x[n - 1] = std::numeric_limits<float>::quiet_NaN();
    }
    for (int64_t buckets :
         {int64_t{1}, int64_t{64}, int64_t{1024}, int64_t{1500}}) {
      const std::string what =
          absl::StrCat("CountSketch of ", n, " into ", buckets, " (",
                       cuda_emu::ThreadOrderName(order), ")");
      std::vector<double> start(buckets);
      for (int64_t j = 0; j < buckets; ++j) start[j] = 0.5 * j;  // Added to.
      const std::vector<uint8_t> garbage(
          DeviceOps::CountSketchScratchBytes(buckets), 0xa5);
      Sim sim;
      double* ssketch = sim.Up(start);
      uint8_t* sscratch = sim.Up(garbage);
      for (const std::vector<float>* v : {&x, &y}) {
        ASSERT_TRUE(sim.ops()
                        ->CountSketch(sim.stream(), sim.Up(*v), n, 77, ssketch,
                                      buckets, sscratch)
                        .ok());
      }
      double* esketch = Emu(start);
      uint8_t* escratch = Emu(garbage);
      for (const std::vector<float>* v : {&x, &y}) {
        ASSERT_TRUE(emu::CountSketch(0, nullptr, Emu(*v), n, 77, esketch,
                                     buckets, escratch)
                        .ok());
      }
      ASSERT_EQ(emu::CountSketchScratchBytes(buckets),
                static_cast<int64_t>(garbage.size()));
      ExpectSameBits(Host(esketch, buckets), sim.Down(ssketch, buckets), what);
    }
  }
  cuda_emu::SetThreadOrder(cuda_emu::ThreadOrder::kAscending);
}

TEST_P(DeviceOpsCudaEmuTest, ElementwiseCastsNormsAndProducts) {
  const int64_t n = 70001;
  const std::vector<float> x = Inputs(n, 31), y = Normal(n, 32);
  Sim sim;
  // Add and Subtract: bitwise.
  float* sy = sim.Up(y);
  ASSERT_TRUE(sim.ops()->Add(sim.stream(), sim.Up(x), sy, n).ok());
  float* ey = Emu(y);
  ASSERT_TRUE(emu::Add(0, nullptr, Emu(x), ey, n).ok());
  ExpectSameBits(Host(ey, n), sim.Down(sy, n), "Add");
  float* sout = sim.Up(std::vector<float>(n));
  ASSERT_TRUE(
      sim.ops()->Subtract(sim.stream(), sim.Up(x), sim.Up(y), sout, n).ok());
  float* eout = Emu(std::vector<float>(n));
  ASSERT_TRUE(emu::Subtract(0, nullptr, Emu(x), Emu(y), eout, n).ok());
  ExpectSameBits(Host(eout, n), sim.Down(sout, n), "Subtract");
  // fp16 and bf16 casts, both ways: bitwise.
  for (DataType type : {DataType::kFloat16, DataType::kBFloat16}) {
    const bool bf16 = type == DataType::kBFloat16;
    uint16_t* sh = sim.Up(std::vector<uint16_t>(n));
    ASSERT_TRUE(
        sim.ops()->CastToHalf(sim.stream(), sim.Up(x), sh, n, type).ok());
    uint16_t* eh = Emu(std::vector<uint16_t>(n));
    ASSERT_TRUE(emu::CastToHalf(0, nullptr, Emu(x), eh, n, bf16).ok());
    ExpectSameBits(Host(eh, n), sim.Down(sh, n), bf16 ? "bf16" : "fp16");
    float* sacc = sim.Up(y);
    ASSERT_TRUE(
        sim.ops()->AccumulateHalf(sim.stream(), sh, sacc, n, type).ok());
    float* eacc = Emu(y);
    ASSERT_TRUE(emu::AccumulateHalf(0, nullptr, eh, eacc, n, bf16).ok());
    ExpectSameBits(Host(eacc, n), sim.Down(sacc, n), "AccumulateHalf");
  }
  // The squared norm: a tree over blocks, within 1e-12 of the CPU's.
  double* snorm = sim.Up(std::vector<double>(1));
  ASSERT_TRUE(sim.ops()->SquaredNorm(sim.stream(), sim.Up(y), n, snorm).ok());
  double* enorm = Emu(std::vector<double>(1, -1.0));
  ASSERT_TRUE(emu::SquaredNorm(0, nullptr, Emu(y), n, enorm).ok());
  const double cpu_norm = sim.Down(snorm, 1)[0];
  EXPECT_NEAR(*enorm, cpu_norm, 1e-12 * cpu_norm);
  // P = M Q, Q = M^T P and M += P Q^T, within float sums of the CPU's.
  const int64_t rows = 70, cols = 50, r = 3;
  const std::vector<float> m = Normal(rows * cols, 41),
                           q = Normal(cols * r, 42), p = Normal(rows * r, 43);
  float* sp = sim.Up(std::vector<float>(rows * r));
  ASSERT_TRUE(
      sim.ops()
          ->MatMul(sim.stream(), sim.Up(m), sim.Up(q), sp, rows, cols, r)
          .ok());
  float* ep = Emu(std::vector<float>(rows * r));
  ASSERT_TRUE(emu::MatMul(0, nullptr, Emu(m), Emu(q), ep, rows, cols, r).ok());
  const std::vector<float> cpu_p = sim.Down(sp, rows * r);
  for (int64_t i = 0; i < rows * r; ++i) ASSERT_NEAR(ep[i], cpu_p[i], 1e-4);
  float* sq = sim.Up(std::vector<float>(cols * r));
  ASSERT_TRUE(sim.ops()
                  ->MatMulTransposed(sim.stream(), sim.Up(m), sim.Up(p), sq,
                                     rows, cols, r)
                  .ok());
  float* eq = Emu(std::vector<float>(cols * r));
  ASSERT_TRUE(
      emu::MatMulTransposed(0, nullptr, Emu(m), Emu(p), eq, rows, cols, r)
          .ok());
  const std::vector<float> cpu_q = sim.Down(sq, cols * r);
  for (int64_t i = 0; i < cols * r; ++i) ASSERT_NEAR(eq[i], cpu_q[i], 1e-4);
  float* sm = sim.Up(m);
  ASSERT_TRUE(sim.ops()
                  ->AddOuterProduct(sim.stream(), sim.Up(p), sim.Up(q), sm,
                                    rows, cols, r)
                  .ok());
  float* em = Emu(m);
  ASSERT_TRUE(
      emu::AddOuterProduct(0, nullptr, Emu(p), Emu(q), em, rows, cols, r).ok());
  const std::vector<float> cpu_m = sim.Down(sm, rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) ASSERT_NEAR(em[i], cpu_m[i], 1e-4);
}

INSTANTIATE_TEST_SUITE_P(
    Orders, DeviceOpsCudaEmuTest,
    ::testing::Values(cuda_emu::ThreadOrder::kAscending,
                      cuda_emu::ThreadOrder::kDescending,
                      cuda_emu::ThreadOrder::kShuffled),
    [](const ::testing::TestParamInfo<cuda_emu::ThreadOrder>& info) {
      return std::string(cuda_emu::ThreadOrderName(info.param));
    });

}  // namespace
}  // namespace terse
