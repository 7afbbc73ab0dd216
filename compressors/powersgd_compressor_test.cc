#include "compressors/powersgd_compressor.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "compressors/error_feedback.h"
#include "compressors/test_util.h"
#include "compressors/testing/simulated_ranks.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

using Vec = std::vector<double>;

// ---------------------------------------------------------------------------
// The protocol, run by hand: every rank's round buffer summed in rank order.
struct ProtocolRun {
  int num_rounds = 0;
  std::vector<int64_t> round_sizes;       // Floats per round.
  std::vector<std::vector<float>> sums;   // The summed buffer of each round.
  std::vector<float> reduced;             // AccumulateInto (same on all ranks).
  std::vector<std::vector<float>> local;  // AccumulateLocal per rank.
};

absl::StatusOr<ProtocolRun> RunProtocol(
    const std::vector<std::unique_ptr<Compressor>>& cs,
    const std::vector<std::vector<float>>& inputs, CompressContext ctx) {
  const size_t n = cs.size();
  const size_t d = inputs[0].size();
  std::vector<std::unique_ptr<RoundState>> states;
  for (size_t r = 0; r < n; ++r) {
    ctx.rank = static_cast<int>(r);
    absl::StatusOr<std::unique_ptr<RoundState>> st =
        cs[r]->BeginRounds(inputs[r], ctx);
    if (!st.ok()) return st.status();
    states.push_back(*std::move(st));
  }
  ProtocolRun run;
  run.num_rounds = states[0]->num_rounds();
  for (int round = 0; round < run.num_rounds; ++round) {
    std::vector<float> sum(states[0]->RoundBuffer(round).size(), 0.0f);
    for (size_t r = 0; r < n; ++r) {
      if (states[r]->num_rounds() != run.num_rounds) {
        return absl::InternalError("ranks disagree on the rounds");
      }
      absl::Span<float> buf = states[r]->RoundBuffer(round);
      if (buf.size() != sum.size()) {
        return absl::InternalError("round buffers differ in size");
      }
      for (size_t i = 0; i < buf.size(); ++i) sum[i] += buf[i];
    }
    for (size_t r = 0; r < n; ++r) {
      absl::Span<float> buf = states[r]->RoundBuffer(round);
      std::copy(sum.begin(), sum.end(), buf.begin());
      absl::Status st = states[r]->EndRound(round);
      if (!st.ok()) return st;
    }
    run.round_sizes.push_back(static_cast<int64_t>(sum.size()));
    run.sums.push_back(std::move(sum));
  }
  for (size_t r = 0; r < n; ++r) {
    std::vector<float> reduced(d, 0.0f), local(d, 0.0f);
    absl::Status st = states[r]->AccumulateInto(absl::MakeSpan(reduced));
    if (!st.ok()) return st;
    st = states[r]->AccumulateLocal(absl::MakeSpan(local));
    if (!st.ok()) return st;
    if (r == 0) {
      run.reduced = reduced;
    } else if (reduced != run.reduced) {
      return absl::InternalError(absl::StrCat("rank ", r, " reduced differs"));
    }
    run.local.push_back(std::move(local));
  }
  return run;
}

std::vector<std::unique_ptr<Compressor>> Make(int ranks,
                                              const CompressorOptions& opt) {
  std::vector<std::unique_ptr<Compressor>> cs;
  for (int r = 0; r < ranks; ++r) cs.push_back(MakePowerSgdCompressor(1, opt));
  return cs;
}

std::vector<std::vector<float>> Inputs(int ranks, int64_t d, uint32_t seed) {
  std::vector<std::vector<float>> in;
  for (int r = 0; r < ranks; ++r) in.push_back(GaussianVector(d, seed + r));
  return in;
}

// ---------------------------------------------------------------------------
// The fp64 oracle: PowerSGD written out (classical Gram-Schmidt with
// re-orthogonalisation, a different algorithm from the code under test).
struct Ref {
  Vec out;                 // P^ Q_sum^T (n x m).
  std::vector<Vec> local;  // P^ Q_i^T per rank.
  Vec q_sum;               // m x r.
};

