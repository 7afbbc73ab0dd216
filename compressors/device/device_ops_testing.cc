#include "compressors/device/device_ops_testing.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/half.h"
#include "common/status.h"
#include "compressors/compressor.h"
#include "compressors/device/device_ops.h"
#include "compressors/device/qsgd_bits.h"
#include "compressors/kernels/count_sketch.h"
#include "compressors/kernels/randomk.h"
#include "compressors/kernels/select.h"
#include "compressors/kernels/sparse_ops.h"
#include "compressors/kernels/topk.h"
#include "compressors/options.h"
#include "compressors/payload.h"
#include "compressors/qsgd_compressor.h"

namespace terse {
namespace testing {
namespace {

// Gradient-like values with exact ties and both zeros.
std::vector<float> Values(int64_t d, uint32_t seed) {
  std::vector<float> x(d);
  uint32_t s = seed;
  for (int64_t i = 0; i < d; ++i) {
    s ^= s << 13;
    s ^= s >> 17;
    s ^= s << 5;
    x[i] = static_cast<float>(static_cast<int32_t>(s)) * 4.6566e-10f *
           (1 + static_cast<float>(i % 7));
    if (i % 97 == 0) x[i] = 0.5f;  // Ties.
    if (i % 101 == 0) x[i] = -0.0f;
  }
  return x;
}

class Fixture {
 public:
  Fixture(DeviceRuntime* runtime, int ordinal)
      : runtime_(runtime), ordinal_(ordinal) {}

  absl::Status Init() {
    TERSE_ASSIGN_OR_RETURN(stream_, runtime_->CreateStream(ordinal_));
    TERSE_ASSIGN_OR_RETURN(ops_, MakeDeviceOps(runtime_, ordinal_));
    return absl::OkStatus();
  }
  // A device copy of `host` (kept alive by the fixture).
  template <typename T>
  absl::StatusOr<T*> Upload(const std::vector<T>& host) {
    TERSE_ASSIGN_OR_RETURN(
        DeviceBuffer b,
        DeviceBuffer::Allocate(runtime_, ordinal_,
                               static_cast<int64_t>(host.size() * sizeof(T))));
    TERSE_RETURN_IF_ERROR(stream_->Memcpy(b.data(), host.data(), b.bytes()));
    TERSE_RETURN_IF_ERROR(stream_->Synchronize());
    T* p = b.as<T>();
    buffers_.push_back(std::move(b));
    return p;
  }
  template <typename T>
  absl::StatusOr<std::vector<T>> Download(const T* device, int64_t n) {
    std::vector<T> host(n);
    TERSE_RETURN_IF_ERROR(stream_->Memcpy(host.data(), device, n * sizeof(T)));
    TERSE_RETURN_IF_ERROR(stream_->Synchronize());
    return host;
  }
  Stream* stream() { return stream_.get(); }
  DeviceOps* ops() { return ops_.get(); }

