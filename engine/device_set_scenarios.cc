// Device scenarios on process sets (device_scenarios.h): device tensors on
// sets other than the global one, each set with its own device
// communicators, engine streams and compression state.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "engine/device_scenarios_internal.h"
#include "engine/engine_testing.h"

namespace terse {
namespace testing {
namespace device_scenarios_internal {
namespace {

// Small integers, exact in fp16 and bf16: rank r's element i of tensor t
// at `step` on set `set`.
double SetValue(int rank, int32_t set, int step, int t, int64_t i) {
  return static_cast<double>((rank + 1) * ((set + 2 * step + t + i) % 5 + 1));
}

// One set's ops of one step on this rank's device.
struct SetStep {
  int32_t set = 0;
  std::vector<int> ranks;
  std::unique_ptr<Uploaded> dense, fp16, bcast, rows;
  Handle h_dense = 0, h_fp16 = 0, h_bcast = 0, h_rows = 0;
};

constexpr int64_t kDense = 300;
constexpr int64_t kFp16 = 200;
constexpr int64_t kBcast = 64;
constexpr int64_t kRowWidth = 3;

// Enqueues the step's four ops on `s->set`: the same names on every set.
absl::Status Start(RankDevice& d, int rank, int step, Engine& engine,
                   SetStep* s) {
  auto values = [&](int t, int64_t n) {
    std::vector<double> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = SetValue(rank, s->set, step, t, i);
    return v;
  };
  TERSE_ASSIGN_OR_RETURN(s->dense,
                         Upload(d, DataType::kFloat32, values(0, kDense)));
  TERSE_ASSIGN_OR_RETURN(
      s->h_dense,
      engine.AllreduceAsync("dense", s->dense->view, s->dense->view, {kDense},
                            ReduceOp::kSum, 1.0, 1.0, nullptr, "",
                            s->dense->ready, s->set));
  TERSE_ASSIGN_OR_RETURN(s->fp16,
                         Upload(d, DataType::kFloat32, values(1, kFp16)));
  TERSE_ASSIGN_OR_RETURN(
      s->h_fp16,
      engine.AllreduceAsync("fp16", s->fp16->view, s->fp16->view, {kFp16},
                            ReduceOp::kAverage, 1.0, 1.0, nullptr, "fp16",
                            s->fp16->ready, s->set));
  TERSE_ASSIGN_OR_RETURN(s->bcast,
                         Upload(d, DataType::kBFloat16, values(2, kBcast)));
  TERSE_ASSIGN_OR_RETURN(
      s->h_bcast,
      engine.BroadcastAsync("bcast", s->bcast->view, {kBcast},
                            s->ranks.back(), nullptr, s->bcast->ready, s->set));
  // Set rank j contributes j + 1 rows.
  const int j = static_cast<int>(
      std::find(s->ranks.begin(), s->ranks.end(), rank) - s->ranks.begin());
  std::vector<double> rows((j + 1) * kRowWidth);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = 1000 * rank + s->set + i;
  TERSE_ASSIGN_OR_RETURN(s->rows, Upload(d, DataType::kInt32, rows));
  TERSE_ASSIGN_OR_RETURN(
      s->h_rows, engine.AllgatherAsync("rows", s->rows->view, {j + 1, kRowWidth},
                                       nullptr, s->rows->ready, s->set));
  return absl::OkStatus();
}

// The step's results against sums over the set's members.
absl::Status Check(RankDevice& d, int rank, int step, Engine& engine,
                   SetStep* s) {
  const std::string where =
      absl::StrCat("rank ", rank, ", set ", s->set, " [",
                   absl::StrJoin(s->ranks, ","), "], step ", step, ": ");
  auto sum = [&](int t, int64_t i) {
    double total = 0;
    for (int r : s->ranks) total += SetValue(r, s->set, step, t, i);
    return total;
  };
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Event> done,
                         engine.WaitIssued(s->h_dense));
  TERSE_ASSIGN_OR_RETURN(std::vector<double> got,
                         Download(d, done.get(), *s->dense));
  for (int64_t i = 0; i < kDense; ++i) {
    if (got[i] != sum(0, i)) {
      return absl::InternalError(absl::StrCat(where, "dense[", i, "] = ",
                                              got[i], ", want ", sum(0, i)));
    }
  }
  TERSE_ASSIGN_OR_RETURN(done, engine.WaitIssued(s->h_fp16));
  TERSE_ASSIGN_OR_RETURN(got, Download(d, done.get(), *s->fp16));
  const double members = static_cast<double>(s->ranks.size());
  for (int64_t i = 0; i < kFp16; ++i) {
    // Exact fp16 sums of exact inputs, then one float division.
    const double want = sum(1, i) / members;
    if (std::abs(got[i] - want) > 1e-6 * std::abs(want)) {
      return absl::InternalError(absl::StrCat(where, "fp16 average[", i,
                                              "] = ", got[i], ", want ", want));
    }
  }
  TERSE_ASSIGN_OR_RETURN(done, engine.WaitIssued(s->h_bcast));
  TERSE_ASSIGN_OR_RETURN(got, Download(d, done.get(), *s->bcast));
  for (int64_t i = 0; i < kBcast; ++i) {
    const double want = SetValue(s->ranks.back(), s->set, step, 2, i);
    if (got[i] != want) {
      return absl::InternalError(absl::StrCat(where, "broadcast[", i, "] = ",
                                              got[i], ", want ", want));
    }
  }
  TERSE_RETURN_IF_ERROR(engine.Wait(s->h_rows));
  TERSE_ASSIGN_OR_RETURN(AllgatherResult gathered,
                         engine.TakeAllgatherResult(s->h_rows));
  std::vector<int32_t> want;
  for (size_t j = 0; j < s->ranks.size(); ++j) {
    for (int64_t i = 0; i < static_cast<int64_t>(j + 1) * kRowWidth; ++i) {
      want.push_back(static_cast<int32_t>(1000 * s->ranks[j] + s->set + i));
    }
  }
  return Expect(gathered.data.size() == want.size() * sizeof(int32_t) &&
                    std::equal(want.begin(), want.end(),
                               reinterpret_cast<const int32_t*>(
                                   gathered.data.data())),
                absl::StrCat(where, "allgather differs from the members' ",
                             "rows in set order"));
}

// One top-k step (CF 10) of a 2,000-float device tensor on `set`: the
// reduced result. Distinct magnitudes, so top-k keeps a definite set.
absl::StatusOr<std::vector<double>> TopkStep(RankDevice& d, int rank,
                                             Engine& engine, int32_t set,
                                             int step) {
  std::vector<double> v(2000);
  for (int64_t i = 0; i < 2000; ++i) {
    v[i] =
        SetValue(rank, set, step, 3, i) + 0.001 * static_cast<double>(i % 97);
  }
  TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Uploaded> u,
                         Upload(d, DataType::kFloat32, v));
  TERSE_ASSIGN_OR_RETURN(
      Handle h,
      engine.AllreduceAsync("ef", u->view, u->view, {2000}, ReduceOp::kSum, 1.0,
                            1.0, nullptr, "topk:10", u->ready, set));
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Event> done, engine.WaitIssued(h));
  return Download(d, done.get(), *u);
}

}  // namespace