// ms[k]: rank k's n x m matrix (row-major); q: m x r.
Ref ReferencePowerSgd(const std::vector<Vec>& ms, int64_t n, int64_t m,
                      int64_t r, const Vec& q) {
  Vec p(n * r, 0.0);
  for (const Vec& mk : ms) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t c = 0; c < r; ++c) {
        for (int64_t j = 0; j < m; ++j)
          p[i * r + c] += mk[i * m + j] * q[j * r + c];
      }
    }
  }
  for (int64_t c = 0; c < r; ++c) {
    double start = 0;
    for (int64_t i = 0; i < n; ++i) start += p[i * r + c] * p[i * r + c];
    for (int pass = 0; pass < 2; ++pass) {
      Vec dots(c, 0.0);
      for (int64_t prev = 0; prev < c; ++prev) {
        for (int64_t i = 0; i < n; ++i)
          dots[prev] += p[i * r + c] * p[i * r + prev];
      }
      for (int64_t prev = 0; prev < c; ++prev) {
        for (int64_t i = 0; i < n; ++i)
          p[i * r + c] -= dots[prev] * p[i * r + prev];
      }
    }
    double norm = 0;
    for (int64_t i = 0; i < n; ++i) norm += p[i * r + c] * p[i * r + c];
    norm = std::sqrt(norm);
    const bool keep = norm > 1e-6 * std::sqrt(start) && norm > 0;
    for (int64_t i = 0; i < n; ++i)
      p[i * r + c] = keep ? p[i * r + c] / norm : 0;
  }
  Ref ref;
  ref.q_sum.assign(m * r, 0.0);
  ref.out.assign(n * m, 0.0);
  for (const Vec& mk : ms) {
    Vec qk(m * r, 0.0);
    for (int64_t j = 0; j < m; ++j) {
      for (int64_t c = 0; c < r; ++c) {
        for (int64_t i = 0; i < n; ++i)
          qk[j * r + c] += mk[i * m + j] * p[i * r + c];
      }
    }
    Vec local(n * m, 0.0);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < m; ++j) {
        for (int64_t c = 0; c < r; ++c)
          local[i * m + j] += p[i * r + c] * qk[j * r + c];
      }
    }
    for (int64_t k = 0; k < m * r; ++k) ref.q_sum[k] += qk[k];
    for (int64_t k = 0; k < n * m; ++k) ref.out[k] += local[k];
    ref.local.push_back(std::move(local));
  }
  return ref;
}

// Rank k's elements [offset, offset + count) in double, zero padded to len.
std::vector<Vec> Slices(const std::vector<std::vector<float>>& inputs,
                        int64_t offset, int64_t count, int64_t len) {
  std::vector<Vec> out;
  for (const auto& in : inputs) {
    Vec v(len, 0.0);
    for (int64_t i = 0; i < count; ++i) v[i] = in[offset + i];
    out.push_back(std::move(v));
  }
  return out;
}

