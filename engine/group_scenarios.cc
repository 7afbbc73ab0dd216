// Grouped-op scenarios (engine_testing.h, Engine::GroupStart/GroupEnd) for
// any number of ranks >= 2, on loopback (engine:engine_test) and under
// mpirun (engine:engine_mpi_np2_test / _np4_test). The oracle is a closed
// form: tensor t's element i on rank r is (r + 1) * (t + i % 3 + 1), so its
// sum over n ranks is n(n+1)/2 * (t + i % 3 + 1), exact in float.
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/status.h"
#include "engine/engine_testing.h"

namespace terse {
namespace testing {
namespace {

double Element(int rank, int t, int64_t i) {
  return (rank + 1.0) * (t + i % 3 + 1);
}

// The cycle in which each grouped op completed, read in its callback
// (engine.stats().cycles is set before a cycle's completions run).
struct CycleLog {
  absl::Mutex mu;
  std::vector<int64_t> cycles ABSL_GUARDED_BY(mu);
};

DoneCallback Record(Engine& engine, CycleLog* log) {
  return [&engine, log](const absl::Status&) {
    const int64_t cycle = engine.stats().cycles;
    absl::MutexLock lock(&log->mu);
    log->cycles.push_back(cycle);
  };
}

// A group of `n` allreduces (sizes 1..n) enqueued together with one
// ungrouped allreduce, for three steps: every sum is right, the group's ops
// complete in one cycle, and no bucket mixes the group with the other op.
absl::Status GroupedAllreduce(int rank, Engine& engine) {
  const int size = engine.size();
  const int n = 200;
  for (int step = 0; step < 3; ++step) {
    std::vector<std::vector<float>> data(n + 1);
    for (int t = 0; t <= n; ++t) {
      data[t].resize(t + 1);
      for (int64_t i = 0; i <= t; ++i) data[t][i] = Element(rank, t, i);
    }
    CycleLog log;
    std::vector<Handle> handles;
    TensorView lone(data[n].data(), n + 1, DataType::kFloat32);
    TERSE_ASSIGN_OR_RETURN(
        Handle h,
        engine.AllreduceAsync("lone", lone, lone, {n + 1}, ReduceOp::kSum));
    handles.push_back(h);
    TERSE_RETURN_IF_ERROR(engine.GroupStart("g"));
    for (int t = 0; t < n; ++t) {
      TensorView v(data[t].data(), t + 1, DataType::kFloat32);
      TERSE_ASSIGN_OR_RETURN(
          Handle g, engine.AllreduceAsync(absl::StrCat("g.", t), v, v, {t + 1},
                                          ReduceOp::kSum, 1.0, 1.0,
                                          Record(engine, &log)));
      handles.push_back(g);
    }
    TERSE_RETURN_IF_ERROR(engine.GroupEnd());
    for (Handle g : handles) TERSE_RETURN_IF_ERROR(engine.Wait(g));
    for (int t = 0; t <= n; ++t) {
      for (int64_t i = 0; i <= t; ++i) {
        const double want = size * (size + 1) / 2.0 * (t + i % 3 + 1);
        if (data[t][i] != want) {
          return absl::InternalError(absl::StrCat("step ", step, " tensor ", t,
                                                  "[", i, "] = ", data[t][i],
                                                  ", want ", want));
        }
      }
    }
    absl::MutexLock lock(&log.mu);
    TERSE_RETURN_IF_ERROR(
        Expect(static_cast<int>(log.cycles.size()) == n, "every callback"));
    for (int64_t c : log.cycles) {
      TERSE_RETURN_IF_ERROR(
          Expect(c == log.cycles[0],
                 absl::StrCat("step ", step, ": the group completed in cycles ",
                              log.cycles[0], " and ", c)));
    }
  }
  for (const BucketReport& b : engine.BucketReports()) {
    TERSE_RETURN_IF_ERROR(Expect(b.tensors == 1 || b.tensors <= n,
                                 "a bucket mixes the group and another op"));
    TERSE_RETURN_IF_ERROR(
        Expect(b.tensors != n + 1, "a bucket holds the group and 'lone'"));
  }
  return absl::OkStatus();
}

// An allreduce, an allgather and a broadcast in one group complete in one
// cycle with their usual results.
absl::Status GroupedMixedOps(int rank, Engine& engine) {
  const int size = engine.size();
  std::vector<float> sum(3, rank + 1.0f);
  std::vector<int32_t> rows(rank + 1, rank);
  std::vector<double> root(2, rank == 0 ? 7.5 : -1.0);
  CycleLog log;
  TERSE_RETURN_IF_ERROR(engine.GroupStart("mixed"));
  TensorView s(sum.data(), 3, DataType::kFloat32);
  TERSE_ASSIGN_OR_RETURN(
      Handle a, engine.AllreduceAsync("m.sum", s, s, {3}, ReduceOp::kSum, 1.0,
                                      1.0, Record(engine, &log)));
  TERSE_ASSIGN_OR_RETURN(
      Handle g,
      engine.AllgatherAsync("m.gather",
                            TensorView(rows.data(), rank + 1, DataType::kInt32),
                            {rank + 1}, Record(engine, &log)));
  TERSE_ASSIGN_OR_RETURN(
      Handle b, engine.BroadcastAsync(
                    "m.root", TensorView(root.data(), 2, DataType::kFloat64),
                    {2}, 0, Record(engine, &log)));
  TERSE_RETURN_IF_ERROR(engine.GroupEnd());
  TERSE_RETURN_IF_ERROR(engine.Wait(a));
  TERSE_RETURN_IF_ERROR(engine.Wait(b));
  TERSE_RETURN_IF_ERROR(engine.Wait(g));
  TERSE_ASSIGN_OR_RETURN(AllgatherResult gathered,
                         engine.TakeAllgatherResult(g));
  const float want = size * (size + 1) / 2.0f;
  TERSE_RETURN_IF_ERROR(Expect(sum[0] == want && sum[2] == want, "sum"));
  TERSE_RETURN_IF_ERROR(Expect(root[0] == 7.5 && root[1] == 7.5, "broadcast"));
  const int32_t* got = reinterpret_cast<const int32_t*>(gathered.data.data());
  int64_t at = 0;
  for (int q = 0; q < size; ++q) {
    for (int k = 0; k <= q; ++k, ++at) {
      TERSE_RETURN_IF_ERROR(Expect(got[at] == q, "allgather rows"));
    }
  }
  absl::MutexLock lock(&log.mu);
  return Expect(log.cycles.size() == 3 && log.cycles[0] == log.cycles[1] &&
                    log.cycles[1] == log.cycles[2],
                "the mixed group completed in one cycle");
}

// One op of a group disagrees across ranks (shape on the last rank): every
// op of the group fails on every rank with that mismatch; a group with a
// refused alltoall fails the same way; the engine goes on.
absl::Status GroupFailsAsOne(int rank, Engine& engine) {
  const int size = engine.size();
  const int odd = size - 1;
  std::vector<float> x(8, 1.0f);
  TERSE_RETURN_IF_ERROR(engine.GroupStart("bad"));
  std::vector<Handle> handles;
  for (int t = 0; t < 3; ++t) {
    const int64_t n = (t == 1 && rank == odd) ? 5 : 4;
    TensorView v(x.data(), n, DataType::kFloat32);
    TERSE_ASSIGN_OR_RETURN(
        Handle h, engine.AllreduceAsync(absl::StrCat("bad.", t), v, v, {n},
                                        ReduceOp::kSum));
    handles.push_back(h);
  }
  TERSE_RETURN_IF_ERROR(engine.GroupEnd());
  for (int t = 0; t < 3; ++t) {
    const absl::Status s = engine.Wait(handles[t]);
    TERSE_RETURN_IF_ERROR(
        ExpectContains(s, absl::StrCat("tensor 'bad.1': shape [4] on ",
                                       RanksPhrase(AllBut(size, odd)),
                                       " but [5] on ", RanksPhrase({odd}))));
    if (t != 1) TERSE_RETURN_IF_ERROR(ExpectContains(s, "its group 'bad'"));
  }

  // Alltoall refused by rank 0 (splits of the wrong count) in a group with
  // an allreduce.
  TERSE_RETURN_IF_ERROR(engine.GroupStart("refused"));
  TensorView v(x.data(), 4, DataType::kFloat32);
  TERSE_ASSIGN_OR_RETURN(Handle r, engine.AllreduceAsync("refused.sum", v, v,
                                                         {4}, ReduceOp::kSum));
  std::vector<float> rows(size, 0.0f);
  std::vector<int64_t> splits(rank == 0 ? 1 : size, rank == 0 ? size : 1);
  TERSE_ASSIGN_OR_RETURN(
      Handle a,
      engine.AlltoallAsync("refused.a2a",
                           TensorView(rows.data(), size, DataType::kFloat32),
                           {size}, splits));
  TERSE_RETURN_IF_ERROR(engine.GroupEnd());
  for (Handle h : {r, a}) {
    TERSE_RETURN_IF_ERROR(ExpectContains(
        engine.Wait(h), "tensor 'refused.a2a': rank 0 refused it: splits has"));
  }
  // The engine goes on, with the same names ungrouped.
  std::vector<float> after(4, rank + 1.0f);
  TensorView w(after.data(), 4, DataType::kFloat32);
  TERSE_ASSIGN_OR_RETURN(
      Handle ok, engine.AllreduceAsync("bad.0", w, w, {4}, ReduceOp::kSum));
  TERSE_RETURN_IF_ERROR(engine.Wait(ok));
  return Expect(after[0] == size * (size + 1) / 2.0f, "sum after the group");
}

// A group on a process set of ranks 1..size-1 while every rank runs a
// global group: each sums over its own ranks only.
absl::Status GroupOnProcessSet(int rank, Engine& engine) {
  const int size = engine.size();
  std::vector<int> members;
  for (int r = 1; r < size; ++r) members.push_back(r);
  TERSE_ASSIGN_OR_RETURN(int32_t set, engine.AddProcessSet(members));
  std::vector<std::vector<float>> global(2, std::vector<float>(3, rank + 1.0f));
  std::vector<std::vector<float>> local(2, std::vector<float>(5, rank + 1.0f));
  std::vector<Handle> handles;
  TERSE_RETURN_IF_ERROR(engine.GroupStart("global"));
  for (int t = 0; t < 2; ++t) {
    TensorView v(global[t].data(), 3, DataType::kFloat32);
    TERSE_ASSIGN_OR_RETURN(
        Handle h, engine.AllreduceAsync(absl::StrCat("gs.", t), v, v, {3},
                                        ReduceOp::kSum));
    handles.push_back(h);
  }
  TERSE_RETURN_IF_ERROR(engine.GroupEnd());
  if (rank != 0) {
    TERSE_RETURN_IF_ERROR(engine.GroupStart("on_set"));
    for (int t = 0; t < 2; ++t) {
      TensorView v(local[t].data(), 5, DataType::kFloat32);
      TERSE_ASSIGN_OR_RETURN(
          Handle h, engine.AllreduceAsync(absl::StrCat("gs.", t), v, v, {5},
                                          ReduceOp::kSum, 1.0, 1.0, nullptr, "",
                                          nullptr, set));
      handles.push_back(h);
    }
    // A member on another set than the group's is refused at enqueue.
    std::vector<float> x(1, 0.0f);
    TensorView xv(x.data(), 1, DataType::kFloat32);
    TERSE_RETURN_IF_ERROR(ExpectContains(
        engine.AllreduceAsync("gs.other", xv, xv, {1}, ReduceOp::kSum).status(),
        "is on process set 0, the group's ops on process set"));
    TERSE_RETURN_IF_ERROR(engine.GroupEnd());
  }
  for (Handle h : handles) TERSE_RETURN_IF_ERROR(engine.Wait(h));
  const float all = size * (size + 1) / 2.0f;
  const float set_sum = all - 1.0f;  // Without rank 0's 1.
  for (int t = 0; t < 2; ++t) {
    TERSE_RETURN_IF_ERROR(Expect(global[t][2] == all, "global group sum"));
    if (rank != 0) {
      TERSE_RETURN_IF_ERROR(Expect(local[t][4] == set_sum, "set group sum"));
    }
  }
  return engine.RemoveProcessSet(set);
}

// The last rank joins at once; the others run a grouped allreduce for
// three steps (it contributes zeros), then join.
absl::Status GroupWhileARankHasJoined(int rank, Engine& engine) {
  const int last = engine.size() - 1;
  if (rank != last) {
    float want = 0;
    for (int r = 0; r < last; ++r) want += r + 1.0f;
    for (int step = 0; step < 3; ++step) {
      std::vector<std::vector<float>> x(3, std::vector<float>(4, rank + 1.0f));
      std::vector<Handle> handles;
      TERSE_RETURN_IF_ERROR(engine.GroupStart("joined"));
      for (int t = 0; t < 3; ++t) {
        TensorView v(x[t].data(), 4, DataType::kFloat32);
        TERSE_ASSIGN_OR_RETURN(
            Handle h, engine.AllreduceAsync(absl::StrCat("j.", t), v, v, {4},
                                            ReduceOp::kSum));
        handles.push_back(h);
      }
      TERSE_RETURN_IF_ERROR(engine.GroupEnd());
      for (Handle h : handles) TERSE_RETURN_IF_ERROR(engine.Wait(h));
      for (int t = 0; t < 3; ++t) {
        TERSE_RETURN_IF_ERROR(Expect(
            x[t][3] == want, absl::StrCat("step ", step, ": ", x[t][3])));
      }
    }
  }
  TERSE_ASSIGN_OR_RETURN(int joined_last, engine.Join());
  return Expect(joined_last >= 0 && joined_last < engine.size(),
                absl::StrCat("last joined ", joined_last));
}

// A group with a per-call compression (fp16: exact on these small
// integers) beside ungrouped tensors of the same spec: the sums are exact,
// and the group's bucket holds the group's members only.
absl::Status GroupWithCompression(int rank, Engine& engine) {
  const int size = engine.size();
  const int n = 3;
  for (int step = 0; step < 2; ++step) {
    std::vector<std::vector<float>> grouped(n, std::vector<float>(64, 0.0f));
    std::vector<float> alone(64, rank + 1.0f);
    for (int t = 0; t < n; ++t) {
      for (int i = 0; i < 64; ++i) grouped[t][i] = Element(rank, t, i);
    }
    std::vector<Handle> handles;
    TensorView a(alone.data(), 64, DataType::kFloat32);
    TERSE_ASSIGN_OR_RETURN(
        Handle h, engine.AllreduceAsync("c.alone", a, a, {64}, ReduceOp::kSum,
                                        1.0, 1.0, nullptr, "fp16"));
    handles.push_back(h);
    TERSE_RETURN_IF_ERROR(engine.GroupStart("compressed"));
    for (int t = 0; t < n; ++t) {
      TensorView v(grouped[t].data(), 64, DataType::kFloat32);
      TERSE_ASSIGN_OR_RETURN(
          Handle g,
          engine.AllreduceAsync(absl::StrCat("c.", t), v, v, {64},
                                ReduceOp::kSum, 1.0, 1.0, nullptr, "fp16"));
      handles.push_back(g);
    }
    TERSE_RETURN_IF_ERROR(engine.GroupEnd());
    for (Handle g : handles) TERSE_RETURN_IF_ERROR(engine.Wait(g));
    for (int t = 0; t < n; ++t) {
      for (int i = 0; i < 64; ++i) {
        const double want = size * (size + 1) / 2.0 * (t + i % 3 + 1);
        if (grouped[t][i] != want) {
          return absl::InternalError(absl::StrCat("fp16 group tensor ", t, "[",
                                                  i, "] = ", grouped[t][i]));
        }
      }
    }
    TERSE_RETURN_IF_ERROR(
        Expect(alone[0] == size * (size + 1) / 2.0f, "fp16 alone"));
  }
  bool found = false;
  for (const BucketReport& b : engine.BucketReports()) {
    TERSE_RETURN_IF_ERROR(
        Expect(b.tensors != n + 1, "a bucket holds the group and 'c.alone'"));
    if (b.tensors == n) found = true;
  }
  return Expect(found, "the fp16 group's bucket of its 3 members");
}

// Misuse is refused on the calling thread and changes nothing.
absl::Status GroupMisuse(int rank, Engine& engine) {
  absl::Status end = engine.GroupEnd();
  TERSE_RETURN_IF_ERROR(Expect(
      end.code() == absl::StatusCode::kFailedPrecondition, "end, no group"));
  TERSE_RETURN_IF_ERROR(
      Expect(engine.GroupStart("").code() == absl::StatusCode::kInvalidArgument,
             "empty name"));
  TERSE_RETURN_IF_ERROR(engine.GroupStart("outer"));
  TERSE_RETURN_IF_ERROR(ExpectContains(engine.GroupStart("inner"),
                                       "this thread has group 'outer' open"));
  TERSE_RETURN_IF_ERROR(
      ExpectContains(engine.Barrier(), "join and barrier cannot be grouped"));
  TERSE_RETURN_IF_ERROR(engine.GroupEnd());  // Empty: nothing queued.
  // A name given twice in one group: nothing of the group is queued, and
  // both ops fail here (on every rank alike, as every rank does the same).
  {
    std::vector<float> y(2, 1.0f);
    TensorView yv(y.data(), 2, DataType::kFloat32);
    TERSE_RETURN_IF_ERROR(engine.GroupStart("twice"));
    TERSE_ASSIGN_OR_RETURN(
        Handle a, engine.AllreduceAsync("dup", yv, yv, {2}, ReduceOp::kSum));
    TERSE_ASSIGN_OR_RETURN(
        Handle b, engine.AllreduceAsync("dup", yv, yv, {2}, ReduceOp::kSum));
    TERSE_RETURN_IF_ERROR(ExpectContains(
        engine.GroupEnd(), "group 'twice': an operation named 'dup'"));
    TERSE_RETURN_IF_ERROR(ExpectContains(engine.Wait(a), "group 'twice'"));
    TERSE_RETURN_IF_ERROR(ExpectContains(engine.Wait(b), "group 'twice'"));
  }
  // Another thread's group does not take this thread's ops.
  std::vector<float> x(2, rank + 1.0f);
  TensorView v(x.data(), 2, DataType::kFloat32);
  absl::Status their_start, their_end;
  absl::Notification opened, enqueued;
  std::thread t([&] {
    their_start = engine.GroupStart("theirs");
    opened.Notify();
    enqueued.WaitForNotification();
    their_end = engine.GroupEnd();
  });
  opened.WaitForNotification();
  absl::StatusOr<Handle> h =
      engine.AllreduceAsync("mine", v, v, {2}, ReduceOp::kSum);
  enqueued.Notify();
  t.join();
  TERSE_RETURN_IF_ERROR(their_start);
  TERSE_RETURN_IF_ERROR(their_end);
  if (!h.ok()) return h.status();
  TERSE_RETURN_IF_ERROR(engine.Wait(*h));
  return Expect(x[1] == engine.size() * (engine.size() + 1) / 2.0f,
                "an op outside the group ran");
}

}  // namespace

std::vector<Scenario> GroupScenarios() {
  return {
      {"GroupedAllreduce", nullptr, GroupedAllreduce},
      {"GroupedMixedOps", nullptr, GroupedMixedOps},
      {"GroupFailsAsOne", nullptr, GroupFailsAsOne},
      {"GroupOnProcessSet", nullptr, GroupOnProcessSet},
      {"GroupWhileARankHasJoined", nullptr, GroupWhileARankHasJoined},
      {"GroupWithCompression", nullptr, GroupWithCompression},
      {"GroupMisuse", nullptr, GroupMisuse},
  };
}

}  // namespace testing
}  // namespace terse
