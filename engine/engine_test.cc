// Multi-rank behaviour of the engine with loopback ranks (threads): sums in
// any submission order, fusion of many small tensors, stable buckets and the
// response cache in the steady state, mixed dtypes, zero-size tensors,
// broadcast, allgather, scaling.
#include "engine/engine.h"

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
#include "gtest/gtest.h"

namespace terse {
namespace {

using testing::RunEngines;
using testing::TestConfig;

// Value of element i of tensor t on rank r: small integers, so that sums
// are exact in every floating-point type.
double Value(int r, int t, int64_t i) {
  return static_cast<double>((r + 1) * ((t + i) % 5 + 1));
}

double SumOverRanks(int size, int t, int64_t i) {
  double s = 0;
  for (int r = 0; r < size; ++r) s += Value(r, t, i);
  return s;
}

absl::Status Expect(bool condition, const std::string& what) {
  return condition ? absl::OkStatus() : absl::InternalError(what);
}

// Allreduces `sizes.size()` float tensors, submitted in a rank-specific
// order, and checks the sums.
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
      if (tensors[t][i] != SumOverRanks(engine.size(), t, i)) {
        return absl::InternalError(absl::StrCat(
            "rank ", rank, " tensor ", t, "[", i, "] = ", tensors[t][i],
            ", want ", SumOverRanks(engine.size(), t, i)));
      }
    }
  }
  return absl::OkStatus();
}

