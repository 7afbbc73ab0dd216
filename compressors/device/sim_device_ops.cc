#include "compressors/device/sim_device_ops.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/half.h"
#include "common/status.h"
#include "compressors/device/qsgd_bits.h"
#include "compressors/kernels/count_sketch.h"
#include "compressors/kernels/fixed_order_sum.h"
#include "compressors/kernels/randomk.h"
#include "compressors/kernels/sparse_ops.h"
#include "compressors/kernels/topk.h"
#include "compressors/powersgd_plan.h"

namespace terse {
namespace {

absl::Status CheckHalfType(DataType type, const char* op) {
  if (type == DataType::kFloat16 || type == DataType::kBFloat16) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": type ", DataTypeName(type), " is not float16 or bfloat16"));
}

using RowMat =
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatMap = Eigen::Map<RowMat>;
using ConstMatMap = Eigen::Map<const RowMat>;

absl::Status CheckDims(int64_t rows, int64_t cols, int64_t r, const char* op) {
  if (rows >= 0 && cols >= 0 && r >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(op, ": dimensions ", rows, " x ", cols, ", rank ", r));
}

}  // namespace

absl::Status SimDeviceOps::SignEncode(Stream* stream, const float* x, int64_t d,
                                      int64_t block, float* scales,
                                      uint8_t* bits) {
  if (d < 0 || block < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("SignEncode: d = ", d, ", block = ", block));
  }
  const int64_t blocks = (d + block - 1) / block;
  TERSE_RETURN_IF_ERROR(Check(x, d * 4, "SignEncode: x"));
  TERSE_RETURN_IF_ERROR(Check(scales, blocks * 4, "SignEncode: scales"));
  TERSE_RETURN_IF_ERROR(Check(bits, (d + 7) / 8, "SignEncode: bits"));
  return stream->LaunchHost([x, d, block, blocks, scales, bits] {
    std::fill(bits, bits + (d + 7) / 8, 0);
    for (int64_t i = 0; i < d; ++i) {
      if (std::signbit(x[i])) bits[i >> 3] |= uint8_t{1} << (i & 7);
    }
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t begin = b * block, end = std::min(d, begin + block);
      const double sum = kernels::FixedOrderSum(end - begin, [&](int64_t i) {
        return std::fabs(static_cast<double>(x[begin + i]));
      });
      scales[b] = static_cast<float>(sum / static_cast<double>(end - begin));
    }
  });
}

absl::Status SimDeviceOps::SignDecodeAdd(Stream* stream, const float* scales,
                                         const uint8_t* bits, int64_t d,
                                         int64_t block, float* dense) {
  if (d < 0 || block < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("SignDecodeAdd: d = ", d, ", block = ", block));
  }
  const int64_t blocks = (d + block - 1) / block;
  TERSE_RETURN_IF_ERROR(Check(scales, blocks * 4, "SignDecodeAdd: scales"));
  TERSE_RETURN_IF_ERROR(Check(bits, (d + 7) / 8, "SignDecodeAdd: bits"));
  TERSE_RETURN_IF_ERROR(Check(dense, d * 4, "SignDecodeAdd: dense"));
  return stream->LaunchHost([scales, bits, d, block, dense] {
    for (int64_t i = 0; i < d; ++i) {
      const float scale = scales[i / block];
      dense[i] += ((bits[i >> 3] >> (i & 7)) & 1) ? -scale : scale;
    }
  });
}