Vec ToDouble(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

// got[offset + i] ~ want[i] for i < count, within tol * max|want|.
void ExpectClose(const std::vector<float>& got, int64_t offset, const Vec& want,
                 int64_t count, double tol, const std::string& what) {
  double scale = 1e-30;
  for (int64_t i = 0; i < count; ++i)
    scale = std::max(scale, std::fabs(want[i]));
  for (int64_t i = 0; i < count; ++i) {
    ASSERT_NEAR(got[offset + i], want[i], tol * scale) << what << " i=" << i;
  }
}

// The exact float sum in rank order of inputs[.][offset, offset + count).
void ExpectExactSum(const std::vector<float>& got,
                    const std::vector<std::vector<float>>& inputs,
                    int64_t offset, int64_t count) {
  for (int64_t i = offset; i < offset + count; ++i) {
    float sum = 0.0f;
    for (const auto& in : inputs) sum += in[i];
    ASSERT_EQ(got[i], sum) << "i=" << i;
  }
}

constexpr double kTol = 2e-5;

// ---------------------------------------------------------------------------

TEST(PowerSgdTest, Shape) {
  PowerSgdShape s = PowerSgdShapeFor(100, 4);
  EXPECT_EQ(s.cols, 10);
  EXPECT_EQ(s.rows, 10);
  EXPECT_EQ(s.rank, 4);
  s = PowerSgdShapeFor(101, 50);
  EXPECT_EQ(s.cols, 11);
  EXPECT_EQ(s.rows, 10);
  EXPECT_EQ(s.rank, 10);
  s = PowerSgdShapeFor(1, 3);
  EXPECT_EQ(s.rows * s.cols, 1);
  EXPECT_EQ(s.rank, 1);
  EXPECT_EQ(PowerSgdShapeFor(0, 3).rank, 0);
}

TEST(PowerSgdTest, StartQIsADeterministicStandardNormal) {
  const std::vector<float> a = PowerSgdStartQ(7, "w", 5000, 4);
  EXPECT_EQ(a, PowerSgdStartQ(7, "w", 5000, 4));
  EXPECT_NE(a, PowerSgdStartQ(8, "w", 5000, 4));
  EXPECT_NE(a, PowerSgdStartQ(7, "v", 5000, 4));
  double mean = 0, sq = 0;
  for (float x : a) {
    mean += x;
    sq += double{x} * x;
  }
  mean /= a.size();
  sq /= a.size();
  EXPECT_NEAR(mean, 0.0, 0.05);
  EXPECT_NEAR(sq, 1.0, 0.05);
}

// (1) One matrix, several ranks: the fp64 PowerSGD reference.
TEST(PowerSgdTest, OneMatrixMatchesTheFp64Reference) {
  const int64_t n = 24, m = 40, r = 3;
  for (int ranks : {2, 3}) {
    CompressorOptions opt;
    opt.powersgd_rank = r;
    auto cs = Make(ranks, opt);
    const auto inputs = Inputs(ranks, n * m, 10 * ranks);
    const std::vector<Segment> segs = {{"w", 0, n * m, 0, {n, m}}};
    CompressContext ctx;
    ctx.seed = 9;
    ctx.key = "b";
    ctx.segments = segs;
    absl::StatusOr<ProtocolRun> run = RunProtocol(cs, inputs, ctx);
    ASSERT_TRUE(run.ok()) << run.status();
    ASSERT_EQ(run->num_rounds, 2);
    EXPECT_EQ(run->round_sizes, (std::vector<int64_t>{n * r, m * r}));
    const Ref ref = ReferencePowerSgd(Slices(inputs, 0, n * m, n * m), n, m, r,
                                      ToDouble(PowerSgdStartQ(9, "w", m, r)));
    ExpectClose(run->reduced, 0, ref.out, n * m, kTol, "sum");
    ExpectClose(run->sums[1], 0, ref.q_sum, m * r, kTol, "q_sum");
    for (int k = 0; k < ranks; ++k) {
      ExpectClose(run->local[k], 0, ref.local[k], n * m, kTol, "local");
    }
    // The SimulateStep helper agrees (same protocol, independent runner).
    auto cs2 = Make(ranks, opt);
    std::vector<Compressor*> raw;
    for (auto& c : cs2) raw.push_back(c.get());
    absl::StatusOr<testing::SimulatedStep> sim =
        testing::SimulateStep(raw, inputs, ctx);
    ASSERT_TRUE(sim.ok()) << sim.status();
    EXPECT_EQ(sim->reduced, run->reduced);
    EXPECT_EQ(sim->bytes[0], (n + m) * r * 4);
  }
}

// (2) Full rank: r = min(n, m) is never worth compressing, so the matrix
// travels as it is and the sum is exact; a sum of rank <= r (shared column
// space) is reproduced by the compressed path.
TEST(PowerSgdTest, FullRankReproducesTheDenseSum) {
  {
    const int64_t n = 6, m = 9;
    CompressorOptions opt;
    opt.powersgd_rank = 6;
    opt.powersgd_min_compression_rate = 0;
    auto cs = Make(3, opt);
    const auto inputs = Inputs(3, n * m, 1);
    const std::vector<Segment> segs = {{"w", 0, n * m, 0, {n, m}}};
    CompressContext ctx;
    ctx.segments = segs;
    absl::StatusOr<ProtocolRun> run = RunProtocol(cs, inputs, ctx);
    ASSERT_TRUE(run.ok()) << run.status();
    EXPECT_EQ(run->num_rounds, 1);
    EXPECT_EQ(run->round_sizes, (std::vector<int64_t>{n * m}));
    ExpectExactSum(run->reduced, inputs, 0, n * m);
  }
  {
    const int64_t n = 30, m = 50, r = 2;
    const int ranks = 3;
    CompressorOptions opt;
    opt.powersgd_rank = r;
    auto cs = Make(ranks, opt);
    const std::vector<float> a = GaussianVector(n * r, 3);
    std::vector<std::vector<float>> inputs(ranks, std::vector<float>(n * m));
    Vec dense(n * m, 0.0);
    for (int k = 0; k < ranks; ++k) {
      const std::vector<float> b = GaussianVector(r * m, 20 + k);
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < m; ++j) {
          double v = 0;
          for (int64_t c = 0; c < r; ++c)
            v += double{a[i * r + c]} * b[c * m + j];
          inputs[k][i * m + j] = static_cast<float>(v);
          dense[i * m + j] += inputs[k][i * m + j];
        }
      }
    }
    const std::vector<Segment> segs = {{"w", 0, n * m, 0, {n, m}}};
    CompressContext ctx;
    ctx.segments = segs;
    absl::StatusOr<ProtocolRun> run = RunProtocol(cs, inputs, ctx);
    ASSERT_TRUE(run.ok()) << run.status();
    EXPECT_EQ(run->num_rounds, 2);
    ExpectClose(run->reduced, 0, dense, n * m, 1e-4, "rank-r sum");
  }
}