TEST(EngineTest, DifferentSubmissionOrdersGiveCorrectSums) {
  const std::vector<int64_t> sizes = {1, 7, 100, 1000, 3, 4096, 17, 250, 9, 64};
  absl::Status status =
      RunEngines(4, TestConfig(), [&](int rank, Engine& engine) {
        for (int step = 0; step < 3; ++step) {
          TERSE_RETURN_IF_ERROR(AllreduceStep(rank, engine, sizes, step, "t"));
        }
        return absl::OkStatus();
      });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(EngineTest, ManySmallTensorsAreFusedAndStayInStableBuckets) {
  std::vector<int64_t> sizes(300);
  for (int t = 0; t < 300; ++t) sizes[t] = 1 + (t * 37) % 100;
  absl::Status status =
      RunEngines(2, TestConfig(), [&](int rank, Engine& engine) {
        TERSE_RETURN_IF_ERROR(AllreduceStep(rank, engine, sizes, 0, "small"));
        const EngineStats first = engine.stats();
        TERSE_RETURN_IF_ERROR(
            Expect(first.buckets >= 1 && first.buckets < 300,
                   absl::StrCat("buckets after step 1: ", first.buckets)));
        for (int step = 1; step < 4; ++step) {
          TERSE_RETURN_IF_ERROR(
              AllreduceStep(rank, engine, sizes, step, "small"));
        }
        const EngineStats later = engine.stats();
        TERSE_RETURN_IF_ERROR(
            Expect(later.buckets == first.buckets,
                   absl::StrCat("buckets changed: ", first.buckets, " -> ",
                                later.buckets)));
        // Steady state: every tensor hits the response cache, so this rank
        // sends nothing through the coordinator in later steps.
        TERSE_RETURN_IF_ERROR(Expect(
            later.requests_sent == first.requests_sent,
            absl::StrCat("requests through the coordinator ",
                         first.requests_sent, " -> ", later.requests_sent)));
        TERSE_RETURN_IF_ERROR(Expect(later.cache_entries == 300, "cache"));
        // Each later step ran each bucket exactly once.
        return Expect(
            later.bucket_runs - first.bucket_runs == 3 * first.buckets,
            absl::StrCat("bucket runs ", first.bucket_runs, " -> ",
                         later.bucket_runs));
      });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(EngineTest, FusionThresholdSplitsBuckets) {
  Config config = TestConfig();
  config.fusion_threshold_bytes = 4096;  // 1024 floats.
  std::vector<int64_t> sizes(40, 100);   // 400 bytes each: >= 4 buckets.
  sizes.push_back(5000);                 // Larger than the threshold.
  absl::Status status = RunEngines(3, config, [&](int rank, Engine& engine) {
    for (int step = 0; step < 2; ++step) {
      TERSE_RETURN_IF_ERROR(AllreduceStep(rank, engine, sizes, step, "f"));
    }
    return Expect(engine.stats().buckets >= 5,
                  absl::StrCat("buckets: ", engine.stats().buckets));
  });
  EXPECT_TRUE(status.ok()) << status;
}

template <typename T>
std::vector<T> Filled(int rank, int64_t n) {
  std::vector<T> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<T>(Value(rank, 0, i));
  return v;
}

TEST(EngineTest, MixedDtypesAndOps) {
  const int64_t n = 33;
  absl::Status status =
      RunEngines(3, TestConfig(), [&](int rank, Engine& engine) {
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
        TERSE_RETURN_IF_ERROR(
            add("u8", u8.data(), DataType::kUInt8, ReduceOp::kSum));
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
          const double sum = SumOverRanks(3, 0, i);
          double mx = 0, mn = 1e9;
          for (int r = 0; r < 3; ++r) {
            mx = std::max(mx, Value(r, 0, i));
            mn = std::min(mn, Value(r, 0, i));
          }
          if (std::abs(f32[i] - sum / 3) > 1e-5 || f64[i] != sum ||
              i32[i] != sum || i64[i] != sum || u8[i] != sum ||
              HalfToFloat(f16[i]) != sum || BFloat16ToFloat(bf16[i]) != sum ||
              f32max[i] != mx || i32min[i] != mn) {
            return absl::InternalError(
                absl::StrCat("rank ", rank, " elem ", i));
          }
        }
        return absl::OkStatus();
      });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(EngineTest, PrescalePostscaleAndOutOfPlace) {
  absl::Status status =
      RunEngines(2, TestConfig(), [&](int rank, Engine& engine) {
        std::vector<double> in = {1.0 + rank, 2.0 + rank}, out(2, -1);
        TERSE_ASSIGN_OR_RETURN(
            Handle h,
            engine.AllreduceAsync("scaled",
                                  TensorView(in.data(), 2, DataType::kFloat64),
                                  TensorView(out.data(), 2, DataType::kFloat64),
                                  {2}, ReduceOp::kAverage, 2.0, 10.0));
        TERSE_RETURN_IF_ERROR(engine.Wait(h));
        // ((1 + 2) * 2 / 2) * 10 = 30; ((2 + 3) * 2 / 2) * 10 = 50.
        TERSE_RETURN_IF_ERROR(Expect(out[0] == 30 && out[1] == 50, "values"));
        return Expect(in[0] == 1.0 + rank, "input untouched");
      });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(EngineTest, ZeroSizeTensors) {
  absl::Status status =
      RunEngines(3, TestConfig(), [&](int rank, Engine& engine) {
        float dummy = 0;
        std::vector<Handle> hs;
        TERSE_ASSIGN_OR_RETURN(
            Handle a, engine.AllreduceAsync(
                          "empty", TensorView(nullptr, 0, DataType::kFloat32),
                          TensorView(nullptr, 0, DataType::kFloat32), {0, 5},
                          ReduceOp::kSum));
        TERSE_ASSIGN_OR_RETURN(
            Handle b,
            engine.BroadcastAsync(
                "empty_b", TensorView(&dummy, 0, DataType::kFloat32), {0}, 1));
        std::vector<float> rows(rank == 1 ? 0 : 2 * rank + 2, rank);
        TERSE_ASSIGN_OR_RETURN(
            Handle c,
            engine.AllgatherAsync(
                "gather_some_empty",
                TensorView(rows.data(), static_cast<int64_t>(rows.size()),
                           DataType::kFloat32),
                {static_cast<int64_t>(rows.size()) / 2, 2}));
        TERSE_RETURN_IF_ERROR(engine.Wait(a));
        TERSE_RETURN_IF_ERROR(engine.Wait(b));
        TERSE_RETURN_IF_ERROR(engine.Wait(c));
        TERSE_ASSIGN_OR_RETURN(AllgatherResult r,
                               engine.TakeAllgatherResult(c));
        TERSE_RETURN_IF_ERROR(Expect(
            r.first_dims == std::vector<int64_t>({1, 0, 3}), "first dims"));
        TERSE_RETURN_IF_ERROR(
            Expect(r.shape == std::vector<int64_t>({4, 2}), "shape"));
        const float* f = reinterpret_cast<const float*>(r.data.data());
        return Expect(r.data.size() == 8 * sizeof(float) && f[0] == 0 &&
                          f[1] == 0 && f[2] == 2 && f[7] == 2,
                      "allgather data");
      });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(EngineTest, BroadcastFromEveryRootRepeatedly) {
  absl::Status status =
      RunEngines(3, TestConfig(), [&](int rank, Engine& engine) {
        for (int step = 0; step < 3; ++step) {
          for (int root = 0; root < 3; ++root) {
            std::vector<int64_t> buf(10, rank * 100 + step);
            TERSE_ASSIGN_OR_RETURN(
                Handle h, engine.BroadcastAsync(
                              absl::StrCat("bcast", root),
                              TensorView(buf.data(), 10, DataType::kInt64),
                              {2, 5}, root));
            TERSE_RETURN_IF_ERROR(engine.Wait(h));
            for (int64_t v : buf) {
              TERSE_RETURN_IF_ERROR(
                  Expect(v == root * 100 + step, "broadcast value"));
            }
          }
        }
        return absl::OkStatus();
      });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(EngineTest, CallbacksRunBeforeWaitReturnsAndPollSeesCompletion) {
  absl::Status status =
      RunEngines(2, TestConfig(), [&](int rank, Engine& engine) {
        std::vector<float> v(4, 1.0f);
        bool called = false;
        absl::Status seen = absl::UnknownError("not called");
        TERSE_ASSIGN_OR_RETURN(
            Handle h, engine.AllreduceAsync(
                          "cb", TensorView(v.data(), 4, DataType::kFloat32),
                          TensorView(v.data(), 4, DataType::kFloat32), {4},
                          ReduceOp::kSum, 1.0, 1.0, [&](const absl::Status& s) {
                            called = true;
                            seen = s;
                          }));
        while (true) {
          TERSE_ASSIGN_OR_RETURN(bool done, engine.Poll(h));
          if (done) break;
        }
        TERSE_RETURN_IF_ERROR(engine.Wait(h));
        TERSE_RETURN_IF_ERROR(Expect(called && seen.ok(), "callback"));
        return Expect(
            engine.Poll(h).status().code() == absl::StatusCode::kNotFound,
            "handle released by Wait");
      });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(EngineTest, CacheDisabledStillWorks) {
  Config config = TestConfig();
  config.cache_capacity = 0;
  const std::vector<int64_t> sizes = {5, 50, 500};
  absl::Status status = RunEngines(3, config, [&](int rank, Engine& engine) {
    for (int step = 0; step < 3; ++step) {
      TERSE_RETURN_IF_ERROR(AllreduceStep(rank, engine, sizes, step, "nc"));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(EngineTest, TinyCacheEvictsAndStaysConsistent) {
  Config config = TestConfig();
  config.cache_capacity = 3;
  std::vector<int64_t> sizes(10, 8);
  absl::Status status = RunEngines(3, config, [&](int rank, Engine& engine) {
    for (int step = 0; step < 4; ++step) {
      TERSE_RETURN_IF_ERROR(AllreduceStep(rank, engine, sizes, step, "ev"));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

}  // namespace
}  // namespace terse