absl::Status SimDeviceOps::QsgdEncode(Stream* stream, const float* x, int64_t d,
                                      int64_t bucket, int levels,
                                      const uint64_t* seeds, float* norms,
                                      uint8_t* codes) {
  if (d < 0 || bucket < 1 || levels < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "QsgdEncode: d = ", d, ", bucket = ", bucket, ", levels = ", levels));
  }
  const int bits = qsgd_bits::CodeBits(levels);
  const int64_t buckets = (d + bucket - 1) / bucket;
  TERSE_RETURN_IF_ERROR(Check(x, d * 4, "QsgdEncode: x"));
  TERSE_RETURN_IF_ERROR(Check(seeds, buckets * 8, "QsgdEncode: seeds"));
  TERSE_RETURN_IF_ERROR(Check(norms, buckets * 4, "QsgdEncode: norms"));
  TERSE_RETURN_IF_ERROR(
      Check(codes, qsgd_bits::PackedWords(d, bits) * 4, "QsgdEncode: codes"));
  return stream->LaunchHost([=] {
    uint64_t bit_pos = 0;
    for (int64_t b = 0; b < buckets; ++b) {
      const int64_t begin = b * bucket, end = std::min(d, begin + bucket);
      const double sq = kernels::FixedOrderSum(end - begin, [&](int64_t i) {
        const double v = x[begin + i];
        return v * v;
      });
      const float norm = static_cast<float>(std::sqrt(sq));
      norms[b] = norm;
      const bool usable = std::isfinite(norm) && norm > 0;
      const double scale = usable ? levels / static_cast<double>(norm) : 0;
      uint64_t state = seeds[b];
      uint64_t random = 0;
      for (int64_t i = begin; i < end; ++i, bit_pos += bits) {
        if (((i - begin) & 1) == 0) random = kernels::SplitMix64(&state);
        const uint32_t draw =
            static_cast<uint32_t>(((i - begin) & 1) ? random >> 32 : random);
        uint32_t level = 0;
        const double a = std::fabs(static_cast<double>(x[i])) * scale;
        if (usable && a > 0) {
          const double floor_a = std::floor(a);
          level = static_cast<uint32_t>(std::min<double>(floor_a, levels));
          if (draw * (1.0 / 4294967296.0) < a - floor_a) ++level;
          level = std::min<uint32_t>(level, levels);
        }
        const uint32_t code = (level << 1) | (std::signbit(x[i]) ? 1u : 0u);
        for (int done = 0; done < bits;) {
          const int bit = static_cast<int>((bit_pos + done) & 7);
          const int take = std::min(8 - bit, bits - done);
          codes[(bit_pos + done) >> 3] |= static_cast<uint8_t>(
              ((code >> done) & ((1u << take) - 1)) << bit);
          done += take;
        }
      }
    }
  });
}

absl::Status SimDeviceOps::CheckQsgdCodes(Stream* stream, const uint8_t* codes,
                                          int64_t d, int levels,
                                          uint32_t* bad) {
  if (d < 0 || levels < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("CheckQsgdCodes: d = ", d, ", levels = ", levels));
  }
  const int bits = qsgd_bits::CodeBits(levels);
  TERSE_RETURN_IF_ERROR(
      Check(codes, qsgd_bits::PackedBytes(d, bits), "CheckQsgdCodes: codes"));
  TERSE_RETURN_IF_ERROR(Check(bad, 4, "CheckQsgdCodes: bad"));
  return stream->LaunchHost([=] {
    uint32_t found = 0;
    for (int64_t i = 0; i < d; ++i) {
      const uint32_t code = qsgd_bits::CodeAt(codes, i, bits);
      if ((code >> 1) > static_cast<uint32_t>(levels)) found = 1;
    }
    *bad = found;
  });
}

absl::Status SimDeviceOps::QsgdDecodeAdd(Stream* stream, const float* norms,
                                         const uint8_t* codes, int64_t d,
                                         int64_t bucket, int levels,
                                         float* dense) {
  if (d < 0 || bucket < 1 || levels < 1) {
    return absl::InvalidArgumentError(absl::StrCat("QsgdDecodeAdd: d = ", d,
                                                   ", bucket = ", bucket,
                                                   ", levels = ", levels));
  }
  const int bits = qsgd_bits::CodeBits(levels);
  const int64_t buckets = (d + bucket - 1) / bucket;
  TERSE_RETURN_IF_ERROR(Check(norms, buckets * 4, "QsgdDecodeAdd: norms"));
  TERSE_RETURN_IF_ERROR(
      Check(codes, qsgd_bits::PackedBytes(d, bits), "QsgdDecodeAdd: codes"));
  TERSE_RETURN_IF_ERROR(Check(dense, d * 4, "QsgdDecodeAdd: dense"));
  return stream->LaunchHost([=] {
    for (int64_t i = 0; i < d; ++i) {
      const uint32_t code = qsgd_bits::CodeAt(codes, i, bits);
      const float unit = norms[i / bucket] / static_cast<float>(levels);
      const float v = unit * static_cast<float>(code >> 1);
      dense[i] += (code & 1u) ? -v : v;
    }
  });
}