// (3) A bucket of a conv kernel, a bias and a matrix: each matrix on its own
// shape, the bias exact, the round sizes.
TEST(PowerSgdTest, MixedBucketCompressesEachLayerOnItsShape) {
  const int64_t r = 2, ranks = 3;
  const int64_t conv_n = 8, conv_m = 3 * 3 * 3, conv = conv_n * conv_m;
  const int64_t bias = 16;
  const int64_t fc_n = 16, fc_m = 32, fc = fc_n * fc_m;
  const int64_t d = conv + bias + fc;
  const std::vector<Segment> segs = {{"conv", 0, conv, 0, {conv_n, 3, 3, 3}},
                                     {"bias", conv, bias, 0, {bias}},
                                     {"fc", conv + bias, fc, 0, {fc_n, fc_m}}};
  CompressorOptions opt;
  opt.powersgd_rank = r;
  auto cs = Make(ranks, opt);
  const auto inputs = Inputs(ranks, d, 40);
  CompressContext ctx;
  ctx.seed = 3;
  ctx.segments = segs;
  absl::StatusOr<ProtocolRun> run = RunProtocol(cs, inputs, ctx);
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->num_rounds, 2);
  EXPECT_EQ(run->round_sizes,
            (std::vector<int64_t>{conv_n * r + fc_n * r + bias,
                                  conv_m * r + fc_m * r}));
  absl::StatusOr<PowerSgdRoundSizes> sizes =
      PowerSgdRoundSizesFor(d, segs, opt, 0);
  ASSERT_TRUE(sizes.ok());
  EXPECT_EQ(sizes->num_rounds, 2);
  EXPECT_EQ(sizes->round0, run->round_sizes[0]);
  EXPECT_EQ(sizes->round1, run->round_sizes[1]);
  EXPECT_EQ(sizes->uncompressed, bias);
  EXPECT_EQ(sizes->matrices, 2);

  ExpectExactSum(run->reduced, inputs, conv, bias);
  const Ref conv_ref =
      ReferencePowerSgd(Slices(inputs, 0, conv, conv), conv_n, conv_m, r,
                        ToDouble(PowerSgdStartQ(3, "conv", conv_m, r)));
  ExpectClose(run->reduced, 0, conv_ref.out, conv, kTol, "conv");
  const Ref fc_ref =
      ReferencePowerSgd(Slices(inputs, conv + bias, fc, fc), fc_n, fc_m, r,
                        ToDouble(PowerSgdStartQ(3, "fc", fc_m, r)));
  ExpectClose(run->reduced, conv + bias, fc_ref.out, fc, kTol, "fc");
  for (int k = 0; k < ranks; ++k) {
    ExpectClose(run->local[k], 0, conv_ref.local[k], conv, kTol, "conv local");
    ExpectClose(run->local[k], conv + bias, fc_ref.local[k], fc, kTol,
                "fc local");
  }
}

