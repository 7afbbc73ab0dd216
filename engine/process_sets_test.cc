// Process sets through the engine on loopback ranks (threads of this
// process, each with its own engine): static and dynamic sets, disjoint and
// overlapping, per-set names and buckets, ranks outside a set, mismatches,
// compression on a set. Every result is checked against sums computed
// directly from the inputs every rank is known to hold.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/loopback/loopback.h"
#include "common/status.h"
#include "engine/engine.h"
#include "engine/engine_testing.h"
#include "gtest/gtest.h"

namespace terse {
namespace testing {
namespace {

using Body = std::function<absl::Status(int rank, Engine& engine)>;

absl::Status RunSets(int size, const EngineOptions& options, const Body& body) {
  Scenario scenario;
  scenario.name = "process_sets";
  scenario.body = body;
  const Config config = ScenarioConfig(scenario);
  return RunLoopbackRanks(size, [&](int rank, Communicator* comm) {
    TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                           Engine::Create(config, comm, options));
    return FinishScenario(scenario, rank, std::move(engine));
  });
}

std::vector<int> Range(int begin, int end) {
  std::vector<int> ranks;
  for (int r = begin; r < end; ++r) ranks.push_back(r);
  return ranks;
}

bool Contains(const std::vector<int>& ranks, int rank) {
  return std::find(ranks.begin(), ranks.end(), rank) != ranks.end();
}

// Element i of tensor t on world rank r.
float Value(int r, int t, int64_t i) {
  return static_cast<float>((r + 1) * 10 + (t + i) % 7);
}

// Allreduces `n` tensors named prefix+t over `set` (ranks `ranks`), sizes
// 1 + 13 t, in an order that depends on the rank, and checks each sum
// against the members' inputs.
absl::Status SumOnSet(int rank, Engine& engine, int32_t set,
                      const std::vector<int>& ranks, const std::string& prefix,
                      int n, const std::string& compression = "") {
  std::vector<std::vector<float>> tensors(n);
  std::vector<Handle> handles(n);
  for (int k = 0; k < n; ++k) {
    const int t = (rank % 2 == 0) ? k : n - 1 - k;
    tensors[t].resize(1 + 13 * t);
    for (size_t i = 0; i < tensors[t].size(); ++i) {
      tensors[t][i] = Value(rank, t, static_cast<int64_t>(i));
    }
    TensorView view(tensors[t].data(), static_cast<int64_t>(tensors[t].size()),
                    DataType::kFloat32);
    TERSE_ASSIGN_OR_RETURN(
        handles[t],
        engine.AllreduceAsync(absl::StrCat(prefix, t), view, view,
                              {view.count}, ReduceOp::kSum, 1.0, 1.0, nullptr,
                              compression, nullptr, set));
  }
  for (int t = 0; t < n; ++t) TERSE_RETURN_IF_ERROR(engine.Wait(handles[t]));
  for (int t = 0; t < n; ++t) {
    for (size_t i = 0; i < tensors[t].size(); ++i) {
      double want = 0;
      for (int r : ranks) want += Value(r, t, static_cast<int64_t>(i));
      if (tensors[t][i] != want) {
        return absl::InternalError(absl::StrCat(
            "set ", set, " tensor ", prefix, t, "[", i, "] = ", tensors[t][i],
            ", want ", want));
      }
    }
  }
  return absl::OkStatus();
}

// Allgather over `set`: world rank r contributes r + 1 rows of 2 values.
absl::Status GatherOnSet(int rank, Engine& engine, int32_t set,
                         const std::vector<int>& ranks) {
  std::vector<int32_t> mine(2 * (rank + 1));
  for (size_t i = 0; i < mine.size(); ++i) {
    mine[i] = rank * 100 + static_cast<int32_t>(i);
  }
  TensorView view(mine.data(), static_cast<int64_t>(mine.size()),
                  DataType::kInt32);
  TERSE_ASSIGN_OR_RETURN(Handle h,
                         engine.AllgatherAsync("gather", view, {rank + 1, 2},
                                               nullptr, nullptr, set));
  TERSE_RETURN_IF_ERROR(engine.Wait(h));
  TERSE_ASSIGN_OR_RETURN(AllgatherResult result,
                         engine.TakeAllgatherResult(h));
  std::vector<int32_t> want;
  std::vector<int64_t> dims;
  for (int r : ranks) {
    dims.push_back(r + 1);
    for (int i = 0; i < 2 * (r + 1); ++i) want.push_back(r * 100 + i);
  }
  std::vector<int32_t> got(want.size());
  if (result.data.size() != want.size() * sizeof(int32_t)) {
    return absl::InternalError(absl::StrCat("set ", set, " gathered ",
                                            result.data.size(), " bytes"));
  }
  std::copy_n(reinterpret_cast<const int32_t*>(result.data.data()),
              want.size(), got.begin());
  if (got != want || result.first_dims != dims) {
    return absl::InternalError(
        absl::StrCat("set ", set, " allgather [", absl::StrJoin(got, ","),
                     "] first dims [", absl::StrJoin(result.first_dims, ","),
                     "]"));
  }
  return absl::OkStatus();
}

// Broadcast over `set` from its last member (a world rank).
absl::Status BroadcastOnSet(int rank, Engine& engine, int32_t set,
                            const std::vector<int>& ranks) {
  const int root = ranks.back();
  std::vector<double> buffer(5, rank + 0.5);
  TensorView view(buffer.data(), 5, DataType::kFloat64);
  TERSE_ASSIGN_OR_RETURN(Handle h, engine.BroadcastAsync("bcast", view, {5},
                                                         root, nullptr,
                                                         nullptr, set));
  TERSE_RETURN_IF_ERROR(engine.Wait(h));
  for (double v : buffer) {
    if (v != root + 0.5) {
      return absl::InternalError(
          absl::StrCat("set ", set, " broadcast got ", v, " want ", root + 0.5));
    }
  }
  return absl::OkStatus();
}

class ProcessSetsTest : public ::testing::TestWithParam<int> {};

// Static halves {0..n/2-1} and {n/2..n-1}: allreduce (fused buckets, the
// same names as on the global set at the same time), allgather, broadcast
// and barrier per half.
TEST_P(ProcessSetsTest, StaticDisjointHalves) {
  const int size = GetParam();
  const std::vector<int> lower = Range(0, size / 2);
  const std::vector<int> upper = Range(size / 2, size);
  EngineOptions options;
  options.process_sets = {lower, upper};
  absl::Status status = RunSets(size, options, [&](int rank, Engine& engine) {
    TERSE_RETURN_IF_ERROR(Expect(
        engine.ProcessSetIds() == std::vector<int32_t>({0, 1, 2}), "set ids"));
    TERSE_ASSIGN_OR_RETURN(std::vector<int> ranks1, engine.ProcessSetRanks(1));
    TERSE_RETURN_IF_ERROR(Expect(ranks1 == lower, "set 1 ranks"));
    const int32_t set = rank < size / 2 ? 1 : 2;
    const std::vector<int>& mine = set == 1 ? lower : upper;
    for (int step = 0; step < 3; ++step) {
      // The same names on the global set and on this rank's half: names are
      // per set, and the two never share a bucket.
      std::vector<float> global(4, static_cast<float>(rank));
      TensorView gview(global.data(), 4, DataType::kFloat32);
      TERSE_ASSIGN_OR_RETURN(
          Handle g, engine.AllreduceAsync("t0", gview, gview, {4},
                                          ReduceOp::kSum));
      TERSE_RETURN_IF_ERROR(SumOnSet(rank, engine, set, mine, "t", 12));
      TERSE_RETURN_IF_ERROR(engine.Wait(g));
      const float want = static_cast<float>(size * (size - 1) / 2);
      TERSE_RETURN_IF_ERROR(Expect(global[0] == want, "global sum"));
    }
    TERSE_RETURN_IF_ERROR(GatherOnSet(rank, engine, set, mine));
    TERSE_RETURN_IF_ERROR(BroadcastOnSet(rank, engine, set, mine));
    TERSE_RETURN_IF_ERROR(engine.Barrier(set));
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

// A rank outside a set, an unknown set, a root outside the set.
TEST_P(ProcessSetsTest, RankOutsideTheSet) {
  const int size = GetParam();
  EngineOptions options;
  options.process_sets = {{0}};
  absl::Status status = RunSets(size, options, [&](int rank, Engine& engine) {
    float x = 1;
    TensorView view(&x, 1, DataType::kFloat32);
    absl::StatusOr<Handle> h = engine.AllreduceAsync(
        "x", view, view, {1}, ReduceOp::kSum, 1.0, 1.0, nullptr, "", nullptr,
        1);
    if (rank == 0) {
      TERSE_RETURN_IF_ERROR(h.status());
      TERSE_RETURN_IF_ERROR(engine.Wait(*h));
      TERSE_RETURN_IF_ERROR(Expect(x == 1, "a one-rank set's sum"));
      absl::StatusOr<Handle> b = engine.BroadcastAsync(
          "b", view, {1}, /*root_rank=*/1, nullptr, nullptr, 1);
      TERSE_RETURN_IF_ERROR(Expect(absl::IsInvalidArgument(b.status()),
                                   "root outside the set refused"));
      TERSE_RETURN_IF_ERROR(ExpectContains(b.status(), "root rank 1"));
    } else {
      TERSE_RETURN_IF_ERROR(
          Expect(absl::IsInvalidArgument(h.status()), "non-member refused"));
      TERSE_RETURN_IF_ERROR(ExpectContains(
          h.status(), absl::StrCat("this rank (", rank,
                                   ") is not in process set 1 (ranks [0])")));
      TERSE_RETURN_IF_ERROR(ExpectContains(h.status(), "tensor 'x'"));
    }
    absl::StatusOr<Handle> unknown = engine.AllreduceAsync(
        "y", view, view, {1}, ReduceOp::kSum, 1.0, 1.0, nullptr, "", nullptr,
        7);
    TERSE_RETURN_IF_ERROR(ExpectContains(unknown.status(),
                                         "process set 7 is not registered"));
    TERSE_RETURN_IF_ERROR(Expect(!engine.Barrier(1).ok() || rank == 0,
                                 "a non-member's barrier refused"));
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

// Members disagree on a shape: the op fails on every member, naming the
// tensor, the set and its world ranks; the set keeps working.
TEST_P(ProcessSetsTest, MismatchNamesTensorSetAndRanks) {
  const int size = GetParam();
  const std::vector<int> upper = Range(size / 2, size);
  EngineOptions options;
  options.process_sets = {upper};
  absl::Status status = RunSets(size, options, [&](int rank, Engine& engine) {
    if (!Contains(upper, rank)) return absl::OkStatus();
    std::vector<float> x(rank == upper.back() ? 3 : 2, 1.0f);
    TensorView view(x.data(), static_cast<int64_t>(x.size()),
                    DataType::kFloat32);
    TERSE_ASSIGN_OR_RETURN(
        Handle h, engine.AllreduceAsync("w", view, view, {view.count},
                                        ReduceOp::kSum, 1.0, 1.0, nullptr, "",
                                        nullptr, 1));
    absl::Status failed = engine.Wait(h);
    if (upper.size() > 1) {
      TERSE_RETURN_IF_ERROR(
          Expect(absl::IsInvalidArgument(failed), "mismatch is an error"));
      TERSE_RETURN_IF_ERROR(ExpectContains(failed, "tensor 'w'"));
      TERSE_RETURN_IF_ERROR(ExpectContains(failed, "process set 1"));
      TERSE_RETURN_IF_ERROR(ExpectContains(
          failed, absl::StrCat("world ranks ", absl::StrJoin(upper, ","))));
      TERSE_RETURN_IF_ERROR(ExpectContains(failed, "shape"));
    }
    return SumOnSet(rank, engine, 1, upper, "after", 3);
  });
  EXPECT_TRUE(status.ok()) << status;
}

// A set of every rank is the global set; a repeated set is refused.
TEST_P(ProcessSetsTest, BadStaticSetsFailCreate) {
  const int size = GetParam();
  const Config config = ScenarioConfig(Scenario());
  for (const auto& sets : std::vector<std::vector<std::vector<int>>>{
           {Range(0, size)}, {{0}, {0}}, {{1, 0}}, {{size}}}) {
    absl::Status status =
        RunLoopbackRanks(size, [&](int rank, Communicator* comm) {
          EngineOptions options;
          options.process_sets = sets;
          absl::StatusOr<std::unique_ptr<Engine>> engine =
              Engine::Create(config, comm, options);
          return Expect(absl::IsInvalidArgument(engine.status()),
                        absl::StrCat("rank ", rank, ": ",
                                     engine.status().ToString()));
        });
    EXPECT_TRUE(status.ok()) << status;
  }
}

// Dynamic sets: added and removed collectively; duplicates and ranks that
// differ between callers are errors on every rank.
TEST_P(ProcessSetsTest, AddAndRemove) {
  const int size = GetParam();
  absl::Status status = RunSets(size, {}, [&](int rank, Engine& engine) {
    const std::vector<int> odd = [&] {
      std::vector<int> r;
      for (int i = 1; i < size; i += 2) r.push_back(i);
      return r;
    }();
    TERSE_ASSIGN_OR_RETURN(int32_t id, engine.AddProcessSet(odd));
    TERSE_RETURN_IF_ERROR(Expect(id == 1, "first dynamic id is 1"));
    if (Contains(odd, rank)) {
      TERSE_RETURN_IF_ERROR(SumOnSet(rank, engine, id, odd, "odd", 5));
    }
    absl::StatusOr<int32_t> again = engine.AddProcessSet(odd);
    TERSE_RETURN_IF_ERROR(
        Expect(absl::IsAlreadyExists(again.status()), "duplicate refused"));
    absl::StatusOr<int32_t> all = engine.AddProcessSet(Range(0, size));
    TERSE_RETURN_IF_ERROR(
        Expect(absl::IsAlreadyExists(all.status()), "global set refused"));
    // Rank 0 asks for another set than the rest.
    absl::StatusOr<int32_t> differ =
        engine.AddProcessSet(rank == 0 ? std::vector<int>{0} : Range(0, 1 + 1));
    TERSE_RETURN_IF_ERROR(
        Expect(absl::IsInvalidArgument(differ.status()), "differing ranks"));
    TERSE_RETURN_IF_ERROR(ExpectContains(differ.status(), "process set ranks"));
    TERSE_RETURN_IF_ERROR(engine.RemoveProcessSet(id));
    TERSE_RETURN_IF_ERROR(Expect(!engine.ProcessSetRanks(id).ok(), "removed"));
    absl::Status gone = engine.RemoveProcessSet(id);
    TERSE_RETURN_IF_ERROR(Expect(absl::IsNotFound(gone), "removed twice"));
    float x = 1;
    TensorView view(&x, 1, DataType::kFloat32);
    absl::StatusOr<Handle> h = engine.AllreduceAsync(
        "x", view, view, {1}, ReduceOp::kSum, 1.0, 1.0, nullptr, "", nullptr,
        id);
    TERSE_RETURN_IF_ERROR(ExpectContains(h.status(), "not registered"));
    // A new set after the removal gets a new id and works.
    TERSE_ASSIGN_OR_RETURN(int32_t next, engine.AddProcessSet(odd));
    TERSE_RETURN_IF_ERROR(Expect(next == 2, "ids are not reused"));
    if (Contains(odd, rank)) {
      TERSE_RETURN_IF_ERROR(SumOnSet(rank, engine, next, odd, "odd", 2));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

// fp16 compression on a set: small integers, so the sum is exact.
TEST_P(ProcessSetsTest, CompressionOnASet) {
  const int size = GetParam();
  const std::vector<int> lower = Range(0, std::max(size / 2, 1));
  EngineOptions options;
  options.process_sets = {lower};
  absl::Status status = RunSets(size, options, [&](int rank, Engine& engine) {
    if (!Contains(lower, rank)) return absl::OkStatus();
    for (int step = 0; step < 2; ++step) {
      TERSE_RETURN_IF_ERROR(
          SumOnSet(rank, engine, 1, lower, "c", 4, /*compression=*/"fp16"));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

INSTANTIATE_TEST_SUITE_P(Ranks, ProcessSetsTest, ::testing::Values(2, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return absl::StrCat(info.param, "ranks");
                         });

// Overlapping sets {0,1,2} and {1,2,3}: ranks 1 and 2 are in both and
// enqueue on them in opposite orders; every rank serves the sets in id
// order, so nothing waits in a cycle.
TEST(ProcessSetsOverlapTest, FourRanks) {
  const std::vector<int> a = {0, 1, 2};
  const std::vector<int> b = {1, 2, 3};
  EngineOptions options;
  options.process_sets = {a, b};
  absl::Status status = RunSets(4, options, [&](int rank, Engine& engine) {
    for (int step = 0; step < 3; ++step) {
      std::vector<float> xa(3, static_cast<float>(rank + 1));
      std::vector<float> xb(3, static_cast<float>(10 * (rank + 1)));
      TensorView va(xa.data(), 3, DataType::kFloat32);
      TensorView vb(xb.data(), 3, DataType::kFloat32);
      std::vector<std::pair<int32_t, TensorView>> ops;
      if (Contains(a, rank)) ops.push_back({1, va});
      if (Contains(b, rank)) ops.push_back({2, vb});
      if (rank == 2) std::reverse(ops.begin(), ops.end());
      std::vector<Handle> handles;
      for (const auto& [set, view] : ops) {
        TERSE_ASSIGN_OR_RETURN(
            Handle h, engine.AllreduceAsync("same", view, view, {3},
                                            ReduceOp::kSum, 1.0, 1.0, nullptr,
                                            "", nullptr, set));
        handles.push_back(h);
      }
      for (Handle h : handles) TERSE_RETURN_IF_ERROR(engine.Wait(h));
      if (Contains(a, rank)) {
        TERSE_RETURN_IF_ERROR(Expect(xa[0] == 1 + 2 + 3, "sum over {0,1,2}"));
      }
      if (Contains(b, rank)) {
        TERSE_RETURN_IF_ERROR(
            Expect(xb[2] == 10 * (2 + 3 + 4), "sum over {1,2,3}"));
      }
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

// ProcessSetScenarios on 4 loopback ranks (the same cases run under
// mpirun in process_sets_mpi_np4_test).
class ProcessSetScenariosTest : public ::testing::TestWithParam<Scenario> {};

TEST_P(ProcessSetScenariosTest, OnLoopback) {
  absl::Status status = RunOnLoopback(4, GetParam());
  EXPECT_TRUE(status.ok()) << status;
}

INSTANTIATE_TEST_SUITE_P(Scenarios, ProcessSetScenariosTest,
                         ::testing::ValuesIn(ProcessSetScenarios()),
                         [](const ::testing::TestParamInfo<Scenario>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace testing
}  // namespace terse