absl::Status SimDeviceOps::MatMul(Stream* stream, const float* m,
                                  const float* q, float* p, int64_t rows,
                                  int64_t cols, int64_t r) {
  TERSE_RETURN_IF_ERROR(CheckDims(rows, cols, r, "MatMul"));
  TERSE_RETURN_IF_ERROR(Check(m, rows * cols * 4, "MatMul: m"));
  TERSE_RETURN_IF_ERROR(Check(q, cols * r * 4, "MatMul: q"));
  TERSE_RETURN_IF_ERROR(Check(p, rows * r * 4, "MatMul: p"));
  return stream->LaunchHost([m, q, p, rows, cols, r] {
    MatMap(p, rows, r).noalias() =
        ConstMatMap(m, rows, cols) * ConstMatMap(q, cols, r);
  });
}

absl::Status SimDeviceOps::MatMulTransposed(Stream* stream, const float* m,
                                            const float* p, float* q,
                                            int64_t rows, int64_t cols,
                                            int64_t r) {
  TERSE_RETURN_IF_ERROR(CheckDims(rows, cols, r, "MatMulTransposed"));
  TERSE_RETURN_IF_ERROR(Check(m, rows * cols * 4, "MatMulTransposed: m"));
  TERSE_RETURN_IF_ERROR(Check(p, rows * r * 4, "MatMulTransposed: p"));
  TERSE_RETURN_IF_ERROR(Check(q, cols * r * 4, "MatMulTransposed: q"));
  return stream->LaunchHost([m, p, q, rows, cols, r] {
    MatMap(q, cols, r).noalias() =
        ConstMatMap(m, rows, cols).transpose() * ConstMatMap(p, rows, r);
  });
}

absl::Status SimDeviceOps::AddOuterProduct(Stream* stream, const float* p,
                                           const float* q, float* m,
                                           int64_t rows, int64_t cols,
                                           int64_t r) {
  TERSE_RETURN_IF_ERROR(CheckDims(rows, cols, r, "AddOuterProduct"));
  TERSE_RETURN_IF_ERROR(Check(p, rows * r * 4, "AddOuterProduct: p"));
  TERSE_RETURN_IF_ERROR(Check(q, cols * r * 4, "AddOuterProduct: q"));
  TERSE_RETURN_IF_ERROR(Check(m, rows * cols * 4, "AddOuterProduct: m"));
  return stream->LaunchHost([p, q, m, rows, cols, r] {
    MatMap(m, rows, cols).noalias() +=
        ConstMatMap(p, rows, r) * ConstMatMap(q, cols, r).transpose();
  });
}

absl::Status SimDeviceOps::OrthonormalizeColumns(Stream* stream, float* p,
                                                 int64_t rows, int64_t r) {
  TERSE_RETURN_IF_ERROR(CheckDims(rows, 0, r, "OrthonormalizeColumns"));
  TERSE_RETURN_IF_ERROR(Check(p, rows * r * 4, "OrthonormalizeColumns: p"));
  // The CPU compressor's function itself, so the result is its bit for
  // bit; the double scratch is the call's own (the ops hold no state).
  return stream->LaunchHost([p, rows, r] {
    std::vector<double> basis;
    ::terse::OrthonormalizeColumns(rows, r, p, &basis);
  });
}