// (4) rank*(n+m) >= n*m, or a compression rate below the minimum: the
// matrix is sent as it is, in one round.
TEST(PowerSgdTest, UnprofitableMatricesGoUncompressed) {
  struct Case {
    std::vector<int64_t> shape;
    int64_t rank;
    double min_rate;
    bool compressed;
  };
  const std::vector<Case> cases = {
      {{4, 5}, 2, 2.0, false},    // 20 / 18 = 1.1 < 2.
      {{4, 5}, 2, 1.0, true},     // 18 < 20 and 1.1 >= 1.
      {{3, 3}, 2, 0.0, false},    // 12 >= 9.
      {{10, 10}, 4, 0.0, true},   // 80 < 100.
      {{10, 10}, 5, 0.0, false},  // 100 >= 100.
      {{1, 50}, 1, 0.0, false},   // 51 >= 50.
      {{20, 30}, 4, 3.0, true},   // 600 / 200 = 3.
      {{20, 30}, 4, 3.01, false},
  };
  for (const Case& c : cases) {
    const int64_t d = c.shape[0] * c.shape[1];
    CompressorOptions opt;
    opt.powersgd_rank = c.rank;
    opt.powersgd_min_compression_rate = c.min_rate;
    auto cs = Make(2, opt);
    const auto inputs = Inputs(2, d, 5);
    const std::vector<Segment> segs = {{"w", 0, d, 0, c.shape}};
    CompressContext ctx;
    ctx.segments = segs;
    absl::StatusOr<ProtocolRun> run = RunProtocol(cs, inputs, ctx);
    ASSERT_TRUE(run.ok()) << run.status();
    const std::string what = absl::StrCat(c.shape[0], "x", c.shape[1], " r",
                                          c.rank, " min ", c.min_rate);
    EXPECT_EQ(run->num_rounds, c.compressed ? 2 : 1) << what;
    if (!c.compressed) {
      EXPECT_EQ(run->round_sizes, (std::vector<int64_t>{d})) << what;
      ExpectExactSum(run->reduced, inputs, 0, d);
      EXPECT_EQ(run->local[0], inputs[0]) << what;
    }
  }
}

// (5) Before the start step the bucket travels whole; the local share is
// the input, so error feedback keeps nothing.
TEST(PowerSgdTest, StartStep) {
  const int64_t n = 16, m = 20, r = 1;
  CompressorOptions opt;
  opt.powersgd_rank = r;
  opt.powersgd_start_step = 3;
  auto cs = Make(2, opt);
  const std::vector<Segment> segs = {{"w", 0, n * m, 0, {n, m}}};
  CompressContext ctx;
  ctx.seed = 1;
  ctx.segments = segs;
  for (uint64_t step = 0; step < 3; ++step) {
    ctx.step = step;
    const auto inputs = Inputs(2, n * m, 60 + step);
    absl::StatusOr<ProtocolRun> run = RunProtocol(cs, inputs, ctx);
    ASSERT_TRUE(run.ok()) << run.status();
    EXPECT_EQ(run->num_rounds, 1);
    EXPECT_EQ(run->round_sizes, (std::vector<int64_t>{n * m}));
    ExpectExactSum(run->reduced, inputs, 0, n * m);
    EXPECT_EQ(run->local[0], inputs[0]);
    EXPECT_EQ(run->local[1], inputs[1]);
    EXPECT_EQ(PowerSgdRoundSizesFor(n * m, segs, opt, step)->num_rounds, 1);
  }
  ctx.step = 3;
  const auto inputs = Inputs(2, n * m, 70);
  absl::StatusOr<ProtocolRun> run = RunProtocol(cs, inputs, ctx);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->num_rounds, 2);
  // No warm start was stored before: the start Q.
  const Ref ref = ReferencePowerSgd(Slices(inputs, 0, n * m, n * m), n, m, r,
                                    ToDouble(PowerSgdStartQ(1, "w", m, r)));
  ExpectClose(run->reduced, 0, ref.out, n * m, kTol, "first compressed step");
}

