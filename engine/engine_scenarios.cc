// Correctness scenarios (see engine_testing.h): sums in any submission
// order, fusion of many small tensors, stable buckets and the response cache
// in the steady state, mixed dtypes, zero-size tensors, broadcast, allgather,
// scaling, callbacks.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/half.h"
#include "common/status.h"
#include "engine/engine_testing.h"

namespace terse {
namespace testing {
namespace {

// Element i of tensor t on rank r: small integers, so that sums are exact
// in every floating-point type.
double Value(int r, int t, int64_t i) {
  return static_cast<double>((r + 1) * ((t + i) % 5 + 1));
}

double SumOverRanks(int size, int t, int64_t i) {
  double s = 0;
  for (int r = 0; r < size; ++r) s += Value(r, t, i);
  return s;
}

// Allreduces one float tensor per entry of `sizes`, submitted in a
// rank-specific order, and checks every sum.
absl::Status AllreduceStep(int rank, Engine& engine,
                           const std::vector<int64_t>& sizes, int seed,
                           const std::string& prefix) {
  const int n = static_cast<int>(sizes.size());
  std::vector<std::vector<float>> tensors(n);
  for (int t = 0; t < n; ++t) {
    tensors[t].resize(sizes[t]);
    for (int64_t i = 0; i < sizes[t]; ++i) tensors[t][i] = Value(rank, t, i);
  }
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937 rng(seed * 31 + rank);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<Handle> handles(n);
  for (int t : order) {
    TensorView view(tensors[t].data(), sizes[t], DataType::kFloat32);
    TERSE_ASSIGN_OR_RETURN(
        handles[t], engine.AllreduceAsync(absl::StrCat(prefix, t), view, view,
                                          {sizes[t]}, ReduceOp::kSum));
  }
  for (int t : order) TERSE_RETURN_IF_ERROR(engine.Wait(handles[t]));
  for (int t = 0; t < n; ++t) {
    for (int64_t i = 0; i < sizes[t]; ++i) {
      const double want = SumOverRanks(engine.size(), t, i);
      if (tensors[t][i] != want) {
        return absl::InternalError(absl::StrCat(
            "tensor ", t, "[", i, "] = ", tensors[t][i], ", want ", want));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status DifferentOrders(int rank, Engine& engine) {
  const std::vector<int64_t> sizes = {1, 7, 100, 1000, 3, 4096, 17, 250, 9, 64};
  for (int step = 0; step < 3; ++step) {
    TERSE_RETURN_IF_ERROR(AllreduceStep(rank, engine, sizes, step, "t"));
  }
  return absl::OkStatus();
}

absl::Status ManySmallTensors(int rank, Engine& engine) {
  std::vector<int64_t> sizes(300);
  for (int t = 0; t < 300; ++t) sizes[t] = 1 + (t * 37) % 100;
  TERSE_RETURN_IF_ERROR(AllreduceStep(rank, engine, sizes, 0, "small"));
  const EngineStats first = engine.stats();
  TERSE_RETURN_IF_ERROR(
      Expect(first.buckets >= 1 && first.buckets < 300,
             absl::StrCat("buckets after step 1: ", first.buckets)));
  for (int step = 1; step < 4; ++step) {
    TERSE_RETURN_IF_ERROR(AllreduceStep(rank, engine, sizes, step, "small"));
  }
  const EngineStats later = engine.stats();
  TERSE_RETURN_IF_ERROR(Expect(
      later.buckets == first.buckets,
      absl::StrCat("buckets changed: ", first.buckets, " -> ", later.buckets)));
  // Steady state: every tensor hits the response cache, so this rank sends
  // nothing through the coordinator in later steps.
  TERSE_RETURN_IF_ERROR(
      Expect(later.requests_sent == first.requests_sent,
             absl::StrCat("requests through the coordinator ",
                          first.requests_sent, " -> ", later.requests_sent)));
  TERSE_RETURN_IF_ERROR(Expect(later.cache_entries == 300, "cache entries"));
  // Each later step ran each bucket exactly once.
  return Expect(
      later.bucket_runs - first.bucket_runs == 3 * first.buckets,
      absl::StrCat("bucket runs ", first.bucket_runs, " -> ", later.bucket_runs,
                   " with ", first.buckets, " buckets"));
}

// TERSE_FORGET_AFTER_STEPS = 3 (engine/bucket_assigner.h): a steady set of
// tensors each step plus one name never used again; the buckets of the
// fresh names go, so the bucket count stops growing, and results stay right.
absl::Status FreshNamesAreForgotten(int rank, Engine& engine) {
  const std::vector<int64_t> steady = {5, 9, 3};
  int64_t at_ten = 0;
  for (int step = 0; step < 40; ++step) {
    TERSE_RETURN_IF_ERROR(AllreduceStep(rank, engine, steady, step, "w"));
    TERSE_RETURN_IF_ERROR(AllreduceStep(rank, engine, {7}, step,
                                        absl::StrCat("fresh.", step, ".")));
    if (step == 10) at_ten = engine.stats().buckets;
  }
  const int64_t later = engine.stats().buckets;
  TERSE_RETURN_IF_ERROR(Expect(
      later <= at_ten && later <= 3 + 3 + 2,
      absl::StrCat("buckets ", at_ten, " at step 10, ", later, " at 40")));
  // A forgotten name that comes back is reduced like a new one.
  return AllreduceStep(rank, engine, {7}, 0, "fresh.0.");
}

absl::Status FusionThreshold(int rank, Engine& engine) {
  std::vector<int64_t> sizes(40, 100);  // 400 bytes each: >= 4 buckets.
  sizes.push_back(5000);                // Larger than the threshold.
  for (int step = 0; step < 2; ++step) {
    TERSE_RETURN_IF_ERROR(AllreduceStep(rank, engine, sizes, step, "f"));
  }
  return Expect(engine.stats().buckets >= 5,
                absl::StrCat("buckets: ", engine.stats().buckets));
}

template <typename T>
std::vector<T> Filled(int rank, int64_t n) {
  std::vector<T> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<T>(Value(rank, 0, i));
  return v;
}

absl::Status MixedDtypes(int rank, Engine& engine) {
  const int64_t n = 33;
  const int size = engine.size();
  std::vector<float> f32 = Filled<float>(rank, n);
  std::vector<double> f64 = Filled<double>(rank, n);
  std::vector<int32_t> i32 = Filled<int32_t>(rank, n);
  std::vector<int64_t> i64 = Filled<int64_t>(rank, n);
  std::vector<uint8_t> u8 = Filled<uint8_t>(rank, n);
  std::vector<float> f32max = Filled<float>(rank, n);
  std::vector<int32_t> i32min = Filled<int32_t>(rank, n);
  std::vector<uint16_t> f16(n), bf16(n);
  for (int64_t i = 0; i < n; ++i) {
    f16[i] = FloatToHalf(static_cast<float>(Value(rank, 0, i)));
    bf16[i] = FloatToBFloat16(static_cast<float>(Value(rank, 0, i)));
  }
  std::vector<Handle> hs;
  auto add = [&](const char* name, void* p, DataType dt, ReduceOp op) {
    TensorView v(p, n, dt);
    auto h = engine.AllreduceAsync(name, v, v, {n}, op);
    if (h.ok()) hs.push_back(*h);
    return h.status();
  };
  TERSE_RETURN_IF_ERROR(
      add("f32", f32.data(), DataType::kFloat32, ReduceOp::kAverage));
  TERSE_RETURN_IF_ERROR(
      add("f64", f64.data(), DataType::kFloat64, ReduceOp::kSum));
  TERSE_RETURN_IF_ERROR(
      add("i32", i32.data(), DataType::kInt32, ReduceOp::kSum));
  TERSE_RETURN_IF_ERROR(
      add("i64", i64.data(), DataType::kInt64, ReduceOp::kSum));
  TERSE_RETURN_IF_ERROR(add("u8", u8.data(), DataType::kUInt8, ReduceOp::kSum));
  TERSE_RETURN_IF_ERROR(
      add("f16", f16.data(), DataType::kFloat16, ReduceOp::kSum));
  TERSE_RETURN_IF_ERROR(
      add("bf16", bf16.data(), DataType::kBFloat16, ReduceOp::kSum));
  TERSE_RETURN_IF_ERROR(
      add("f32max", f32max.data(), DataType::kFloat32, ReduceOp::kMax));
  TERSE_RETURN_IF_ERROR(
      add("i32min", i32min.data(), DataType::kInt32, ReduceOp::kMin));
  for (Handle h : hs) TERSE_RETURN_IF_ERROR(engine.Wait(h));
  for (int64_t i = 0; i < n; ++i) {
    const double sum = SumOverRanks(size, 0, i);
    double mx = 0, mn = 1e9;
    for (int r = 0; r < size; ++r) {
      mx = std::max(mx, Value(r, 0, i));
      mn = std::min(mn, Value(r, 0, i));
    }
    // Sums stay below 256 and are exact in every type, f16/bf16 included.
    if (std::abs(f32[i] - sum / size) > 1e-5 || f64[i] != sum ||
        i32[i] != sum || i64[i] != sum || u8[i] != sum ||
        HalfToFloat(f16[i]) != sum || BFloat16ToFloat(bf16[i]) != sum ||
        f32max[i] != mx || i32min[i] != mn) {
      return absl::InternalError(absl::StrCat("element ", i, " is wrong"));
    }
  }
  return absl::OkStatus();
}

absl::Status Scaling(int rank, Engine& engine) {
  std::vector<double> in = {1.0 + rank, 2.0 + rank}, out(2, -1);
  TERSE_ASSIGN_OR_RETURN(
      Handle h, engine.AllreduceAsync(
                    "scaled", TensorView(in.data(), 2, DataType::kFloat64),
                    TensorView(out.data(), 2, DataType::kFloat64), {2},
                    ReduceOp::kAverage, 2.0, 10.0));
  TERSE_RETURN_IF_ERROR(engine.Wait(h));
  const int n = engine.size();
  // mean(2 * x) * 10 over ranks: x = k + rank.
  const double want0 = 20.0 * (1.0 + (n - 1) / 2.0);
  const double want1 = 20.0 * (2.0 + (n - 1) / 2.0);
  TERSE_RETURN_IF_ERROR(Expect(
      std::abs(out[0] - want0) < 1e-12 && std::abs(out[1] - want1) < 1e-12,
      absl::StrCat("scaled ", out[0], ",", out[1])));
  return Expect(in[0] == 1.0 + rank, "input untouched");
}

absl::Status ZeroSize(int rank, Engine& engine) {
  float dummy = 0;
  TERSE_ASSIGN_OR_RETURN(
      Handle a,
      engine.AllreduceAsync("empty", TensorView(nullptr, 0, DataType::kFloat32),
                            TensorView(nullptr, 0, DataType::kFloat32), {0, 5},
                            ReduceOp::kSum));
  TERSE_ASSIGN_OR_RETURN(
      Handle b,
      engine.BroadcastAsync("empty_b",
                            TensorView(&dummy, 0, DataType::kFloat32), {0}, 1));
  // Rank r contributes r + 1 rows of 2 floats, except rank 1: none.
  auto rows_of = [](int r) { return r == 1 ? 0 : r + 1; };
  std::vector<float> rows(2 * rows_of(rank), static_cast<float>(rank));
  TERSE_ASSIGN_OR_RETURN(
      Handle c, engine.AllgatherAsync(
                    "gather_some_empty",
                    TensorView(rows.data(), static_cast<int64_t>(rows.size()),
                               DataType::kFloat32),
                    {rows_of(rank), 2}));
  TERSE_RETURN_IF_ERROR(engine.Wait(a));
  TERSE_RETURN_IF_ERROR(engine.Wait(b));
  TERSE_RETURN_IF_ERROR(engine.Wait(c));
  TERSE_ASSIGN_OR_RETURN(AllgatherResult r, engine.TakeAllgatherResult(c));
  std::vector<int64_t> dims;
  std::vector<float> want;
  for (int q = 0; q < engine.size(); ++q) {
    dims.push_back(rows_of(q));
    want.insert(want.end(), 2 * rows_of(q), static_cast<float>(q));
  }
  TERSE_RETURN_IF_ERROR(Expect(r.first_dims == dims, "first dims"));
  const int64_t total = static_cast<int64_t>(want.size()) / 2;
  TERSE_RETURN_IF_ERROR(
      Expect(r.shape == std::vector<int64_t>({total, 2}), "shape"));
  TERSE_RETURN_IF_ERROR(
      Expect(r.data.size() == want.size() * sizeof(float), "bytes"));
  const float* f = reinterpret_cast<const float*>(r.data.data());
  return Expect(std::equal(want.begin(), want.end(), f), "allgather data");
}

// Allgathers of rank-dependent first dimensions, repeated: from the second
// step on every rank's request hits the response cache (nothing goes
// through the coordinator); a step where one rank's first dimension
// changes misses it and still gathers right, and the next step hits again.
absl::Status CachedAllgathers(int rank, Engine& engine) {
  auto rows_of = [](int q, int step) {
    return (step == 3 && q == 0) ? 5 : q + 1;  // Step 3: rank 0 sends 5.
  };
  int64_t last_sent = 0;
  for (int step = 0; step < 6; ++step) {
    std::vector<Handle> handles;
    std::vector<std::vector<int32_t>> mine(3);
    for (int t = 0; t < 3; ++t) {
      mine[t].assign(2 * rows_of(rank, step), rank * 10 + t);
      TERSE_ASSIGN_OR_RETURN(
          Handle h,
          engine.AllgatherAsync(
              absl::StrCat("cached_gather.", t),
              TensorView(mine[t].data(), static_cast<int64_t>(mine[t].size()),
                         DataType::kInt32),
              {rows_of(rank, step), 2}));
      handles.push_back(h);
    }
    for (int t = 0; t < 3; ++t) {
      TERSE_RETURN_IF_ERROR(engine.Wait(handles[t]));
      TERSE_ASSIGN_OR_RETURN(AllgatherResult r,
                             engine.TakeAllgatherResult(handles[t]));
      std::vector<int32_t> want;
      std::vector<int64_t> dims;
      for (int q = 0; q < engine.size(); ++q) {
        dims.push_back(rows_of(q, step));
        want.insert(want.end(), 2 * rows_of(q, step), q * 10 + t);
      }
      const int32_t* got = reinterpret_cast<const int32_t*>(r.data.data());
      TERSE_RETURN_IF_ERROR(
          Expect(r.first_dims == dims && r.data.size() == want.size() * 4 &&
                     std::equal(want.begin(), want.end(), got),
                 absl::StrCat("step ", step, " tensor ", t)));
    }
    const int64_t sent = engine.stats().requests_sent;
    if (step == 1 || step == 2 || step == 5) {
      TERSE_RETURN_IF_ERROR(
          Expect(sent == last_sent,
                 absl::StrCat("step ", step, ": ", sent - last_sent,
                              " requests through the coordinator, want none")));
    }
    if (step == 3 || step == 4) {
      // Rank 0's first dimension changed (step 3) and changed back (step
      // 4): its request misses, every rank drops the slot and resends.
      TERSE_RETURN_IF_ERROR(Expect(
          sent > last_sent, absl::StrCat("step ", step, " hit the cache")));
    }
    last_sent = sent;
  }
  return absl::OkStatus();
}

absl::Status BroadcastRoots(int rank, Engine& engine) {
  for (int step = 0; step < 3; ++step) {
    for (int root = 0; root < engine.size(); ++root) {
      std::vector<int64_t> buf(10, rank * 100 + step);
      TERSE_ASSIGN_OR_RETURN(
          Handle h,
          engine.BroadcastAsync(absl::StrCat("bcast", root),
                                TensorView(buf.data(), 10, DataType::kInt64),
                                {2, 5}, root));
      TERSE_RETURN_IF_ERROR(engine.Wait(h));
      for (int64_t v : buf) {
        TERSE_RETURN_IF_ERROR(Expect(v == root * 100 + step, "broadcast"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CallbacksAndPoll(int rank, Engine& engine) {
  std::vector<float> v(4, 1.0f);
  bool called = false;
  absl::Status seen = absl::UnknownError("not called");
  TensorView view(v.data(), 4, DataType::kFloat32);
  TERSE_ASSIGN_OR_RETURN(
      Handle h, engine.AllreduceAsync("cb", view, view, {4}, ReduceOp::kSum,
                                      1.0, 1.0, [&](const absl::Status& s) {
                                        called = true;
                                        seen = s;
                                      }));
  TERSE_RETURN_IF_ERROR(Expect(Eventually([&] {
                                 auto done = engine.Poll(h);
                                 return done.ok() && *done;
                               }),
                               "poll never saw completion"));
  TERSE_RETURN_IF_ERROR(engine.Wait(h));
  TERSE_RETURN_IF_ERROR(Expect(called && seen.ok(), "callback"));
  TERSE_RETURN_IF_ERROR(Expect(v[0] == engine.size(), "sum"));
  return Expect(engine.Poll(h).status().code() == absl::StatusCode::kNotFound,
                "handle released by Wait");
}

absl::Status FewTensorsManySteps(int rank, Engine& engine) {
  const std::vector<int64_t> sizes = {5, 50, 500, 8, 8, 8, 8, 8, 8, 8};
  for (int step = 0; step < 4; ++step) {
    TERSE_RETURN_IF_ERROR(AllreduceStep(rank, engine, sizes, step, "s"));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<Scenario> CorrectnessScenarios() {
  return {
      {"DifferentOrders", nullptr, DifferentOrders},
      {"ManySmallTensors", nullptr, ManySmallTensors},
      {"FusionThreshold", [](Config* c) { c->fusion_threshold_bytes = 4096; },
       FusionThreshold},
      {"MixedDtypes", nullptr, MixedDtypes},
      {"FreshNamesAreForgotten", [](Config* c) { c->forget_after_steps = 3; },
       FreshNamesAreForgotten},
      {"Scaling", nullptr, Scaling},
      {"ZeroSize", nullptr, ZeroSize},
      {"BroadcastRoots", nullptr, BroadcastRoots},
      {"CachedAllgathers", nullptr, CachedAllgathers},
      {"CallbacksAndPoll", nullptr, CallbacksAndPoll},
      {"CacheDisabled", [](Config* c) { c->cache_capacity = 0; },
       FewTensorsManySteps},
      {"TinyCacheEvicts", [](Config* c) { c->cache_capacity = 3; },
       FewTensorsManySteps},
  };
}

}  // namespace testing
}  // namespace terse