absl::Status SimDeviceOps::Check(const void* ptr, int64_t bytes,
                                 const char* what) {
  return runtime_->CheckDeviceMemory(ptr, bytes, ordinal_, what);
}

absl::Status SimDeviceOps::Add(Stream* stream, const float* x, float* y,
                               int64_t n) {
  TERSE_RETURN_IF_ERROR(Check(x, n * 4, "Add: x"));
  TERSE_RETURN_IF_ERROR(Check(y, n * 4, "Add: y"));
  return stream->LaunchHost([x, y, n] {
    for (int64_t i = 0; i < n; ++i) y[i] += x[i];
  });
}

absl::Status SimDeviceOps::MomentumAccumulate(Stream* stream, float m, float* u,
                                              float* g, int64_t n) {
  TERSE_RETURN_IF_ERROR(Check(u, n * 4, "MomentumAccumulate: u"));
  TERSE_RETURN_IF_ERROR(Check(g, n * 4, "MomentumAccumulate: g"));
  return stream->LaunchHost([m, u, g, n] {
    for (int64_t i = 0; i < n; ++i) {
      u[i] = m * u[i] + g[i];
      g[i] = u[i];
    }
  });
}

absl::Status SimDeviceOps::ClearWhereSent(Stream* stream, const float* sent,
                                          float* x, int64_t n) {
  TERSE_RETURN_IF_ERROR(Check(sent, n * 4, "ClearWhereSent: sent"));
  TERSE_RETURN_IF_ERROR(Check(x, n * 4, "ClearWhereSent: x"));
  return stream->LaunchHost([sent, x, n] {
    for (int64_t i = 0; i < n; ++i) {
      if (sent[i] != 0.0f) x[i] = 0.0f;
    }
  });
}

absl::Status SimDeviceOps::Subtract(Stream* stream, const float* x,
                                    const float* y, float* out, int64_t n) {
  TERSE_RETURN_IF_ERROR(Check(x, n * 4, "Subtract: x"));
  TERSE_RETURN_IF_ERROR(Check(y, n * 4, "Subtract: y"));
  TERSE_RETURN_IF_ERROR(Check(out, n * 4, "Subtract: out"));
  return stream->LaunchHost([x, y, out, n] {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] - y[i];
  });
}

absl::Status SimDeviceOps::CastToHalf(Stream* stream, const float* x,
                                      uint16_t* out, int64_t n, DataType type) {
  TERSE_RETURN_IF_ERROR(CheckHalfType(type, "CastToHalf"));
  TERSE_RETURN_IF_ERROR(Check(x, n * 4, "CastToHalf: x"));
  TERSE_RETURN_IF_ERROR(Check(out, n * 2, "CastToHalf: out"));
  return stream->LaunchHost([x, out, n, type] {
    if (type == DataType::kFloat16) {
      FloatToHalf(x, out, static_cast<size_t>(n));
    } else {
      FloatToBFloat16(x, out, static_cast<size_t>(n));
    }
  });
}

absl::Status SimDeviceOps::AccumulateHalf(Stream* stream, const uint16_t* h,
                                          float* y, int64_t n, DataType type) {
  TERSE_RETURN_IF_ERROR(CheckHalfType(type, "AccumulateHalf"));
  TERSE_RETURN_IF_ERROR(Check(h, n * 2, "AccumulateHalf: h"));
  TERSE_RETURN_IF_ERROR(Check(y, n * 4, "AccumulateHalf: y"));
  return stream->LaunchHost([h, y, n, type] {
    for (int64_t i = 0; i < n; ++i) {
      y[i] += type == DataType::kFloat16 ? HalfToFloat(h[i])
                                         : BFloat16ToFloat(h[i]);
    }
  });
}

absl::Status SimDeviceOps::SquaredNorm(Stream* stream, const float* x,
                                       int64_t n, double* out) {
  TERSE_RETURN_IF_ERROR(Check(x, n * 4, "SquaredNorm: x"));
  TERSE_RETURN_IF_ERROR(Check(out, sizeof(double), "SquaredNorm: out"));
  return stream->LaunchHost([x, n, out] {
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
    *out = sum;
  });
}