// (6) Warm start: the next step starts from the summed Q of the last one,
// per tensor (state key, name and shape).
TEST(PowerSgdTest, WarmStartUsesThePreviousSummedQ) {
  const int64_t n = 12, m = 18, r = 2;
  CompressorOptions opt;
  opt.powersgd_rank = r;
  auto cs = Make(2, opt);
  const std::vector<Segment> segs = {{"w", 0, n * m, 0, {n, m}},
                                     {"v", n * m, n * m, 0, {n, m}}};
  CompressContext ctx;
  ctx.seed = 2;
  ctx.key = "bucket";
  ctx.segments = segs;
  auto inputs = Inputs(2, 2 * n * m, 80);
  absl::StatusOr<ProtocolRun> first = RunProtocol(cs, inputs, ctx);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::vector<float>& q_sum = first->sums[1];
  ASSERT_EQ(q_sum.size(), static_cast<size_t>(2 * m * r));
  const Vec q_w(q_sum.begin(), q_sum.begin() + m * r);
  const Vec q_v(q_sum.begin() + m * r, q_sum.end());

  ctx.step = 1;
  inputs = Inputs(2, 2 * n * m, 90);
  absl::StatusOr<ProtocolRun> second = RunProtocol(cs, inputs, ctx);
  ASSERT_TRUE(second.ok()) << second.status();
  const Ref ref_w =
      ReferencePowerSgd(Slices(inputs, 0, n * m, n * m), n, m, r, q_w);
  const Ref ref_v =
      ReferencePowerSgd(Slices(inputs, n * m, n * m, n * m), n, m, r, q_v);
  ExpectClose(second->reduced, 0, ref_w.out, n * m, kTol, "w");
  ExpectClose(second->reduced, n * m, ref_v.out, n * m, kTol, "v");

  // Another state key starts afresh from the start Q.
  ctx.key = "other";
  absl::StatusOr<ProtocolRun> fresh = RunProtocol(cs, inputs, ctx);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  const Ref ref_fresh =
      ReferencePowerSgd(Slices(inputs, 0, n * m, n * m), n, m, r,
                        ToDouble(PowerSgdStartQ(2, "w", m, r)));
  ExpectClose(fresh->reduced, 0, ref_fresh.out, n * m, kTol, "fresh");
}