// Two sets beside the global one, added at run time, with the same tensor
// names on each: the last n - 1 ranks, and the first and last ranks (the
// first alone when n = 2). For three steps every rank runs a dense sum, an
// fp16-compressed average, a broadcast from the set's last rank and an
// allgather on each set it is in (in rank-dependent order, so the sets'
// cycles interleave), and on the global set; results come through the
// consumer stream after the op's event. Then one set is removed and the
// other still runs: its device state outlived its neighbour's. Last, the
// remaining set's top-k residuals (device memory) go through a compression
// checkpoint: a step replayed after loading it equals the step after
// saving it.
absl::Status DeviceTensorsOnProcessSets(SimRuntime* sim, int rank,
                                        Engine& engine) {
  const int n = engine.size();
  std::vector<int> tail;
  for (int r = 1; r < n; ++r) tail.push_back(r);
  const std::vector<int> ends =
      n >= 3 ? std::vector<int>{0, n - 1} : std::vector<int>{0};
  TERSE_ASSIGN_OR_RETURN(const int32_t tail_id, engine.AddProcessSet(tail));
  TERSE_ASSIGN_OR_RETURN(const int32_t ends_id, engine.AddProcessSet(ends));
  TERSE_ASSIGN_OR_RETURN(RankDevice d, MakeDevice(sim, engine));
  std::vector<int> all;
  for (int r = 0; r < n; ++r) all.push_back(r);
  const std::vector<std::pair<int32_t, std::vector<int>>> sets = {
      {0, all}, {tail_id, tail}, {ends_id, ends}};
  auto run_step = [&](int step, const std::vector<int32_t>& live) {
    std::vector<SetStep> mine;
    for (const auto& [id, ranks] : sets) {
      if (std::find(live.begin(), live.end(), id) == live.end()) continue;
      if (std::find(ranks.begin(), ranks.end(), rank) == ranks.end()) continue;
      SetStep s;
      s.set = id;
      s.ranks = ranks;
      mine.push_back(std::move(s));
    }
    if (rank % 2 == 1) std::reverse(mine.begin(), mine.end());
    for (SetStep& s : mine) {
      TERSE_RETURN_IF_ERROR(Start(d, rank, step, engine, &s));
    }
    for (SetStep& s : mine) {
      TERSE_RETURN_IF_ERROR(Check(d, rank, step, engine, &s));
    }
    return absl::OkStatus();
  };
  for (int step = 0; step < 3; ++step) {
    TERSE_RETURN_IF_ERROR(run_step(step, {0, tail_id, ends_id}));
  }
  TERSE_RETURN_IF_ERROR(engine.RemoveProcessSet(ends_id));
  TERSE_RETURN_IF_ERROR(run_step(3, {0, tail_id}));

  const bool in_tail = rank >= 1;
  for (int step = 0; step < 2 && in_tail; ++step) {
    TERSE_RETURN_IF_ERROR(TopkStep(d, rank, engine, tail_id, step).status());
  }
  TERSE_ASSIGN_OR_RETURN(const std::string saved,
                         engine.SaveCompressionState());
  std::vector<double> reference, replay;
  if (in_tail) {
    TERSE_ASSIGN_OR_RETURN(reference, TopkStep(d, rank, engine, tail_id, 2));
  }
  TERSE_ASSIGN_OR_RETURN(const std::string later,
                         engine.SaveCompressionState());
  TERSE_RETURN_IF_ERROR(Expect(!in_tail || later != saved,
                               "the set's residuals moved after the save"));
  TERSE_RETURN_IF_ERROR(engine.LoadCompressionState(saved));
  if (in_tail) {
    TERSE_ASSIGN_OR_RETURN(replay, TopkStep(d, rank, engine, tail_id, 2));
  }
  return Expect(replay == reference,
                absl::StrCat("rank ", rank, ": the top-k step on set ", tail_id,
                             " after loading the checkpoint differs "
                             "from the step after saving it"));
}

}  // namespace device_scenarios_internal
}  // namespace testing
}  // namespace terse
