#include "compressors/device/device_ops_testing.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/half.h"
#include "common/status.h"
#include "compressors/device/device_ops.h"
#include "compressors/device/device_ops_testing_internal.h"
#include "compressors/kernels/count_sketch.h"
#include "compressors/kernels/randomk.h"
#include "compressors/kernels/select.h"
#include "compressors/kernels/sparse_ops.h"
#include "compressors/kernels/topk.h"
#include "compressors/options.h"
#include "compressors/powersgd_plan.h"

namespace terse {
namespace testing {
namespace {

using namespace device_ops_testing_internal;  // NOLINT: own internals.

// DeviceOps::OrthonormalizeColumns against the CPU function (bitwise when
// `exact`, else within a float rounding: 1e-6 relative, exact zeros kept)
// and, for full-rank inputs, against an fp64 oracle: Eigen's Householder
// QR, its columns signed as Gram-Schmidt's (positive R diagonal), which the
// result must equal within 1e-6 with P^T P = I within 1e-6.
absl::Status CheckOrthonormalize(Fixture& f, bool exact) {
  struct Case {
    int64_t rows, r;
    std::vector<float> p;
    bool full_rank;
  };
  std::vector<Case> cases = {{1000, 4, Values(4000, 21), true},
                             {37, 1, Values(37, 23), true},
                             {3000, 4, Values(12000, 25), true},
                             {300, 3, Values(900, 13), true}};
  // Degenerate columns of 64 x 6, whose results are exact on both paths:
  // 3 e_0 (becomes e_0), 5 e_0 (vanishes exactly against it), zero, one
  // with an infinity and one with a NaN (zeroed), and one that loses only
  // its row 0 to e_0.
  const int64_t dr = 64, dc = 6;
  std::vector<float> degenerate(dr * dc, 0.0f);
  const std::vector<float> fill = Values(dr * dc, 27);
  for (int64_t i = 0; i < dr; ++i) {
    for (int64_t c = 3; c < dc; ++c) degenerate[i * dc + c] = fill[i * dc + c];
  }
  degenerate[0 * dc + 0] = 3.0f;
  degenerate[0 * dc + 1] = 5.0f;
  degenerate[5 * dc + 3] = std::numeric_limits<float>::infinity();
  degenerate[7 * dc + 4] = std::numeric_limits<float>::quiet_NaN();
  cases.push_back({dr, dc, degenerate, false});

  std::vector<double> scratch;
  for (const Case& c : cases) {
    const std::string what =
        absl::StrCat("OrthonormalizeColumns ", c.rows, " x ", c.r);
    TERSE_ASSIGN_OR_RETURN(float* dp, f.Upload(c.p));
    TERSE_RETURN_IF_ERROR(
        f.ops()->OrthonormalizeColumns(f.stream(), dp, c.rows, c.r));
    TERSE_ASSIGN_OR_RETURN(std::vector<float> got,
                           f.Download(dp, c.rows * c.r));
    std::vector<float> cpu = c.p;
    OrthonormalizeColumns(c.rows, c.r, cpu.data(), &scratch);
    if (exact) {
      TERSE_RETURN_IF_ERROR(SameBits(got, cpu, what));
    } else {
      for (size_t i = 0; i < got.size(); ++i) {
        const bool ok = cpu[i] == 0.0f ? got[i] == 0.0f
                                       : std::abs(got[i] - cpu[i]) <=
                                             1e-6 * std::abs(cpu[i]) + 1e-9;
        if (!ok) {
          return absl::InternalError(absl::StrCat(what, "[", i, "]: device ",
                                                  got[i], ", cpu ", cpu[i]));
        }
      }
    }
    auto column_dot = [&](int64_t a, int64_t b) {
      double sum = 0;
      for (int64_t i = 0; i < c.rows; ++i) {
        sum += static_cast<double>(got[i * c.r + a]) * got[i * c.r + b];
      }
      return sum;
    };
    if (!c.full_rank) {
      for (int64_t i = 0; i < c.rows; ++i) {
        for (int64_t col = 0; col < 5; ++col) {
          const float want = col == 0 && i == 0 ? 1.0f : 0.0f;
          if (got[i * c.r + col] != want) {
            return absl::InternalError(
                absl::StrCat(what, ": column ", col, " row ", i, " is ",
                             got[i * c.r + col], ", want ", want));
          }
        }
      }
      if (got[5] != 0.0f || !(std::abs(column_dot(5, 5) - 1) <= 1e-6)) {
        return absl::InternalError(absl::StrCat(
            what, ": column 5 (row 0 ", got[5], ", squared norm ",
            column_dot(5, 5), ") is not a unit vector orthogonal to e_0"));
      }
      continue;
    }
    for (int64_t a = 0; a < c.r; ++a) {
      for (int64_t b = 0; b < c.r; ++b) {
        const double want = a == b ? 1.0 : 0.0;
        if (!(std::abs(column_dot(a, b) - want) <= 1e-6)) {
          return absl::InternalError(absl::StrCat(what, ": (P^T P)[", a, ", ",
                                                  b, "] = ", column_dot(a, b)));
        }
      }
    }
    Eigen::MatrixXd m(c.rows, c.r);
    for (int64_t i = 0; i < c.rows; ++i) {
      for (int64_t col = 0; col < c.r; ++col) m(i, col) = c.p[i * c.r + col];
    }
    const Eigen::HouseholderQR<Eigen::MatrixXd> qr(m);
    Eigen::MatrixXd q =
        qr.householderQ() * Eigen::MatrixXd::Identity(c.rows, c.r);
    for (int64_t col = 0; col < c.r; ++col) {
      if (q.col(col).dot(m.col(col)) < 0) q.col(col) = -q.col(col);
    }
    for (int64_t i = 0; i < c.rows; ++i) {
      for (int64_t col = 0; col < c.r; ++col) {
        if (!(std::abs(got[i * c.r + col] - q(i, col)) <= 1e-6)) {
          return absl::InternalError(
              absl::StrCat(what, " vs fp64 [", i, ", ", col, "]: device ",
                           got[i * c.r + col], ", fp64 ", q(i, col)));
        }
      }
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
  // CountSketch: into k = 1, 64, 1024 and 1500 buckets (CUDA sums up to
  // 1024 in shared memory), twice through one scratch (the second adds to
  // the first), bitwise the CPU kernel's on both devices; then values over
  // 61 binary orders of magnitude and non-finite ones.
  for (int64_t k : {int64_t{1}, int64_t{64}, int64_t{1024}, int64_t{1500}}) {
    const uint64_t seed = 0x5eed0000u + static_cast<uint64_t>(k);
    TERSE_ASSIGN_OR_RETURN(float* dx, f.Upload(x));
    TERSE_ASSIGN_OR_RETURN(float* dy, f.Upload(y0));
    TERSE_ASSIGN_OR_RETURN(double* dk, f.Upload(std::vector<double>(k, 0.0)));
    TERSE_ASSIGN_OR_RETURN(uint8_t * scratch,
                           f.Upload(std::vector<uint8_t>(
                               DeviceOps::CountSketchScratchBytes(k), 0xa5)));
    TERSE_RETURN_IF_ERROR(ops->CountSketch(s, dx, d, seed, dk, k, scratch));
    TERSE_RETURN_IF_ERROR(ops->CountSketch(s, dy, d - 3, seed, dk, k, scratch));
    std::vector<double> want(k, 0.0);
    kernels::AddCountSketch(seed, 0, x, absl::MakeSpan(want));
    kernels::AddCountSketch(seed, 0, absl::MakeConstSpan(y0.data(), d - 3),
                            absl::MakeSpan(want));
    TERSE_ASSIGN_OR_RETURN(std::vector<double> got, f.Download(dk, k));
    TERSE_RETURN_IF_ERROR(
        SameBits(got, want, absl::StrCat("CountSketch k=", k)));
  }
  for (const std::vector<float>& v : {WideValues(d, 12), NonFiniteValues()}) {
    const int64_t n = static_cast<int64_t>(v.size()), k = 64;
    TERSE_ASSIGN_OR_RETURN(float* dv, f.Upload(v));
    TERSE_ASSIGN_OR_RETURN(double* dk, f.Upload(std::vector<double>(k, 1.0)));
    TERSE_ASSIGN_OR_RETURN(
        uint8_t * scratch,
        f.Upload(std::vector<uint8_t>(DeviceOps::CountSketchScratchBytes(k))));
    TERSE_RETURN_IF_ERROR(ops->CountSketch(s, dv, n, 99, dk, k, scratch));
    std::vector<double> want(k, 1.0);
    kernels::AddCountSketch(99, 0, v, absl::MakeSpan(want));
    TERSE_ASSIGN_OR_RETURN(std::vector<double> got, f.Download(dk, k));
    TERSE_RETURN_IF_ERROR(
        SameBits(got, want, absl::StrCat("CountSketch of ", n, " values")));
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
  TERSE_RETURN_IF_ERROR(CheckQuantizers(&f, x, y0));
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
  return CheckOrthonormalize(f, exact_norm);
}

}  // namespace testing
}  // namespace terse