// (7) Error feedback: share + residual == input; the uncompressed parts
// leave no residual, a matrix's residual is orthogonal to P^.
TEST(PowerSgdTest, ErrorFeedbackIdentity) {
  const int64_t n = 20, m = 24, bias = 7, d = n * m + bias;
  CompressorOptions opt;
  opt.powersgd_rank = 2;
  const std::vector<Segment> segs = {{"w", 0, n * m, 0, {n, m}},
                                     {"b", n * m, bias, 0, {bias}}};
  CompressContext ctx;
  ctx.key = "k";
  ctx.segments = segs;
  ErrorFeedback ef(MakePowerSgdCompressor(1, opt));
  std::vector<float> residual_w(n * m, 0.0f);
  for (int step = 0; step < 3; ++step) {
    ctx.step = step;
    const std::vector<float> g = GaussianVector(d, 100 + step);
    absl::StatusOr<std::unique_ptr<RoundState>> st = ef.BeginRounds(g, ctx);
    ASSERT_TRUE(st.ok()) << st.status();
    ASSERT_EQ((*st)->num_rounds(), 2);
    for (int r = 0; r < 2; ++r) ASSERT_TRUE((*st)->EndRound(r).ok());
    std::vector<float> share(d, 0.0f);
    ASSERT_TRUE((*st)->AccumulateLocal(absl::MakeSpan(share)).ok());
    const std::vector<float> now_w = ef.Residual("w", 0, n * m);
    const std::vector<float> now_b = ef.Residual("b", 0, bias);
    for (int64_t i = 0; i < n * m; ++i) {
      const float a = g[i] + residual_w[i];
      ASSERT_NEAR(now_w[i] + share[i], a, 1e-5 * (1 + std::fabs(a)));
    }
    for (int64_t i = 0; i < bias; ++i) {
      EXPECT_EQ(now_b[i], 0.0f);
      EXPECT_EQ(share[n * m + i], g[n * m + i]);
    }
    residual_w = now_w;
  }
  // With one rank the local share is P^ P^^T M: the residual M - share has
  // no component along P^'s columns, which span the share's columns.
  auto cs = Make(1, opt);
  const auto inputs = Inputs(1, d, 7);
  absl::StatusOr<ProtocolRun> run = RunProtocol(cs, inputs, ctx);
  ASSERT_TRUE(run.ok()) << run.status();
  for (int64_t j = 0; j < m; ++j) {
    double along = 0, share_norm = 0, res_norm = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double s = run->local[0][i * m + j];
      const double res = inputs[0][i * m + j] - s;
      along += s * res;
      share_norm += s * s;
      res_norm += res * res;
    }
    EXPECT_NEAR(along, 0.0, 1e-4 * (1 + std::sqrt(share_norm * res_norm)));
  }
}

// (8) Unknown shapes (no segments, or segments without a shape) keep the
// near-square view of each segment, zero padded.
TEST(PowerSgdTest, UnknownShapeKeepsTheNearSquareView) {
  for (int64_t d : {int64_t{100}, int64_t{150}}) {
    const int64_t rank = 2;
    const PowerSgdShape view = PowerSgdShapeFor(d, rank);
    CompressorOptions opt;
    opt.powersgd_rank = rank;
    auto cs = Make(2, opt);
    const auto inputs = Inputs(2, d, 11);
    CompressContext ctx;
    ctx.seed = 4;
    ctx.key = "flat";
    absl::StatusOr<ProtocolRun> run = RunProtocol(cs, inputs, ctx);
    ASSERT_TRUE(run.ok()) << run.status();
    ASSERT_EQ(run->num_rounds, 2);
    EXPECT_EQ(run->round_sizes,
              (std::vector<int64_t>{view.rows * rank, view.cols * rank}));
    const Ref ref = ReferencePowerSgd(
        Slices(inputs, 0, d, view.rows * view.cols), view.rows, view.cols, rank,
        ToDouble(PowerSgdStartQ(4, "flat", view.cols, rank)));
    ExpectClose(run->reduced, 0, ref.out, d, kTol, absl::StrCat("d=", d));
  }
  // Two shapeless segments: one near-square view each.
  const std::vector<Segment> segs = {{"a", 0, 100, 0, {}},
                                     {"b", 100, 144, 0, {}}};
  CompressorOptions opt;
  opt.powersgd_rank = 1;
  auto cs = Make(2, opt);
  const auto inputs = Inputs(2, 244, 12);
  CompressContext ctx;
  ctx.segments = segs;
  absl::StatusOr<ProtocolRun> run = RunProtocol(cs, inputs, ctx);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->round_sizes, (std::vector<int64_t>{10 + 12, 10 + 12}));
  const Ref ref_b = ReferencePowerSgd(Slices(inputs, 100, 144, 144), 12, 12, 1,
                                      ToDouble(PowerSgdStartQ(0, "b", 12, 1)));
  ExpectClose(run->reduced, 100, ref_b.out, 144, kTol, "b");
}

