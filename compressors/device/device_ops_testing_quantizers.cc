// device_ops_testing's checks of EF-signSGD and QSGD on a device against
// the CPU compressors (see device_ops_testing_internal.h), and the inputs
// that tell their fixed summation order from others.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "compressors/compressor.h"
#include "compressors/device/device_ops.h"
#include "compressors/device/device_ops_testing.h"
#include "compressors/device/device_ops_testing_internal.h"
#include "compressors/device/qsgd_bits.h"
#include "compressors/efsignsgd_compressor.h"
#include "compressors/kernels/fixed_order_sum.h"
#include "compressors/kernels/randomk.h"
#include "compressors/options.h"
#include "compressors/payload.h"
#include "compressors/qsgd_compressor.h"

namespace terse {
namespace testing {
namespace device_ops_testing_internal {
namespace {

// OK when `x` as one block tells FixedOrderSum from the index order (for a
// stride-1 input) or from each round of eight chunks summed on its own
// (a CUDA thread block that combined per round): the device checks on it
// would catch either.
absl::Status CheckOrderSensitive(const std::vector<float>& x, bool squares) {
  const int64_t n = static_cast<int64_t>(x.size());
  auto term = [&](int64_t i) {
    const double v = x[i];
    return squares ? v * v : std::fabs(v);
  };
  auto result = [&](double sum) {
    return squares ? static_cast<float>(std::sqrt(sum))
                   : static_cast<float>(sum / static_cast<double>(n));
  };
  double other = 0;
  if (n <= kernels::kFixedSumChunk) {
    for (int64_t i = 0; i < n; ++i) other += term(i);
  } else {
    const int64_t round = 8 * kernels::kFixedSumChunk;
    for (int64_t r = 0; r < n; r += round) {
      other += kernels::FixedOrderSum(std::min(round, n - r),
                                      [&](int64_t i) { return term(r + i); });
    }
  }
  if (result(kernels::FixedOrderSum(n, term)) != result(other)) {
    return absl::OkStatus();
  }
  return absl::InternalError(absl::StrCat("order-sensitive input of ", n,
                                          " is not: its checks prove nothing"));
}

// SignEncode and SignDecodeAdd against the CPU compressor's payload and
// AccumulateInto, for sign_block_size `option` (0: the whole input).
absl::Status CheckSign(Fixture* f, const std::vector<float>& x, int64_t option,
                       const std::vector<float>& y0) {
  const int64_t d = static_cast<int64_t>(x.size());
  CompressorOptions options;
  options.sign_block_size = option;
  std::unique_ptr<Compressor> sign = MakeEfSignSgdCompressor(32, options);
  Payload payload;
  TERSE_RETURN_IF_ERROR(sign->Compress(x, {}, &payload));
  const uint8_t* ext = payload.bytes.data() + kPayloadHeaderBytes;
  const int64_t block = static_cast<int64_t>(LoadLe<uint64_t>(ext));
  const int64_t blocks = (d + block - 1) / block, bytes = (d + 7) / 8;
  const uint8_t* body = ext + 8;
  std::vector<float> want_scales(blocks);
  std::memcpy(want_scales.data(), body, blocks * 4);
  const std::vector<uint8_t> want_bits(body + 4 * blocks,
                                       body + 4 * blocks + bytes);
  TERSE_ASSIGN_OR_RETURN(float* dx, f->Upload(x));
  TERSE_ASSIGN_OR_RETURN(float* dscales,
                         f->Upload(std::vector<float>(blocks, -1)));
  TERSE_ASSIGN_OR_RETURN(uint8_t * dbits,
                         f->Upload(std::vector<uint8_t>(bytes, 0xff)));
  TERSE_RETURN_IF_ERROR(
      f->ops()->SignEncode(f->stream(), dx, d, block, dscales, dbits));
  const std::string what = absl::StrCat("SignEncode d ", d, " block ", block);
  TERSE_ASSIGN_OR_RETURN(std::vector<float> gs, f->Download(dscales, blocks));
  TERSE_ASSIGN_OR_RETURN(std::vector<uint8_t> gb, f->Download(dbits, bytes));
  TERSE_RETURN_IF_ERROR(SameBitsOrNan(gs, want_scales, what + " scales"));
  TERSE_RETURN_IF_ERROR(SameBits(gb, want_bits, what + " bits"));
  std::vector<float> want(y0.begin(), y0.begin() + d);
  TERSE_ASSIGN_OR_RETURN(float* dy, f->Upload(want));
  TERSE_RETURN_IF_ERROR(
      sign->AccumulateInto(payload.bytes, absl::MakeSpan(want)));
  TERSE_RETURN_IF_ERROR(
      f->ops()->SignDecodeAdd(f->stream(), dscales, dbits, d, block, dy));
  TERSE_ASSIGN_OR_RETURN(std::vector<float> gy, f->Download(dy, d));
  return SameBitsOrNan(gy, want, what + " SignDecodeAdd");
}

// QsgdEncode and QsgdDecodeAdd against the CPU compressor's payload and
// AccumulateInto.
absl::Status CheckQsgd(Fixture* f, const std::vector<float>& x, double cf,
                       int64_t bucket, const std::vector<float>& y0) {
  const int64_t n = static_cast<int64_t>(x.size());
  CompressorOptions options;
  options.qsgd_bucket_size = bucket;
  std::unique_ptr<Compressor> qsgd = MakeQsgdCompressor(cf, options);
  CompressContext ctx;
  ctx.seed = 7;
  ctx.step = 3;
  ctx.stream = 11;
  ctx.rank = 1;
  Payload payload;
  TERSE_RETURN_IF_ERROR(qsgd->Compress(x, ctx, &payload));
  const int levels = QsgdLevels(cf, options);
  const int64_t buckets = (n + bucket - 1) / bucket;
  const int bits = qsgd_bits::CodeBits(levels);
  const uint64_t base = kernels::MixSeed(
      kernels::MixSeed(ctx.seed, ctx.step, ctx.stream), ctx.rank);
  std::vector<uint64_t> seeds(buckets);
  for (int64_t b = 0; b < buckets; ++b) {
    seeds[b] = kernels::MixSeed(base, static_cast<uint64_t>(b));
  }
  TERSE_ASSIGN_OR_RETURN(float* dx, f->Upload(x));
  TERSE_ASSIGN_OR_RETURN(uint64_t * dseeds, f->Upload(seeds));
  TERSE_ASSIGN_OR_RETURN(float* dnorms,
                         f->Upload(std::vector<float>(buckets, 0)));
  const int64_t words = qsgd_bits::PackedWords(n, bits);
  TERSE_ASSIGN_OR_RETURN(uint8_t * dcodes,
                         f->Upload(std::vector<uint8_t>(words * 4, 0)));
  TERSE_RETURN_IF_ERROR(f->ops()->QsgdEncode(f->stream(), dx, n, bucket, levels,
                                             dseeds, dnorms, dcodes));
  const uint8_t* body = payload.bytes.data() + kPayloadHeaderBytes + 8;
  std::vector<float> want_norms(buckets);
  std::memcpy(want_norms.data(), body, buckets * 4);
  const int64_t packed = qsgd_bits::PackedBytes(n, bits);
  const std::vector<uint8_t> want_codes(body + buckets * 4,
                                        body + buckets * 4 + packed);
  TERSE_ASSIGN_OR_RETURN(std::vector<float> gn, f->Download(dnorms, buckets));
  TERSE_ASSIGN_OR_RETURN(std::vector<uint8_t> gc, f->Download(dcodes, packed));
  const std::string what =
      absl::StrCat("QsgdEncode d ", n, " cf ", cf, " bucket ", bucket);
  TERSE_RETURN_IF_ERROR(SameBitsOrNan(gn, want_norms, what + " norms"));
  TERSE_RETURN_IF_ERROR(SameBits(gc, want_codes, what + " codes"));
  std::vector<float> want(y0.begin(), y0.begin() + n);
  TERSE_ASSIGN_OR_RETURN(float* dy, f->Upload(want));
  TERSE_RETURN_IF_ERROR(f->ops()->QsgdDecodeAdd(f->stream(), dnorms, dcodes, n,
                                                bucket, levels, dy));
  TERSE_RETURN_IF_ERROR(
      qsgd->AccumulateInto(payload.bytes, absl::MakeSpan(want)));
  TERSE_ASSIGN_OR_RETURN(std::vector<float> gy, f->Download(dy, n));
  return SameBitsOrNan(gy, want, what + " QsgdDecodeAdd");
}

}  // namespace

absl::Status CheckQuantizers(Fixture* f, const std::vector<float>& x,
                             const std::vector<float>& y0) {
  const int64_t kChunk = kernels::kFixedSumChunk;
  const std::vector<float> wide = WideValues(70001, 5);
  const std::vector<float> y_wide = Values(70001, 13);
  const std::vector<float> small(x.begin(), x.begin() + 5);
  for (int64_t block : {int64_t{0}, int64_t{1}, int64_t{64}, int64_t{1000},
                        kChunk, kChunk + 1}) {
    TERSE_RETURN_IF_ERROR(CheckSign(f, x, block, y0));
  }
  for (int64_t block : {int64_t{0}, int64_t{64}, int64_t{40000}}) {
    TERSE_RETURN_IF_ERROR(CheckSign(f, wide, block, y_wide));
  }
  TERSE_RETURN_IF_ERROR(CheckSign(f, small, 0, y0));
  TERSE_RETURN_IF_ERROR(CheckSign(f, small, 64, y0));
  TERSE_RETURN_IF_ERROR(CheckSign(f, NonFiniteValues(), 100, y0));
  for (int64_t stride : {int64_t{1}, kChunk}) {
    const std::vector<float> tie = OrderSensitiveValues(stride, false);
    TERSE_RETURN_IF_ERROR(CheckOrderSensitive(tie, false));
    TERSE_RETURN_IF_ERROR(CheckSign(f, tie, 0, y_wide));
  }
  for (double cf : {4.0, 8.0, 16.0}) {  // 5000: not a multiple of 512.
    TERSE_RETURN_IF_ERROR(CheckQsgd(f, x, cf, 512, y0));
  }
  for (int64_t bucket : {int64_t{512}, kChunk + 1, int64_t{40000}}) {
    TERSE_RETURN_IF_ERROR(CheckQsgd(f, wide, 8.0, bucket, y_wide));
  }
  TERSE_RETURN_IF_ERROR(CheckQsgd(f, small, 8.0, 512, y0));
  for (int64_t stride : {int64_t{1}, kChunk}) {
    const std::vector<float> tie = OrderSensitiveValues(stride, true);
    TERSE_RETURN_IF_ERROR(CheckOrderSensitive(tie, true));
    TERSE_RETURN_IF_ERROR(
        CheckQsgd(f, tie, 8.0, static_cast<int64_t>(tie.size()), y_wide));
  }
  return CheckQsgd(f, NonFiniteValues(), 8.0, 100, y0);
}

}  // namespace device_ops_testing_internal

std::vector<float> OrderSensitiveValues(int64_t stride, bool squares) {
  const int count = stride == 1 ? 32 : 16, tie = 1;
  std::vector<float> terms(count, std::ldexp(1.0f, squares ? -27 : -54));
  terms[0] = 1.0f;
  if (squares) {  // Squares 1 + 2^-23 + 2^-48 = (1 + 2^-24)^2.
    terms[tie] = terms[tie + 1] = std::ldexp(1.0f, -12);
    terms[tie + 2] = std::ldexp(1.0f, -24);
  } else {  // 1 + 2^-24: halfway between two floats.
    terms[tie] = std::ldexp(1.0f, -24);
  }
  std::vector<float> x(count * stride, 0.0f);
  for (int k = 0; k < count; ++k) x[k * stride] = terms[k];
  return x;
}

}  // namespace testing
}  // namespace terse