absl::Status SimDeviceOps::TopK(Stream* stream, const float* x, int64_t d,
                                int64_t k, uint32_t* indices) {
  if (k < 0 || k > d || d >= (int64_t{1} << 32)) {
    return absl::InvalidArgumentError(
        absl::StrCat("TopK: k = ", k, " of d = ", d));
  }
  TERSE_RETURN_IF_ERROR(Check(x, d * 4, "TopK: x"));
  TERSE_RETURN_IF_ERROR(Check(indices, k * 4, "TopK: indices"));
  return stream->LaunchHost(
      [x, d, k, indices] { kernels::TopK(x, d, k, indices, 1); });
}

absl::StatusOr<int64_t> SimDeviceOps::SampledTopK(
    Stream* stream, const float* x, int64_t d, int64_t k,
    const kernels::SampledTopKOptions& options, uint32_t* indices) {
  if (k < 0 || k > d || d >= (int64_t{1} << 32)) {
    return absl::InvalidArgumentError(
        absl::StrCat("SampledTopK: k = ", k, " of d = ", d));
  }
  TERSE_RETURN_IF_ERROR(Check(x, d * 4, "SampledTopK: x"));
  TERSE_RETURN_IF_ERROR(Check(indices, k * 4, "SampledTopK: indices"));
  auto count = std::make_shared<int64_t>(0);
  kernels::SampledTopKOptions opt = options;
  opt.num_threads = 1;
  TERSE_RETURN_IF_ERROR(stream->LaunchHost([x, d, k, opt, indices, count] {
    std::vector<uint32_t> picked;
    kernels::SampledTopK(x, d, k, opt, &picked);
    const int64_t n = static_cast<int64_t>(picked.size());
    for (int64_t i = 0; i < n && i < k; ++i) indices[i] = picked[i];
    *count = n;
  }));
  TERSE_RETURN_IF_ERROR(stream->Synchronize());
  if (*count > k) {
    return absl::InternalError(absl::StrCat("SampledTopK: selected ", *count,
                                            " entries, more than k = ", k));
  }
  return *count;
}

absl::StatusOr<int64_t> SimDeviceOps::ThresholdSearch(
    Stream* stream, const float* x, int64_t d, int64_t k,
    const kernels::ThresholdSearchOptions& options, uint32_t* indices) {
  if (k < 0 || k > d || d >= (int64_t{1} << 32)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ThresholdSearch: k = ", k, " of d = ", d));
  }
  const int64_t room = std::max<int64_t>(k, 2 * k - 1);
  TERSE_RETURN_IF_ERROR(Check(x, d * 4, "ThresholdSearch: x"));
  TERSE_RETURN_IF_ERROR(Check(indices, room * 4, "ThresholdSearch: indices"));
  auto count = std::make_shared<int64_t>(0);
  kernels::ThresholdSearchOptions opt = options;
  opt.num_threads = 1;
  TERSE_RETURN_IF_ERROR(
      stream->LaunchHost([x, d, k, opt, indices, room, count] {
        std::vector<uint32_t> picked;
        kernels::ThresholdSearch(x, d, k, opt, &picked);
        const int64_t n = static_cast<int64_t>(picked.size());
        for (int64_t i = 0; i < n && i < room; ++i) indices[i] = picked[i];
        *count = n;
      }));
  TERSE_RETURN_IF_ERROR(stream->Synchronize());
  if (*count > room) {
    return absl::InternalError(absl::StrCat(
        "ThresholdSearch: selected ", *count, " entries, room for ", room));
  }
  return *count;
}