// (9) A tensor split across buckets (a partial segment of known shape) and
// bucket elements no segment covers travel uncompressed.
TEST(PowerSgdTest, PartialSegmentsGoUncompressed) {
  const int64_t n = 20, m = 20;
  CompressorOptions opt;
  const std::vector<Segment> segs = {
      {"w", 0, 200, 200, {n, m}},     // The second half of w.
      {"x", 200, 200, 0, {n, m}},     // The first half of x.
      {"y", 410, n * m, 0, {n, m}}};  // Whole; 400..410 is uncovered.
  const int64_t d = 410 + n * m;
  auto cs = Make(2, opt);
  const auto inputs = Inputs(2, d, 13);
  CompressContext ctx;
  ctx.segments = segs;
  absl::StatusOr<ProtocolRun> run = RunProtocol(cs, inputs, ctx);
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->num_rounds, 2);
  EXPECT_EQ(run->round_sizes, (std::vector<int64_t>{n + 410, m}));
  ExpectExactSum(run->reduced, inputs, 0, 410);
  EXPECT_TRUE(std::equal(inputs[0].begin(), inputs[0].begin() + 410,
                         run->local[0].begin()));
  const Ref ref = ReferencePowerSgd(Slices(inputs, 410, n * m, n * m), n, m, 1,
                                    ToDouble(PowerSgdStartQ(0, "y", m, 1)));
  ExpectClose(run->reduced, 410, ref.out, n * m, kTol, "y");
}

TEST(PowerSgdTest, ProtocolMisuse) {
  std::unique_ptr<Compressor> c = MakePowerSgdCompressor(1, {});
  EXPECT_EQ(c->num_rounds(), 2);
  Payload p;
  EXPECT_FALSE(c->Compress(GaussianVector(10, 1), {}, &p).ok());
  std::vector<float> x = GaussianVector(100, 1);
  absl::StatusOr<std::unique_ptr<RoundState>> st = c->BeginRounds(x, {});
  ASSERT_TRUE(st.ok());
  ASSERT_EQ((*st)->num_rounds(), 2);
  std::vector<float> out(100);
  EXPECT_EQ((*st)->AccumulateInto(absl::MakeSpan(out)).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE((*st)->EndRound(1).ok());
  ASSERT_TRUE((*st)->EndRound(0).ok());
  EXPECT_EQ((*st)->AccumulateLocal(absl::MakeSpan(out)).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE((*st)->EndRound(1).ok());
  EXPECT_FALSE((*st)->EndRound(2).ok());
  std::vector<float> wrong(101);
  EXPECT_EQ((*st)->AccumulateInto(absl::MakeSpan(wrong)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*st)->AccumulateInto(absl::MakeSpan(out)).ok());

  // A one-round state has no round 1.
  st = c->BeginRounds(GaussianVector(10, 1), {});  // 4x3 view: rate < 2.
  ASSERT_TRUE(st.ok());
  ASSERT_EQ((*st)->num_rounds(), 1);
  EXPECT_TRUE((*st)->RoundBuffer(1).empty());
  ASSERT_TRUE((*st)->EndRound(0).ok());
  EXPECT_FALSE((*st)->EndRound(1).ok());

  // Bad segments.
  CompressContext ctx;
  const std::vector<Segment> outside = {{"a", 95, 10, 0, {}}};
  ctx.segments = outside;
  EXPECT_EQ(c->BeginRounds(x, ctx).status().code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<Segment> overlap = {{"a", 0, 50, 0, {}},
                                        {"b", 40, 20, 0, {}}};
  ctx.segments = overlap;
  EXPECT_EQ(c->BeginRounds(x, ctx).status().code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<Segment> negative = {{"a", -1, 5, 0, {}}};
  ctx.segments = negative;
  EXPECT_EQ(c->BeginRounds(x, ctx).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(PowerSgdRoundSizesFor(100, negative, {}, 0).ok());
}

}  // namespace
}  // namespace terse