 private:
  DeviceRuntime* runtime_;
  int ordinal_;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<DeviceOps> ops_;
  std::vector<DeviceBuffer> buffers_;
};

template <typename T>
absl::Status SameBits(const std::vector<T>& got, const std::vector<T>& want,
                      const std::string& what) {
  if (got.size() != want.size()) {
    return absl::InternalError(
        absl::StrCat(what, ": ", got.size(), " elements, want ", want.size()));
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      return absl::InternalError(
          absl::StrCat(what, "[", i, "]: device ", got[i], ", cpu ", want[i]));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckDeviceOpsAgainstCpu(DeviceRuntime* runtime, int ordinal,
                                      bool exact_norm) {
  Fixture f(runtime, ordinal);
  TERSE_RETURN_IF_ERROR(f.Init());
  DeviceOps* ops = f.ops();
  Stream* s = f.stream();
  const int64_t d = 5000;
  const std::vector<float> x = Values(d, 7), y0 = Values(d, 11);

  {  // Add.
    TERSE_ASSIGN_OR_RETURN(float* dx, f.Upload(x));
    TERSE_ASSIGN_OR_RETURN(float* dy, f.Upload(y0));
    TERSE_RETURN_IF_ERROR(ops->Add(s, dx, dy, d));
    std::vector<float> want = y0;
    for (int64_t i = 0; i < d; ++i) want[i] += x[i];
    TERSE_ASSIGN_OR_RETURN(std::vector<float> got, f.Download(dy, d));
    TERSE_RETURN_IF_ERROR(SameBits(got, want, "Add"));
  }
  {  // Subtract, in place into x's copy.
    TERSE_ASSIGN_OR_RETURN(float* dx, f.Upload(x));
    TERSE_ASSIGN_OR_RETURN(float* dy, f.Upload(y0));
    TERSE_RETURN_IF_ERROR(ops->Subtract(s, dx, dy, dx, d));
    std::vector<float> want = x;
    for (int64_t i = 0; i < d; ++i) want[i] = x[i] - y0[i];
    TERSE_ASSIGN_OR_RETURN(std::vector<float> got, f.Download(dx, d));
    TERSE_RETURN_IF_ERROR(SameBits(got, want, "Subtract"));
  }
  for (DataType type : {DataType::kFloat16, DataType::kBFloat16}) {
    const std::string name(DataTypeName(type));
    std::vector<float> big = x;
    big[3] = 1e6f;  // Overflows fp16.
    TERSE_ASSIGN_OR_RETURN(float* dx, f.Upload(big));
    TERSE_ASSIGN_OR_RETURN(uint16_t * dh,
                           f.Upload(std::vector<uint16_t>(d, 0)));
    TERSE_RETURN_IF_ERROR(ops->CastToHalf(s, dx, dh, d, type));
    std::vector<uint16_t> want(d);
    for (int64_t i = 0; i < d; ++i) {
      want[i] = type == DataType::kFloat16 ? FloatToHalf(big[i])
                                           : FloatToBFloat16(big[i]);
    }
    TERSE_ASSIGN_OR_RETURN(std::vector<uint16_t> got, f.Download(dh, d));
    TERSE_RETURN_IF_ERROR(SameBits(got, want, "CastToHalf " + name));
    TERSE_ASSIGN_OR_RETURN(float* dy, f.Upload(y0));
    TERSE_RETURN_IF_ERROR(ops->AccumulateHalf(s, dh, dy, d, type));
    std::vector<float> acc = y0;
    for (int64_t i = 0; i < d; ++i) {
      acc[i] += type == DataType::kFloat16 ? HalfToFloat(want[i])
                                           : BFloat16ToFloat(want[i]);
    }
    TERSE_ASSIGN_OR_RETURN(std::vector<float> back, f.Download(dy, d));
    TERSE_RETURN_IF_ERROR(SameBits(back, acc, "AccumulateHalf " + name));
  }
  {  // SquaredNorm.
    TERSE_ASSIGN_OR_RETURN(float* dx, f.Upload(x));
    TERSE_ASSIGN_OR_RETURN(double* dn, f.Upload(std::vector<double>(1, -1)));
    TERSE_RETURN_IF_ERROR(ops->SquaredNorm(s, dx, d, dn));
    double want = 0;
    for (float v : x) want += static_cast<double>(v) * v;
    TERSE_ASSIGN_OR_RETURN(std::vector<double> got, f.Download(dn, 1));
    if (exact_norm) {
      TERSE_RETURN_IF_ERROR(SameBits(got, {want}, "SquaredNorm"));
    } else if (!(std::abs(got[0] - want) <= 1e-12 * want)) {
      return absl::InternalError(
          absl::StrCat("SquaredNorm: device ", got[0], ", cpu ", want));
    }
  }
  // CountSketch: into k = 1, 64 and 1024 buckets, twice (the second adds
  // to the first), bitwise the CPU kernel's on both devices.
  for (int64_t k : {int64_t{1}, int64_t{64}, int64_t{1024}}) {
    const uint64_t seed = 0x5eed0000u + static_cast<uint64_t>(k);
    TERSE_ASSIGN_OR_RETURN(float* dx, f.Upload(x));
    TERSE_ASSIGN_OR_RETURN(float* dy, f.Upload(y0));
    TERSE_ASSIGN_OR_RETURN(double* dk, f.Upload(std::vector<double>(k, 0.0)));
    TERSE_RETURN_IF_ERROR(ops->CountSketch(s, dx, d, seed, dk, k));
    TERSE_RETURN_IF_ERROR(ops->CountSketch(s, dy, d - 3, seed, dk, k));
    std::vector<double> want(k, 0.0);
    kernels::AddCountSketch(seed, 0, x, absl::MakeSpan(want));
    kernels::AddCountSketch(seed, 0, absl::MakeConstSpan(y0.data(), d - 3),
                            absl::MakeSpan(want));
    TERSE_ASSIGN_OR_RETURN(std::vector<double> got, f.Download(dk, k));
    TERSE_RETURN_IF_ERROR(
        SameBits(got, want, absl::StrCat("CountSketch k=", k)));
  }
  for (int64_t k : {int64_t{0}, int64_t{1}, int64_t{50}, d}) {  // TopK.
    TERSE_ASSIGN_OR_RETURN(float* dx, f.Upload(x));
    TERSE_ASSIGN_OR_RETURN(uint32_t * di,
                           f.Upload(std::vector<uint32_t>(d, 0)));
    TERSE_RETURN_IF_ERROR(ops->TopK(s, dx, d, k, di));
    std::vector<uint32_t> want(k);
    kernels::TopK(x.data(), d, k, want.data(), 1);
    TERSE_ASSIGN_OR_RETURN(std::vector<uint32_t> got, f.Download(di, k));
    TERSE_RETURN_IF_ERROR(SameBits(got, want, absl::StrCat("TopK k=", k)));
    // Gather of those entries, then ScatterAdd of them into y.
    TERSE_ASSIGN_OR_RETURN(float* dv, f.Upload(std::vector<float>(d, 0)));
    TERSE_RETURN_IF_ERROR(ops->Gather(s, dx, di, k, dv));
    std::vector<float> values(k);
    kernels::Gather(x.data(), want.data(), k, values.data());
    TERSE_ASSIGN_OR_RETURN(std::vector<float> gv, f.Download(dv, k));
    TERSE_RETURN_IF_ERROR(SameBits(gv, values, "Gather"));
    TERSE_ASSIGN_OR_RETURN(float* dy, f.Upload(y0));
    TERSE_RETURN_IF_ERROR(ops->ScatterAdd(s, di, dv, k, dy));
    std::vector<float> scattered = y0;
    kernels::ScatterAdd(want.data(), values.data(), k, scattered.data());
    TERSE_ASSIGN_OR_RETURN(std::vector<float> sy, f.Download(dy, d));
    TERSE_RETURN_IF_ERROR(SameBits(sy, scattered, "ScatterAdd"));
    // CheckSparseIndices: TopK's indices ascend below d; one out of range
    // (d) or repeated is caught.
    TERSE_ASSIGN_OR_RETURN(uint32_t * bad, f.Upload(std::vector<uint32_t>{7}));
    TERSE_RETURN_IF_ERROR(ops->CheckSparseIndices(s, di, k, d, bad));
    TERSE_ASSIGN_OR_RETURN(std::vector<uint32_t> ok_flag, f.Download(bad, 1));
    if (ok_flag[0] != 0) {
      return absl::InternalError(
          absl::StrCat("CheckSparseIndices k=", k, ": valid indices refused"));
    }
    if (k >= 2) {
      for (const std::vector<uint32_t>& wrong :
           {std::vector<uint32_t>{0, static_cast<uint32_t>(d)},
            std::vector<uint32_t>{3, 3}, std::vector<uint32_t>{4, 2}}) {
        TERSE_ASSIGN_OR_RETURN(uint32_t * dw, f.Upload(wrong));
        TERSE_RETURN_IF_ERROR(ops->CheckSparseIndices(s, dw, 2, d, bad));
        TERSE_ASSIGN_OR_RETURN(std::vector<uint32_t> flag, f.Download(bad, 1));
        if (flag[0] == 0) {
          return absl::InternalError(absl::StrCat("CheckSparseIndices: {",
                                                  wrong[0], ", ", wrong[1],
                                                  "} of d = ", d, " accepted"));
        }
      }
    }
  }
  {  // SampledTopK (DGC) on an input big enough to sample.
    const int64_t n = int64_t{1} << 17, k = n / 100;
    const std::vector<float> big = Values(n, 3);
    kernels::SampledTopKOptions opt;
    opt.seed = 42;
    TERSE_ASSIGN_OR_RETURN(float* dx, f.Upload(big));
    TERSE_ASSIGN_OR_RETURN(uint32_t * di,
                           f.Upload(std::vector<uint32_t>(k, 0)));
    TERSE_ASSIGN_OR_RETURN(int64_t count,
                           ops->SampledTopK(s, dx, n, k, opt, di));
    std::vector<uint32_t> want;
    kernels::SampledTopK(big.data(), n, k, opt, &want);
    TERSE_ASSIGN_OR_RETURN(std::vector<uint32_t> got, f.Download(di, count));
    TERSE_RETURN_IF_ERROR(SameBits(got, want, "SampledTopK"));
  }
  {  // MomentumAccumulate and ClearWhereSent against the CPU loops.
    const std::vector<float> u0 = Values(d, 11), g0 = Values(d, 12);
    std::vector<float> sent(d, 0.0f);
    for (int64_t i = 0; i < d; i += 7) sent[i] = g0[i];
    TERSE_ASSIGN_OR_RETURN(float* du, f.Upload(u0));
    TERSE_ASSIGN_OR_RETURN(float* dg, f.Upload(g0));
    TERSE_ASSIGN_OR_RETURN(float* ds, f.Upload(sent));
    TERSE_RETURN_IF_ERROR(ops->MomentumAccumulate(s, 0.9f, du, dg, d));
    TERSE_RETURN_IF_ERROR(ops->ClearWhereSent(s, ds, du, d));
    std::vector<float> u = u0, g = g0;
    for (int64_t i = 0; i < d; ++i) {
      u[i] = 0.9f * u[i] + g[i];
      g[i] = u[i];
      if (sent[i] != 0.0f) u[i] = 0.0f;
    }
    TERSE_ASSIGN_OR_RETURN(std::vector<float> got_u, f.Download(du, d));
    TERSE_ASSIGN_OR_RETURN(std::vector<float> got_g, f.Download(dg, d));
    TERSE_RETURN_IF_ERROR(SameBits(got_u, u, "MomentumAccumulate+Clear: u"));
    TERSE_RETURN_IF_ERROR(SameBits(got_g, g, "MomentumAccumulate: g"));
  }
  {  // ThresholdSearch (RedSync) and SelectAtLeast (threshold).
    const int64_t n = 20000, k = 200;
    const std::vector<float> xs = Values(n, 5);
    kernels::ThresholdSearchOptions opt;
    TERSE_ASSIGN_OR_RETURN(float* dx, f.Upload(xs));
    TERSE_ASSIGN_OR_RETURN(uint32_t * di,
                           f.Upload(std::vector<uint32_t>(2 * k, 0)));
    TERSE_ASSIGN_OR_RETURN(int64_t count,
                           ops->ThresholdSearch(s, dx, n, k, opt, di));
    std::vector<uint32_t> want;
    kernels::ThresholdSearch(xs.data(), n, k, opt, &want);
    TERSE_ASSIGN_OR_RETURN(std::vector<uint32_t> got, f.Download(di, count));
    TERSE_RETURN_IF_ERROR(SameBits(got, want, "ThresholdSearch"));
    // A threshold at the 100th largest magnitude: about 100 qualify.
    std::vector<float> magnitudes(n);
    for (int64_t i = 0; i < n; ++i) magnitudes[i] = std::fabs(xs[i]);
    std::nth_element(magnitudes.begin(), magnitudes.begin() + 99,
                     magnitudes.end(), std::greater<float>());
    const uint32_t key = kernels::ThresholdKey(magnitudes[99]);
    std::vector<uint32_t> at_least;
    const int64_t qualify =
        kernels::SelectAtLeast(xs.data(), n, key, 2 * k, &at_least, 1);
    TERSE_ASSIGN_OR_RETURN(count, ops->SelectAtLeast(s, dx, n, key, 2 * k, di));
    if (count != qualify) {
      return absl::InternalError(absl::StrCat(
          "SelectAtLeast: ", count, " qualify, the CPU says ", qualify));
    }
    TERSE_ASSIGN_OR_RETURN(got, f.Download(di, count));
    TERSE_RETURN_IF_ERROR(SameBits(got, at_least, "SelectAtLeast"));
    // Over the cap: only the count.
    TERSE_ASSIGN_OR_RETURN(count, ops->SelectAtLeast(s, dx, n, key, 10, di));
    if (count != qualify) {
      return absl::InternalError(absl::StrCat(
          "SelectAtLeast over the cap: ", count, ", want ", qualify));
    }
  }
  for (int64_t block : {d, int64_t{64}, int64_t{1000}}) {  // EF-signSGD.
    const int64_t blocks = (d + block - 1) / block, bytes = (d + 7) / 8;
    TERSE_ASSIGN_OR_RETURN(float* dx, f.Upload(x));
    TERSE_ASSIGN_OR_RETURN(float* dscales,
                           f.Upload(std::vector<float>(blocks, -1)));
    TERSE_ASSIGN_OR_RETURN(uint8_t * dbits,
                           f.Upload(std::vector<uint8_t>(bytes, 0xff)));
    TERSE_RETURN_IF_ERROR(ops->SignEncode(s, dx, d, block, dscales, dbits));
    std::vector<float> scales(blocks);
    std::vector<uint8_t> bits(bytes, 0);
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t begin = b * block, end = std::min(d, begin + block);
      double sum = 0;
      for (int64_t i = begin; i < end; ++i) {
        sum += std::fabs(static_cast<double>(x[i]));
        if (std::signbit(x[i])) bits[i >> 3] |= uint8_t{1} << (i & 7);
      }
      scales[b] = static_cast<float>(sum / static_cast<double>(end - begin));
    }
    TERSE_ASSIGN_OR_RETURN(std::vector<float> gs, f.Download(dscales, blocks));
    TERSE_ASSIGN_OR_RETURN(std::vector<uint8_t> gb, f.Download(dbits, bytes));
    const std::string what = absl::StrCat("SignEncode block ", block);
    TERSE_RETURN_IF_ERROR(SameBits(gs, scales, what + " scales"));
    TERSE_RETURN_IF_ERROR(SameBits(gb, bits, what + " bits"));
    TERSE_ASSIGN_OR_RETURN(float* dy, f.Upload(y0));
    TERSE_RETURN_IF_ERROR(ops->SignDecodeAdd(s, dscales, dbits, d, block, dy));
    std::vector<float> want = y0;
    for (int64_t i = 0; i < d; ++i) {
      want[i] += ((bits[i >> 3] >> (i & 7)) & 1) ? -scales[i / block]
                                                 : scales[i / block];
    }
    TERSE_ASSIGN_OR_RETURN(std::vector<float> gy, f.Download(dy, d));
    TERSE_RETURN_IF_ERROR(SameBits(gy, want, "SignDecodeAdd"));
  }
  for (double cf : {4.0, 8.0, 16.0}) {  // QSGD against the CPU compressor.
    const int64_t n = 5000;  // Not a multiple of the 512-element bucket.
    CompressorOptions options;
    std::unique_ptr<Compressor> qsgd = MakeQsgdCompressor(cf, options);
    CompressContext ctx;
    ctx.seed = 7;
    ctx.step = 3;
    ctx.stream = 11;
    ctx.rank = 1;
    Payload payload;
    TERSE_RETURN_IF_ERROR(qsgd->Compress(x, ctx, &payload));
    const int levels = QsgdLevels(cf, options);
    const int64_t bucket = options.qsgd_bucket_size;
    const int64_t buckets = (n + bucket - 1) / bucket;
    const int bits = qsgd_bits::CodeBits(levels);
    const uint64_t base = kernels::MixSeed(
        kernels::MixSeed(ctx.seed, ctx.step, ctx.stream), ctx.rank);
    std::vector<uint64_t> seeds(buckets);
    for (int64_t b = 0; b < buckets; ++b) {
      seeds[b] = kernels::MixSeed(base, static_cast<uint64_t>(b));
    }
    TERSE_ASSIGN_OR_RETURN(float* dx, f.Upload(x));
    TERSE_ASSIGN_OR_RETURN(uint64_t * dseeds, f.Upload(seeds));
    TERSE_ASSIGN_OR_RETURN(float* dnorms,
                           f.Upload(std::vector<float>(buckets, 0)));
    const int64_t words = qsgd_bits::PackedWords(n, bits);
    TERSE_ASSIGN_OR_RETURN(uint8_t * dcodes,
                           f.Upload(std::vector<uint8_t>(words * 4, 0)));
    TERSE_RETURN_IF_ERROR(
        ops->QsgdEncode(s, dx, n, bucket, levels, dseeds, dnorms, dcodes));
    const uint8_t* body = payload.bytes.data() + kPayloadHeaderBytes + 8;
    std::vector<float> want_norms(buckets);
    std::memcpy(want_norms.data(), body, buckets * 4);
    const int64_t packed = qsgd_bits::PackedBytes(n, bits);
    std::vector<uint8_t> want_codes(body + buckets * 4,
                                    body + buckets * 4 + packed);
    TERSE_ASSIGN_OR_RETURN(std::vector<float> gn, f.Download(dnorms, buckets));
    TERSE_ASSIGN_OR_RETURN(std::vector<uint8_t> gc, f.Download(dcodes, packed));
    const std::string what = absl::StrCat("QsgdEncode cf ", cf);
    TERSE_RETURN_IF_ERROR(SameBits(gn, want_norms, what + " norms"));
    TERSE_RETURN_IF_ERROR(SameBits(gc, want_codes, what + " codes"));
    // Decode: the CPU compressor's AccumulateInto.
    TERSE_ASSIGN_OR_RETURN(float* dy, f.Upload(y0));
    TERSE_RETURN_IF_ERROR(
        ops->QsgdDecodeAdd(s, dnorms, dcodes, n, bucket, levels, dy));
    std::vector<float> want = y0;
    TERSE_RETURN_IF_ERROR(
        qsgd->AccumulateInto(payload.bytes, absl::MakeSpan(want)));
    TERSE_ASSIGN_OR_RETURN(std::vector<float> gy, f.Download(dy, n));
    TERSE_RETURN_IF_ERROR(SameBits(gy, want, "QsgdDecodeAdd"));
  }
  {  // PowerSGD's products on a 300 x 170 matrix at rank 3.
    using RowMat =
        Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    using Map = Eigen::Map<RowMat>;
    using ConstMap = Eigen::Map<const RowMat>;
    const int64_t rows = 300, cols = 170, r = 3;
    const std::vector<float> m = Values(rows * cols, 5),
                             q = Values(cols * r, 9),
                             pin = Values(rows * r, 13);
    TERSE_ASSIGN_OR_RETURN(float* dm, f.Upload(m));
    TERSE_ASSIGN_OR_RETURN(float* dq, f.Upload(q));
    TERSE_ASSIGN_OR_RETURN(float* dpin, f.Upload(pin));
    TERSE_ASSIGN_OR_RETURN(float* dp,
                           f.Upload(std::vector<float>(rows * r, 0)));
    TERSE_ASSIGN_OR_RETURN(float* dq2,
                           f.Upload(std::vector<float>(cols * r, 0)));
    TERSE_ASSIGN_OR_RETURN(float* dacc, f.Upload(m));
    TERSE_RETURN_IF_ERROR(ops->MatMul(s, dm, dq, dp, rows, cols, r));
    TERSE_RETURN_IF_ERROR(
        ops->MatMulTransposed(s, dm, dpin, dq2, rows, cols, r));
    TERSE_RETURN_IF_ERROR(
        ops->AddOuterProduct(s, dpin, dq, dacc, rows, cols, r));
    std::vector<float> p(rows * r), q2(cols * r), acc = m;
    Map(p.data(), rows, r).noalias() =
        ConstMap(m.data(), rows, cols) * ConstMap(q.data(), cols, r);
    Map(q2.data(), cols, r).noalias() =
        ConstMap(m.data(), rows, cols).transpose() *
        ConstMap(pin.data(), rows, r);
    Map(acc.data(), rows, cols).noalias() +=
        ConstMap(pin.data(), rows, r) * ConstMap(q.data(), cols, r).transpose();
    TERSE_ASSIGN_OR_RETURN(std::vector<float> gp, f.Download(dp, rows * r));
    TERSE_ASSIGN_OR_RETURN(std::vector<float> gq, f.Download(dq2, cols * r));
    TERSE_ASSIGN_OR_RETURN(std::vector<float> ga,
                           f.Download(dacc, rows * cols));
    if (exact_norm) {
      TERSE_RETURN_IF_ERROR(SameBits(gp, p, "MatMul"));
      TERSE_RETURN_IF_ERROR(SameBits(gq, q2, "MatMulTransposed"));
      TERSE_RETURN_IF_ERROR(SameBits(ga, acc, "AddOuterProduct"));
    }
    // Against an fp64 oracle (both paths; CUDA is not bitwise the CPU's).
    auto near = [](const std::vector<float>& got,
                   const std::vector<double>& want,
                   const std::vector<double>& scale,
                   const std::string& what) -> absl::Status {
      for (size_t i = 0; i < got.size(); ++i) {
        if (!(std::abs(got[i] - want[i]) <= 1e-5 * scale[i] + 1e-30)) {
          return absl::InternalError(absl::StrCat(what, "[", i, "]: device ",
                                                  got[i], ", fp64 ", want[i]));
        }
      }
      return absl::OkStatus();
    };
    std::vector<double> wp(rows * r, 0), sp(rows * r, 0);
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t c = 0; c < r; ++c) {
        for (int64_t j = 0; j < cols; ++j) {
          const double t = static_cast<double>(m[i * cols + j]) * q[j * r + c];
          wp[i * r + c] += t;
          sp[i * r + c] += std::abs(t);
        }
      }
    }
    TERSE_RETURN_IF_ERROR(near(gp, wp, sp, "MatMul vs fp64"));
    std::vector<double> wq(cols * r, 0), sq(cols * r, 0);
    for (int64_t j = 0; j < cols; ++j) {
      for (int64_t c = 0; c < r; ++c) {
        for (int64_t i = 0; i < rows; ++i) {
          const double t =
              static_cast<double>(m[i * cols + j]) * pin[i * r + c];
          wq[j * r + c] += t;
          sq[j * r + c] += std::abs(t);
        }
      }
    }
    TERSE_RETURN_IF_ERROR(near(gq, wq, sq, "MatMulTransposed vs fp64"));
    std::vector<double> wa(rows * cols), sa(rows * cols);
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        double sum = m[i * cols + j], mag = std::abs(m[i * cols + j]);
        for (int64_t c = 0; c < r; ++c) {
          const double t = static_cast<double>(pin[i * r + c]) * q[j * r + c];
          sum += t;
          mag += std::abs(t);
        }
        wa[i * cols + j] = sum;
        sa[i * cols + j] = mag;
      }
    }
    TERSE_RETURN_IF_ERROR(near(ga, wa, sa, "AddOuterProduct vs fp64"));
  }
  return absl::OkStatus();
}

}  // namespace testing
}  // namespace terse
