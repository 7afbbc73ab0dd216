// Alltoall and reducescatter scenarios (engine_testing.h) for any number of
// ranks >= 2, on loopback (engine:exchange_test) and under mpirun
// (engine:engine_mpi_np2_test / _np4_test). The oracle is independent of
// the engine: every rank's input is a known function of (rank, row,
// column), so each rank computes what it must receive from all ranks'
// inputs directly, in double.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "engine/engine_testing.h"

namespace terse {
namespace testing {
namespace {

// Element (row i, column c) of rank q's input at `step`: small integers,
// exact in float.
double Input(int q, int64_t i, int64_t c, int step) {
  return q * 1000 + i * 10 + c + step * 100000;
}

// The rows rank q sends to each of `size` ranks at `step`: uneven, with
// zeros, different per rank and step.
std::vector<int64_t> SplitsOf(int q, int size, int step) {
  std::vector<int64_t> splits(size);
  for (int j = 0; j < size; ++j) splits[j] = (q + 2 * j + step) % 3;
  return splits;
}

int64_t Sum(const std::vector<int64_t>& v) {
  int64_t s = 0;
  for (int64_t x : v) s += x;
  return s;
}

// Rank q's input of `rows` rows x `cols` at `step`, as T.
template <typename T>
std::vector<T> InputOf(int q, int64_t rows, int64_t cols, int step) {
  std::vector<T> v(rows * cols);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t c = 0; c < cols; ++c) {
      v[i * cols + c] = static_cast<T>(Input(q, i, c, step));
    }
  }
  return v;
}

template <typename T>
const T* As(const AllgatherResult& r) {
  return reinterpret_cast<const T*>(r.data.data());
}

// One alltoall of float rows [rows, 2, 3] with SplitsOf splits over the
// ranks `members` (world ranks; this rank is `me` among them), checked
// against the oracle.
absl::Status CheckedAlltoall(Engine& engine, const std::string& name, int me,
                             int size, int step, int32_t set) {
  const int64_t cols = 6;
  const std::vector<int64_t> splits = SplitsOf(me, size, step);
  const int64_t rows = Sum(splits);
  std::vector<float> in = InputOf<float>(me, rows, cols, step);
  TERSE_ASSIGN_OR_RETURN(
      Handle h,
      engine.AlltoallAsync(
          name, TensorView(in.data(), rows * cols, DataType::kFloat32),
          {rows, 2, 3}, splits, nullptr, set));
  TERSE_RETURN_IF_ERROR(engine.Wait(h));
  TERSE_ASSIGN_OR_RETURN(AllgatherResult r, engine.TakeAlltoallResult(h));
  // Oracle: rank q sent me rows [sum(splits_q[0..me)), + splits_q[me]).
  std::vector<double> want;
  std::vector<int64_t> received;
  for (int q = 0; q < size; ++q) {
    const std::vector<int64_t> sq = SplitsOf(q, size, step);
    int64_t offset = 0;
    for (int j = 0; j < me; ++j) offset += sq[j];
    received.push_back(sq[me]);
    for (int64_t i = offset; i < offset + sq[me]; ++i) {
      for (int64_t c = 0; c < cols; ++c) want.push_back(Input(q, i, c, step));
    }
  }
  const std::string what = absl::StrCat(name, " on rank ", me);
  TERSE_RETURN_IF_ERROR(
      Expect(r.first_dims == received,
             absl::StrCat(what, ": received splits [",
                          absl::StrJoin(r.first_dims, ","), "]")));
  TERSE_RETURN_IF_ERROR(
      Expect(r.shape == std::vector<int64_t>({Sum(received), 2, 3}),
             what + ": shape"));
  TERSE_RETURN_IF_ERROR(
      Expect(r.dtype == DataType::kFloat32, what + ": dtype"));
  TERSE_RETURN_IF_ERROR(
      Expect(r.data.size() == want.size() * sizeof(float), what + ": bytes"));
  const float* got = As<float>(r);
  for (size_t k = 0; k < want.size(); ++k) {
    if (static_cast<double>(got[k]) != want[k]) {
      return Expect(false, absl::StrCat(what, ": element ", k, " is ", got[k],
                                        ", expected ", want[k]));
    }
  }
  return absl::OkStatus();
}

absl::Status AlltoallUneven(int rank, Engine& engine) {
  // The same name again with other splits: never answered from the cache.
  for (int step = 0; step < 4; ++step) {
    TERSE_RETURN_IF_ERROR(
        CheckedAlltoall(engine, "a2a", rank, engine.size(), step, 0));
  }
  return absl::OkStatus();
}

absl::Status AlltoallEqualAndEmpty(int rank, Engine& engine) {
  const int size = engine.size();
  // Empty splits: equal parts of 2 rows each, int32.
  std::vector<int32_t> in = InputOf<int32_t>(rank, 2 * size, 4, 0);
  TERSE_ASSIGN_OR_RETURN(
      Handle h, engine.AlltoallAsync(
                    "equal", TensorView(in.data(), 8 * size, DataType::kInt32),
                    {2 * size, 4}, {}));
  // A tensor of no rows at all.
  std::vector<double> none;
  TERSE_ASSIGN_OR_RETURN(
      Handle z, engine.AlltoallAsync(
                    "empty", TensorView(none.data(), 0, DataType::kFloat64),
                    {0, 5}, std::vector<int64_t>(size, 0)));
  TERSE_RETURN_IF_ERROR(engine.Wait(h));
  TERSE_RETURN_IF_ERROR(engine.Wait(z));
  TERSE_ASSIGN_OR_RETURN(AllgatherResult r, engine.TakeAlltoallResult(h));
  TERSE_ASSIGN_OR_RETURN(AllgatherResult e, engine.TakeAlltoallResult(z));
  TERSE_RETURN_IF_ERROR(Expect(r.first_dims == std::vector<int64_t>(size, 2),
                               "equal received splits"));
  TERSE_RETURN_IF_ERROR(
      Expect(r.shape == std::vector<int64_t>({2 * size, 4}), "equal shape"));
  const int32_t* got = As<int32_t>(r);
  for (int q = 0; q < size; ++q) {
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t c = 0; c < 4; ++c) {
        const double want = Input(q, 2 * rank + i, c, 0);
        TERSE_RETURN_IF_ERROR(Expect(got[(2 * q + i) * 4 + c] == want,
                                     absl::StrCat("equal element from ", q)));
      }
    }
  }
  TERSE_RETURN_IF_ERROR(Expect(e.data.empty(), "empty alltoall data"));
  TERSE_RETURN_IF_ERROR(
      Expect(e.shape == std::vector<int64_t>({0, 5}), "empty shape"));
  return Expect(e.first_dims == std::vector<int64_t>(size, 0),
                "empty received splits");
}

