// Process-set scenarios (engine_testing.h) for exactly 4 ranks, on loopback
// (engine:process_sets_test) and under mpirun (engine:process_sets_mpi_np4_
// test). The oracle is a dense reference each rank computes itself from the
// inputs every rank is known to hold (a function of rank, set, step and
// tensor), and, for the compression checkpoints, a replay: the steps run
// after a save give bitwise the same sums when run again after loading it.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "engine/engine_testing.h"

#include <unistd.h>

namespace terse {
namespace testing {
namespace {

constexpr int kSize = 4;

bool Contains(const std::vector<int>& ranks, int rank) {
  return std::find(ranks.begin(), ranks.end(), rank) != ranks.end();
}

absl::Status ExpectFourRanks(const Engine& engine) {
  return Expect(engine.size() == kSize,
                absl::StrCat("these scenarios need 4 ranks, not ",
                             engine.size()));
}

// Small integers, so float sums are exact in any order.
double Input(int rank, int32_t set, int step, int t, int64_t i) {
  return static_cast<double>(((rank + 1) * 7 + set * 3 + step * 5 + t + i) %
                             23) -
         11.0;
}

// One set's ops of one step, enqueued by Start and checked by Check.
struct SetStep {
  int32_t set = 0;
  std::vector<int> ranks;
  std::vector<std::vector<float>> sums;  // Sum of 3 tensors (fused).
  std::vector<double> mean;              // Average, float64.
  std::vector<int32_t> gathered;         // Allgather, rank + 1 rows of 2.
  std::vector<double> bcast;             // From the set's last member.
  std::vector<Handle> handles;
  Handle gather = 0;
};

const int64_t kSumSizes[] = {1, 40, 300};

absl::Status Start(int rank, int step, Engine& engine, SetStep* s) {
  const std::string p = absl::StrCat("s", step, ".");
  for (int t = 0; t < 3; ++t) {
    std::vector<float> x(kSumSizes[t]);
    for (int64_t i = 0; i < kSumSizes[t]; ++i) {
      x[i] = static_cast<float>(Input(rank, s->set, step, t, i));
    }
    s->sums.push_back(std::move(x));
  }
  // Enqueue order depends on the rank: negotiation must not care.
  for (int k = 0; k < 3; ++k) {
    const int t = rank % 2 == 0 ? k : 2 - k;
    TensorView v(s->sums[t].data(), kSumSizes[t], DataType::kFloat32);
    TERSE_ASSIGN_OR_RETURN(
        Handle h, engine.AllreduceAsync(absl::StrCat(p, "sum", t), v, v,
                                        {kSumSizes[t]}, ReduceOp::kSum, 1.0,
                                        1.0, nullptr, "", nullptr, s->set));
    s->handles.push_back(h);
  }
  s->mean.resize(6);
  for (int64_t i = 0; i < 6; ++i) s->mean[i] = Input(rank, s->set, step, 7, i);
  TensorView m(s->mean.data(), 6, DataType::kFloat64);
  TERSE_ASSIGN_OR_RETURN(
      Handle h, engine.AllreduceAsync(p + "mean", m, m, {6},
                                      ReduceOp::kAverage, 1.0, 1.0, nullptr,
                                      "", nullptr, s->set));
  s->handles.push_back(h);
  s->gathered.resize(2 * (rank + 1));
  for (size_t i = 0; i < s->gathered.size(); ++i) {
    s->gathered[i] = static_cast<int32_t>(Input(rank, s->set, step, 9, i));
  }
  TensorView g(s->gathered.data(), static_cast<int64_t>(s->gathered.size()),
               DataType::kInt32);
  TERSE_ASSIGN_OR_RETURN(s->gather,
                         engine.AllgatherAsync(p + "gather", g, {rank + 1, 2},
                                               nullptr, nullptr, s->set));
  s->bcast.assign(5, Input(rank, s->set, step, 11, 0));
  TensorView b(s->bcast.data(), 5, DataType::kFloat64);
  TERSE_ASSIGN_OR_RETURN(
      h, engine.BroadcastAsync(p + "bcast", b, {5}, s->ranks.back(), nullptr,
                               nullptr, s->set));
  s->handles.push_back(h);
  return absl::OkStatus();
}

absl::Status Check(int rank, int step, Engine& engine, SetStep* s) {
  const std::string where = absl::StrCat("rank ", rank, " set ", s->set,
                                         " step ", step, ": ");
  for (Handle h : s->handles) TERSE_RETURN_IF_ERROR(engine.Wait(h));
  TERSE_RETURN_IF_ERROR(engine.Wait(s->gather));
  TERSE_ASSIGN_OR_RETURN(AllgatherResult gathered,
                         engine.TakeAllgatherResult(s->gather));
  for (int t = 0; t < 3; ++t) {
    for (int64_t i = 0; i < kSumSizes[t]; ++i) {
      double want = 0;
      for (int r : s->ranks) want += Input(r, s->set, step, t, i);
      if (s->sums[t][i] != want) {
        return absl::InternalError(absl::StrCat(where, "sum", t, "[", i,
                                                "] = ", s->sums[t][i],
                                                ", want ", want));
      }
    }
  }
  for (int64_t i = 0; i < 6; ++i) {
    double want = 0;
    for (int r : s->ranks) want += Input(r, s->set, step, 7, i);
    want /= static_cast<double>(s->ranks.size());
    TERSE_RETURN_IF_ERROR(Expect(std::fabs(s->mean[i] - want) < 1e-12,
                                 absl::StrCat(where, "mean[", i, "] = ",
                                              s->mean[i], ", want ", want)));
  }
  std::vector<int32_t> want;
  std::vector<int64_t> dims;
  for (int r : s->ranks) {
    dims.push_back(r + 1);
    for (int i = 0; i < 2 * (r + 1); ++i) {
      want.push_back(static_cast<int32_t>(Input(r, s->set, step, 9, i)));
    }
  }
  std::vector<int32_t> got(gathered.data.size() / sizeof(int32_t));
  std::copy_n(reinterpret_cast<const int32_t*>(gathered.data.data()),
              got.size(), got.begin());
  TERSE_RETURN_IF_ERROR(Expect(
      got == want && gathered.first_dims == dims,
      absl::StrCat(where, "allgather [", absl::StrJoin(got, ","), "] dims [",
                   absl::StrJoin(gathered.first_dims, ","), "]")));
  const double root = Input(s->ranks.back(), s->set, step, 11, 0);
  for (double v : s->bcast) {
    TERSE_RETURN_IF_ERROR(Expect(
        v == root, absl::StrCat(where, "broadcast ", v, ", want ", root)));
  }
  return absl::OkStatus();
}

// Static {0,1,2} and {1,2,3} (ids 1, 2), dynamic {0,3} (id 3) and the
// global set, all at once in rank-dependent orders, with the same tensor
// names on every set; then set 3 is removed.
absl::Status OverlappingSets(int rank, Engine& engine) {
  TERSE_RETURN_IF_ERROR(ExpectFourRanks(engine));
  TERSE_ASSIGN_OR_RETURN(int32_t added, engine.AddProcessSet({0, 3}));
  TERSE_RETURN_IF_ERROR(Expect(added == 3, absl::StrCat("new id ", added)));
  const std::vector<std::pair<int32_t, std::vector<int>>> sets = {
      {0, {0, 1, 2, 3}}, {1, {0, 1, 2}}, {2, {1, 2, 3}}, {3, {0, 3}}};
  for (int step = 0; step < 3; ++step) {
    std::vector<SetStep> mine;
    for (const auto& [id, ranks] : sets) {
      if (!Contains(ranks, rank)) continue;
      SetStep s;
      s.set = id;
      s.ranks = ranks;
      mine.push_back(std::move(s));
    }
    if (rank >= 2) std::reverse(mine.begin(), mine.end());
    for (SetStep& s : mine) TERSE_RETURN_IF_ERROR(Start(rank, step, engine, &s));
    for (SetStep& s : mine) TERSE_RETURN_IF_ERROR(Check(rank, step, engine, &s));
  }
  TERSE_RETURN_IF_ERROR(engine.RemoveProcessSet(3));
  std::vector<float> x(2, 1.0f);
  TensorView v(x.data(), 2, DataType::kFloat32);
  absl::StatusOr<Handle> gone = engine.AllreduceAsync(
      "after", v, v, {2}, ReduceOp::kSum, 1.0, 1.0, nullptr, "", nullptr, 3);
  TERSE_RETURN_IF_ERROR(Expect(!gone.ok(), "an op on removed set 3 failed"));
  return ExpectContains(gone.status(), "not registered");
}

// --- Compression state of process sets ------------------------------------

const int64_t kGradSizes[] = {200, 700};

// One topk:10 step of two tensors on `set` (members only); returns the sums.
absl::StatusOr<std::vector<std::vector<float>>> CompressedStep(
    int rank, Engine& engine, int32_t set, int step) {
  std::vector<std::vector<float>> g(2);
  std::vector<Handle> handles;
  for (int t = 0; t < 2; ++t) {
    g[t].resize(kGradSizes[t]);
    for (int64_t i = 0; i < kGradSizes[t]; ++i) {
      // Distinct magnitudes, so topk keeps a definite set.
      g[t][i] = static_cast<float>(Input(rank, set, step, t, i) +
                                   0.001 * static_cast<double>(i % 97));
    }
    TensorView v(g[t].data(), kGradSizes[t], DataType::kFloat32);
    TERSE_ASSIGN_OR_RETURN(
        Handle h, engine.AllreduceAsync(absl::StrCat("grad", t), v, v,
                                        {kGradSizes[t]}, ReduceOp::kSum, 1.0,
                                        1.0, nullptr, "topk:10", nullptr, set));
    handles.push_back(h);
  }
  for (Handle h : handles) TERSE_RETURN_IF_ERROR(engine.Wait(h));
  return g;
}

using Sums = std::vector<std::vector<std::vector<float>>>;

// Steps [first, first + n) on every set in `sets` this rank is in.
absl::StatusOr<Sums> CompressedSteps(
    int rank, Engine& engine,
    const std::vector<std::pair<int32_t, std::vector<int>>>& sets, int first,
    int n) {
  Sums out;
  for (int step = first; step < first + n; ++step) {
    for (const auto& [id, ranks] : sets) {
      if (!Contains(ranks, rank)) continue;
      TERSE_ASSIGN_OR_RETURN(std::vector<std::vector<float>> sums,
                             CompressedStep(rank, engine, id, step));
      out.push_back(std::move(sums));
    }
  }
  return out;
}

std::string TempPath(int rank, const std::string& what) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/terse_", what, "_",
                      getpid(), "_", rank, ".ckpt");
}

// Static {0,1} and {1,2,3} plus the global set, topk:10 on each: a save
// after two steps, two more steps, then a load (from bytes, then from a
// file) replays those two steps bitwise. Reports name every set.
absl::Status SetCheckpointRoundTrip(int rank, Engine& engine) {
  TERSE_RETURN_IF_ERROR(ExpectFourRanks(engine));
  const std::vector<std::pair<int32_t, std::vector<int>>> sets = {
      {0, {0, 1, 2, 3}}, {1, {0, 1}}, {2, {1, 2, 3}}};
  TERSE_RETURN_IF_ERROR(CompressedSteps(rank, engine, sets, 0, 2).status());
  TERSE_ASSIGN_OR_RETURN(std::string saved, engine.SaveCompressionState());
  const std::string path = TempPath(rank, "sets");
  TERSE_RETURN_IF_ERROR(engine.SaveCompressionStateToFile(path));
  TERSE_ASSIGN_OR_RETURN(Sums reference,
                         CompressedSteps(rank, engine, sets, 2, 2));
  TERSE_ASSIGN_OR_RETURN(std::string later, engine.SaveCompressionState());
  TERSE_RETURN_IF_ERROR(
      Expect(later != saved, "the residuals moved after the save"));

  TERSE_RETURN_IF_ERROR(engine.LoadCompressionState(saved));
  TERSE_ASSIGN_OR_RETURN(Sums replay, CompressedSteps(rank, engine, sets, 2, 2));
  TERSE_RETURN_IF_ERROR(Expect(
      replay == reference,
      absl::StrCat("rank ", rank, ": steps 2-3 after loading the bytes differ "
                   "from the first run")));
  TERSE_RETURN_IF_ERROR(engine.LoadCompressionStateFromFile(path));
  TERSE_ASSIGN_OR_RETURN(replay, CompressedSteps(rank, engine, sets, 2, 2));
  std::remove(path.c_str());
  TERSE_RETURN_IF_ERROR(Expect(
      replay == reference,
      absl::StrCat("rank ", rank, ": steps 2-3 after loading the file differ "
                   "from the first run")));

  // Each set this rank is in reports its buckets, topk at CF 10, and their
  // dense bytes add up to the set's tensors.
  std::vector<BucketReport> reports = engine.BucketReports();
  for (const auto& [id, ranks] : sets) {
    int64_t bytes = 0;
    bool topk = false;
    for (const BucketReport& r : reports) {
      if (r.process_set != id) continue;
      bytes += r.bytes;
      topk |= r.compressor == "topk" && r.cf == 10 && r.bytes_sent > 0;
    }
    const int64_t want =
        Contains(ranks, rank) ? 4 * (kGradSizes[0] + kGradSizes[1]) : 0;
    TERSE_RETURN_IF_ERROR(Expect(
        bytes == want && topk == Contains(ranks, rank),
        absl::StrCat("rank ", rank, ": set ", id, " reports ", bytes,
                     " bytes (want ", want, "), topk ", topk)));
  }
  return Expect(engine.BytesSent() > 0, "bytes sent");
}

// A checkpoint loads only into the sets it was saved from.
absl::Status SetCheckpointRefusesOtherLayout(int rank, Engine& engine) {
  TERSE_RETURN_IF_ERROR(ExpectFourRanks(engine));
  const std::vector<int> pair = {0, 1};
  const bool member = Contains(pair, rank);
  TERSE_RETURN_IF_ERROR(
      CompressedSteps(rank, engine, {{0, {0, 1, 2, 3}}}, 0, 1).status());
  TERSE_ASSIGN_OR_RETURN(std::string global_only,
                         engine.SaveCompressionState());
  TERSE_ASSIGN_OR_RETURN(int32_t first, engine.AddProcessSet(pair));
  TERSE_RETURN_IF_ERROR(CompressedSteps(rank, engine, {{first, pair}}, 0, 1)
                            .status());
  TERSE_ASSIGN_OR_RETURN(std::string saved, engine.SaveCompressionState());

  absl::Status old = engine.LoadCompressionState(global_only);
  if (member) {
    TERSE_RETURN_IF_ERROR(Expect(
        old.code() == absl::StatusCode::kFailedPrecondition, old.ToString()));
    TERSE_RETURN_IF_ERROR(ExpectContains(old, "global process set's state"));
    TERSE_RETURN_IF_ERROR(
        ExpectContains(old, absl::StrCat("set ", first, " [0,1]")));
  } else {
    TERSE_RETURN_IF_ERROR(old);  // Non-members are in no other set.
  }
  TERSE_RETURN_IF_ERROR(engine.LoadCompressionState(saved));
  absl::Status truncated =
      engine.LoadCompressionState(saved.substr(0, saved.size() - 3));
  TERSE_RETURN_IF_ERROR(Expect(!truncated.ok(), "a truncated state failed"));

  // The same ranks again, under a new id: another layout. Bytes sent by the
  // removed set still count.
  const int64_t sent = engine.BytesSent();
  TERSE_RETURN_IF_ERROR(engine.RemoveProcessSet(first));
  TERSE_RETURN_IF_ERROR(Expect(engine.BytesSent() == sent,
                               "bytes sent survive the set's removal"));
  TERSE_ASSIGN_OR_RETURN(int32_t second, engine.AddProcessSet(pair));
  absl::Status other = engine.LoadCompressionState(saved);
  if (!member) return other;
  TERSE_RETURN_IF_ERROR(Expect(
      other.code() == absl::StatusCode::kFailedPrecondition, other.ToString()));
  TERSE_RETURN_IF_ERROR(
      ExpectContains(other, absl::StrCat("set ", first, " [0,1]")));
  return ExpectContains(other, absl::StrCat("set ", second, " [0,1]"));
}

Scenario WithSets(std::string name,
                  std::function<absl::Status(int, Engine&)> body,
                  std::vector<std::vector<int>> sets) {
  Scenario s;
  s.name = std::move(name);
  s.configure = [](Config* c) { c->min_compress_bytes = 0; };
  s.body = std::move(body);
  s.options.process_sets = std::move(sets);
  return s;
}

}  // namespace

std::vector<Scenario> ProcessSetScenarios() {
  return {
      WithSets("OverlappingSetsMatchDenseReference", OverlappingSets,
               {{0, 1, 2}, {1, 2, 3}}),
      WithSets("SetCheckpointRoundTrip", SetCheckpointRoundTrip,
               {{0, 1}, {1, 2, 3}}),
      WithSets("SetCheckpointRefusesOtherLayout",
               SetCheckpointRefusesOtherLayout, {}),
  };
}

}  // namespace testing
}  // namespace terse