absl::StatusOr<int64_t> SimDeviceOps::SelectAtLeast(Stream* stream,
                                                    const float* x, int64_t d,
                                                    uint32_t key, int64_t cap,
                                                    uint32_t* indices) {
  if (cap < 0 || d < 0 || d >= (int64_t{1} << 32)) {
    return absl::InvalidArgumentError(
        absl::StrCat("SelectAtLeast: cap = ", cap, " of d = ", d));
  }
  TERSE_RETURN_IF_ERROR(Check(x, d * 4, "SelectAtLeast: x"));
  TERSE_RETURN_IF_ERROR(Check(indices, cap * 4, "SelectAtLeast: indices"));
  auto count = std::make_shared<int64_t>(0);
  TERSE_RETURN_IF_ERROR(stream->LaunchHost([x, d, key, cap, indices, count] {
    std::vector<uint32_t> picked;
    *count = kernels::SelectAtLeast(x, d, key, cap, &picked, 1);
    for (size_t i = 0; i < picked.size(); ++i) indices[i] = picked[i];
  }));
  TERSE_RETURN_IF_ERROR(stream->Synchronize());
  return *count;
}

absl::Status SimDeviceOps::Gather(Stream* stream, const float* dense,
                                  const uint32_t* indices, int64_t k,
                                  float* values) {
  TERSE_RETURN_IF_ERROR(Check(indices, k * 4, "Gather: indices"));
  TERSE_RETURN_IF_ERROR(Check(values, k * 4, "Gather: values"));
  TERSE_RETURN_IF_ERROR(Check(dense, 0, "Gather: dense"));
  return stream->LaunchHost([dense, indices, k, values] {
    kernels::Gather(dense, indices, k, values);
  });
}

absl::Status SimDeviceOps::ScatterAdd(Stream* stream, const uint32_t* indices,
                                      const float* values, int64_t k,
                                      float* dense) {
  TERSE_RETURN_IF_ERROR(Check(indices, k * 4, "ScatterAdd: indices"));
  TERSE_RETURN_IF_ERROR(Check(values, k * 4, "ScatterAdd: values"));
  TERSE_RETURN_IF_ERROR(Check(dense, 0, "ScatterAdd: dense"));
  return stream->LaunchHost([indices, values, k, dense] {
    kernels::ScatterAdd(indices, values, k, dense);
  });
}

absl::Status SimDeviceOps::CheckSparseIndices(Stream* stream,
                                              const uint32_t* indices,
                                              int64_t k, uint64_t d,
                                              uint32_t* bad) {
  TERSE_RETURN_IF_ERROR(Check(indices, k * 4, "CheckSparseIndices: indices"));
  TERSE_RETURN_IF_ERROR(Check(bad, 4, "CheckSparseIndices: bad"));
  return stream->LaunchHost([indices, k, d, bad] {
    uint32_t found = 0;
    for (int64_t j = 0; j < k; ++j) {
      if (indices[j] >= d || (j > 0 && indices[j] <= indices[j - 1])) {
        found = 1;
      }
    }
    *bad = found;
  });
}

absl::Status SimDeviceOps::CountSketch(Stream* stream, const float* x,
                                       int64_t n, uint64_t seed, double* sketch,
                                       int64_t buckets, void* scratch) {
  if (n < 0 || buckets < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("CountSketch: n = ", n, ", buckets = ", buckets));
  }
  if (reinterpret_cast<uintptr_t>(scratch) % 8 != 0) {
    return absl::InvalidArgumentError("CountSketch: scratch is not aligned");
  }
  TERSE_RETURN_IF_ERROR(Check(x, n * 4, "CountSketch: x"));
  TERSE_RETURN_IF_ERROR(Check(sketch, buckets * 8, "CountSketch: sketch"));
  // Checked (CUDA's contract) though the CPU kernel needs none of it.
  TERSE_RETURN_IF_ERROR(Check(scratch, CountSketchScratchBytes(buckets),
                              "CountSketch: scratch"));
  return stream->LaunchHost([x, n, seed, sketch, buckets] {
    kernels::AddCountSketch(seed, 0, absl::MakeConstSpan(x, n),
                            absl::MakeSpan(sketch, buckets));
  });
}

}  // namespace terse