double Combine(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::kMin:
      return std::min(a, b);
    case ReduceOp::kMax:
      return std::max(a, b);
    case ReduceOp::kProduct:
      return a * b;
    default:
      return a + b;
  }
}

// Reducescatter of `rows` x 3 float64 values over `size` ranks (this rank
// `me`), checked against the reduction computed here.
absl::Status CheckedReducescatter(Engine& engine, const std::string& name,
                                  int me, int size, int64_t rows, ReduceOp op,
                                  double prescale, double postscale,
                                  int32_t set) {
  const int64_t cols = 3;
  // Product: values in {1, 1.5, 2}, so the product stays small and exact.
  auto value = [&](int q, int64_t i, int64_t c) {
    return op == ReduceOp::kProduct ? 1.0 + 0.5 * ((q + i + c) % 3)
                                    : Input(q, i, c, 0);
  };
  std::vector<double> in(rows * cols);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t c = 0; c < cols; ++c) in[i * cols + c] = value(me, i, c);
  }
  TERSE_ASSIGN_OR_RETURN(
      Handle h,
      engine.ReducescatterAsync(
          name, TensorView(in.data(), rows * cols, DataType::kFloat64),
          {rows, cols}, op, prescale, postscale, nullptr, set));
  TERSE_RETURN_IF_ERROR(engine.Wait(h));
  TERSE_ASSIGN_OR_RETURN(AllgatherResult r, engine.TakeReducescatterResult(h));
  // Horovod's split, written out: rank j holds rows / size rows, plus one
  // when j < rows % size.
  std::vector<int64_t> parts;
  int64_t offset = 0;
  for (int j = 0; j < size; ++j) {
    parts.push_back(rows / size + (j < rows % size ? 1 : 0));
    if (j < me) offset += parts.back();
  }
  const std::string what = absl::StrCat(name, " on rank ", me);
  TERSE_RETURN_IF_ERROR(Expect(r.first_dims == parts, what + ": parts"));
  TERSE_RETURN_IF_ERROR(Expect(
      r.shape == std::vector<int64_t>({parts[me], cols}), what + ": shape"));
  TERSE_RETURN_IF_ERROR(
      Expect(r.data.size() == static_cast<size_t>(parts[me] * cols * 8),
             what + ": bytes"));
  const double* got = As<double>(r);
  for (int64_t i = 0; i < parts[me]; ++i) {
    for (int64_t c = 0; c < cols; ++c) {
      double acc = prescale * value(0, offset + i, c);
      for (int q = 1; q < size; ++q) {
        acc = Combine(op, acc, prescale * value(q, offset + i, c));
      }
      if (op == ReduceOp::kAverage) acc /= size;
      acc *= postscale;
      const double g = got[i * cols + c];
      if (std::fabs(g - acc) > 1e-9 * std::max(1.0, std::fabs(acc))) {
        return Expect(false, absl::StrCat(what, ": row ", offset + i, " col ",
                                          c, " is ", g, ", expected ", acc));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ReducescatterOps(int rank, Engine& engine) {
  const int size = engine.size();
  struct Case {
    ReduceOp op;
    double prescale, postscale;
    int64_t rows;
  };
  const std::vector<Case> cases = {
      {ReduceOp::kSum, 1.0, 1.0, 2 * size + 1},  // Uneven parts.
      {ReduceOp::kSum, 0.5, 3.0, 3 * size},      // Scaled, even.
      {ReduceOp::kAverage, 2.0, 0.25, 2 * size - 1},
      {ReduceOp::kMin, 1.0, 1.0, size + 1},
      {ReduceOp::kMax, 1.0, 1.0, size},
      {ReduceOp::kProduct, 1.0, 1.0, 2 * size + 1},
      {ReduceOp::kSum, 1.0, 1.0, size - 1},  // A rank gets no row.
      {ReduceOp::kSum, 1.0, 1.0, 0},         // Nothing at all.
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    const Case& c = cases[k];
    TERSE_RETURN_IF_ERROR(CheckedReducescatter(engine, absl::StrCat("rs", k),
                                               rank, size, c.rows, c.op,
                                               c.prescale, c.postscale, 0));
  }
  return absl::OkStatus();
}

// Dtype or trailing dimensions that differ: an error on every rank naming
// the tensor and the ranks on each side.
absl::Status ExchangeMismatch(int rank, Engine& engine) {
  const int size = engine.size();
  const int64_t cols = rank == 1 ? 3 : 2;
  std::vector<float> in(size * cols, 1.0f);
  TERSE_ASSIGN_OR_RETURN(
      Handle a,
      engine.AlltoallAsync(
          "a2a_bad", TensorView(in.data(), size * cols, DataType::kFloat32),
          {size, cols}, {}));
  const absl::Status sa = engine.Wait(a);
  const std::string others = RanksPhrase(AllBut(size, 1));
  TERSE_RETURN_IF_ERROR(ExpectContains(
      sa, absl::StrCat("tensor 'a2a_bad': dimensions after the first [2] on ",
                       others, " but [3] on rank 1")));
  TERSE_RETURN_IF_ERROR(
      Expect(sa.code() == absl::StatusCode::kInvalidArgument, "a2a code"));
  // Reducescatter: rank 1 sends float32, the others float64.
  std::vector<double> d(4, 1.0);
  std::vector<float> f(4, 1.0f);
  TensorView view = rank == 1 ? TensorView(f.data(), 4, DataType::kFloat32)
                              : TensorView(d.data(), 4, DataType::kFloat64);
  TERSE_ASSIGN_OR_RETURN(
      Handle b, engine.ReducescatterAsync("rs_bad", view, {4}, ReduceOp::kSum));
  TERSE_RETURN_IF_ERROR(ExpectContains(
      engine.Wait(b), absl::StrCat("tensor 'rs_bad': dtype f64 on ", others,
                                   " but f32 on rank 1")));
  // The engine goes on: a good alltoall after the failed ones.
  return CheckedAlltoall(engine, "a2a_after", rank, size, 1, 0);
}

// Splits that do not fit, passed by one rank only: the op fails on every
// rank at Wait, naming that rank and the reason (nobody waits for it).
absl::Status ExchangeBadSplits(int rank, Engine& engine) {
  const int size = engine.size();
  const int bad_rank = size - 1;
  std::vector<float> in(4 * (size + 1), 0.0f);
  auto run = [&](const std::string& name, int64_t rows,
                 std::vector<int64_t> bad_splits, const std::string& reason) {
    std::vector<int64_t> splits =
        rank == bad_rank ? bad_splits : std::vector<int64_t>(size, 1);
    const int64_t mine = rank == bad_rank ? rows : size;
    TensorView sent(in.data(), mine, DataType::kFloat32);
    absl::StatusOr<Handle> h = engine.AlltoallAsync(name, sent, {mine}, splits);
    if (!h.ok()) return h.status();
    return ExpectContains(engine.Wait(*h),
                          absl::StrCat("tensor '", name, "': rank ", bad_rank,
                                       " refused it: ", reason));
  };
  TERSE_RETURN_IF_ERROR(
      run("odd", size + 1, {},
          absl::StrCat("the first dimension ", size + 1,
                       " is not divisible by the number of ranks ", size)));
  TERSE_RETURN_IF_ERROR(run(
      "short", size + 1, {size + 1},
      absl::StrCat("splits has 1 entries, one per rank needed (", size, ")")));
  TERSE_RETURN_IF_ERROR(
      run("sum", size + 1, std::vector<int64_t>(size, 0),
          absl::StrCat("splits sum to 0, the first dimension of the tensor is ",
                       size + 1)));
  std::vector<int64_t> negative(size, 0);
  negative[0] = -1;
  negative[1] = size + 2;
  TERSE_RETURN_IF_ERROR(run("neg", size + 1, negative, "split -1 outside"));
  // The engine goes on.
  return CheckedAlltoall(engine, "a2a_after_refusal", rank, size, 2, 0);
}

// Arguments refused at enqueue, on this rank alone.
absl::Status ExchangeBadArguments(int /*rank*/, Engine& engine) {
  const int size = engine.size();
  std::vector<float> in(4 * (size + 1), 0.0f);
  TensorView view(in.data(), size + 1, DataType::kFloat32);
  TERSE_RETURN_IF_ERROR(ExpectContains(
      engine
          .AlltoallAsync("scalar", TensorView(in.data(), 1, DataType::kFloat32),
                         {}, {})
          .status(),
      "needs at least one dimension"));
  TERSE_RETURN_IF_ERROR(ExpectContains(
      engine.ReducescatterAsync("ada", view, {size + 1}, ReduceOp::kAdasum)
          .status(),
      "reducescatter of 'ada': adasum is not supported"));
  std::vector<int32_t> ints(4, 0);
  TERSE_RETURN_IF_ERROR(ExpectContains(
      engine
          .ReducescatterAsync("int_scaled",
                              TensorView(ints.data(), 4, DataType::kInt32), {4},
                              ReduceOp::kSum, 2.0)
          .status(),
      "prescale/postscale need a floating-point dtype"));
  // A device tensor (never touched: refused before anything runs).
  TensorView device(in.data(), 2 * size, DataType::kFloat32, Device::Cuda(0));
  const absl::Status dev =
      engine.AlltoallAsync("dev", device, {2 * size}, {}).status();
  TERSE_RETURN_IF_ERROR(Expect(dev.code() == absl::StatusCode::kUnimplemented,
                               "device alltoall code"));
  TERSE_RETURN_IF_ERROR(ExpectContains(dev, "alltoall of 'dev': cuda"));
  const absl::Status dev_rs =
      engine.ReducescatterAsync("dev_rs", device, {2 * size}, ReduceOp::kSum)
          .status();
  TERSE_RETURN_IF_ERROR(Expect(
      dev_rs.code() == absl::StatusCode::kUnimplemented, "device rs code"));
  return ExpectContains(dev_rs, "reducescatter of 'dev_rs'");
}

// A process set of world ranks 1 .. size-1: its members exchange among
// themselves (set ranks), rank 0 is refused.
absl::Status ExchangeProcessSet(int rank, Engine& engine) {
  const int size = engine.size();
  std::vector<int> members;
  for (int r = 1; r < size; ++r) members.push_back(r);
  TERSE_ASSIGN_OR_RETURN(int32_t set, engine.AddProcessSet(members));
  const int set_size = size - 1;
  if (rank == 0) {
    std::vector<float> in(2, 0.0f);
    TERSE_RETURN_IF_ERROR(
        Expect(!engine
                    .AlltoallAsync("ps_a2a",
                                   TensorView(in.data(), 2, DataType::kFloat32),
                                   {2}, {}, nullptr, set)
                    .ok(),
               "alltoall on a set without this rank"));
  } else {
    const int me = rank - 1;
    for (int step = 0; step < 3; ++step) {
      TERSE_RETURN_IF_ERROR(
          CheckedAlltoall(engine, "ps_a2a", me, set_size, step, set));
    }
    TERSE_RETURN_IF_ERROR(
        CheckedReducescatter(engine, "ps_rs", me, set_size, 2 * set_size + 1,
                             ReduceOp::kAverage, 1.0, 1.0, set));
  }
  // Meanwhile the global set still exchanges over every rank.
  TERSE_RETURN_IF_ERROR(
      CheckedAlltoall(engine, "global_a2a", rank, size, 2, 0));
  return engine.RemoveProcessSet(set);
}

}  // namespace

std::vector<Scenario> ExchangeScenarios() {
  return {
      {"AlltoallUneven", nullptr, AlltoallUneven},
      {"AlltoallEqualAndEmpty", nullptr, AlltoallEqualAndEmpty},
      {"ReducescatterOps", nullptr, ReducescatterOps},
      {"ExchangeMismatch", nullptr, ExchangeMismatch},
      {"ExchangeBadSplits", nullptr, ExchangeBadSplits},
      {"ExchangeBadArguments", nullptr, ExchangeBadArguments},
      {"ExchangeProcessSet", nullptr, ExchangeProcessSet},
  };
}

}  // namespace testing
}  // namespace terse
