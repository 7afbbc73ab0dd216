// Error scenarios (see engine_testing.h): disagreements between ranks, bad
// arguments, stalls, shutdown with pending ops, fatal errors, join, and
// buckets whose members stop arriving together.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/engine_testing.h"

namespace terse {
namespace testing {
namespace {

absl::Status ShapeMismatch(int rank, Engine& engine) {
  const int64_t n = rank == 1 ? 5 : 4;
  std::vector<float> w(n, 1.0f);
  TensorView v(w.data(), n, DataType::kFloat32);
  TERSE_ASSIGN_OR_RETURN(Handle h,
                         engine.AllreduceAsync("w", v, v, {n}, ReduceOp::kSum));
  absl::Status s = engine.Wait(h);
  TERSE_RETURN_IF_ERROR(
      Expect(s.code() == absl::StatusCode::kInvalidArgument, s.ToString()));
  TERSE_RETURN_IF_ERROR(
      ExpectContains(s, absl::StrCat("tensor 'w': shape [4] on ",
                                     RanksPhrase(AllBut(engine.size(), 1)),
                                     " but [5] on rank 1")));
  // Not fatal: the next op of the same name works.
  std::vector<float> ok(3, 1.0f);
  TensorView u(ok.data(), 3, DataType::kFloat32);
  TERSE_ASSIGN_OR_RETURN(Handle h2,
                         engine.AllreduceAsync("w", u, u, {3}, ReduceOp::kSum));
  TERSE_RETURN_IF_ERROR(engine.Wait(h2));
  return Expect(ok[0] == engine.size(), "sum after the error");
}

absl::Status OtherMismatches(int rank, Engine& engine) {
  const int last = engine.size() - 1;
  std::vector<double> d(2, 1.0);
  std::vector<float> f(2, 1.0f);
  TensorView dv(d.data(), 2, DataType::kFloat64);
  TensorView fv(f.data(), 2, DataType::kFloat32);
  TensorView mine = rank == last ? dv : fv;
  TERSE_ASSIGN_OR_RETURN(
      Handle a, engine.AllreduceAsync("dt", mine, mine, {2}, ReduceOp::kSum));
  std::vector<float> o(2, 1.0f);
  TensorView ov(o.data(), 2, DataType::kFloat32);
  TERSE_ASSIGN_OR_RETURN(
      Handle b,
      engine.AllreduceAsync("op", ov, ov, {2},
                            rank == 0 ? ReduceOp::kMax : ReduceOp::kSum));
  std::vector<float> g(2, 0.0f);
  TensorView gv(g.data(), 2, DataType::kFloat32);
  TERSE_ASSIGN_OR_RETURN(
      Handle c, engine.BroadcastAsync("root", gv, {2}, rank == 1 ? 1 : 0));
  TERSE_RETURN_IF_ERROR(ExpectContains(
      engine.Wait(a), absl::StrCat("tensor 'dt': dtype f32 on ",
                                   RanksPhrase(AllBut(engine.size(), last)),
                                   " but f64 on rank ", last)));
  TERSE_RETURN_IF_ERROR(ExpectContains(
      engine.Wait(b), absl::StrCat("tensor 'op': reduce op max on rank 0 but "
                                   "sum on ",
                                   RanksPhrase(AllBut(engine.size(), 0)))));
  return ExpectContains(
      engine.Wait(c),
      absl::StrCat("tensor 'root': root rank 0 on ",
                   RanksPhrase(AllBut(engine.size(), 1)), " but 1 on rank 1"));
}

absl::Status ChangedCachedShape(int rank, Engine& engine) {
  const int last = engine.size() - 1;
  for (int step = 0; step < 3; ++step) {
    const int64_t n = (step == 2 && rank == last) ? 6 : 4;
    std::vector<float> w(n, 1.0f);
    TensorView v(w.data(), n, DataType::kFloat32);
    TERSE_ASSIGN_OR_RETURN(
        Handle h, engine.AllreduceAsync("c", v, v, {n}, ReduceOp::kSum));
    absl::Status s = engine.Wait(h);
    if (step < 2) {
      TERSE_RETURN_IF_ERROR(s);
    } else {
      TERSE_RETURN_IF_ERROR(ExpectContains(
          s, absl::StrCat("tensor 'c': shape [4] on ",
                          RanksPhrase(AllBut(engine.size(), last)),
                          " but [6] on rank ", last)));
    }
  }
  return absl::OkStatus();
}

absl::Status BadArguments(int rank, Engine& engine) {
  std::vector<float> w(4, 1.0f);
  TensorView v(w.data(), 4, DataType::kFloat32);
  TERSE_ASSIGN_OR_RETURN(
      Handle h, engine.AllreduceAsync("dup", v, v, {4}, ReduceOp::kSum));
  std::vector<float> w2(4, 1.0f);
  TensorView v2(w2.data(), 4, DataType::kFloat32);
  auto dup = engine.AllreduceAsync("dup", v2, v2, {4}, ReduceOp::kSum);
  TERSE_RETURN_IF_ERROR(
      Expect(dup.status().code() == absl::StatusCode::kInvalidArgument,
             dup.status().ToString()));
  TERSE_RETURN_IF_ERROR(ExpectContains(dup.status(), "'dup'"));
  TERSE_RETURN_IF_ERROR(engine.Wait(h));
  TERSE_RETURN_IF_ERROR(ExpectContains(
      engine.AllreduceAsync("bad", v, v, {5}, ReduceOp::kSum).status(),
      "shape [5] has 5 elements but the input has 4"));
  std::vector<int32_t> i(4, 1);
  TensorView iv(i.data(), 4, DataType::kInt32);
  TERSE_RETURN_IF_ERROR(Expect(
      !engine.AllreduceAsync("iavg", iv, iv, {4}, ReduceOp::kAverage).ok(),
      "integer average accepted"));
  TERSE_RETURN_IF_ERROR(Expect(
      !engine.AllreduceAsync("iscale", iv, iv, {4}, ReduceOp::kSum, 2.0).ok(),
      "integer prescale accepted"));
  TERSE_RETURN_IF_ERROR(
      Expect(!engine.BroadcastAsync("root", v, {4}, engine.size()).ok(),
             "root out of range accepted"));
  TERSE_RETURN_IF_ERROR(Expect(
      !engine.AllreduceAsync("__terse.x", v, v, {4}, ReduceOp::kSum).ok(),
      "reserved name accepted"));
  TERSE_RETURN_IF_ERROR(
      Expect(!engine.AllgatherAsync("g", v, {}).ok(), "0-d allgather"));
  TERSE_RETURN_IF_ERROR(Expect(
      !engine
           .AllreduceAsync("null", TensorView(nullptr, 4, DataType::kFloat32),
                           v, {4}, ReduceOp::kSum)
           .ok(),
      "null input accepted"));
  return Expect(engine.Wait(12345).code() == absl::StatusCode::kNotFound,
                "unknown handle");
}

// Every rank but the last submits 'lonely'; rank 0 must warn naming the
// last rank, then the last rank submits it too.
absl::Status StallWarning(int rank, Engine& engine) {
  const int last = engine.size() - 1;
  std::vector<float> w(8, 1.0f);
  TensorView v(w.data(), 8, DataType::kFloat32);
  absl::StatusOr<Handle> h;
  if (rank != last) {
    h = engine.AllreduceAsync("lonely", v, v, {8}, ReduceOp::kSum);
    TERSE_RETURN_IF_ERROR(h.status());
    if (rank == 0) {
      TERSE_RETURN_IF_ERROR(Expect(Eventually([&] {
                                     return absl::StrContains(
                                         engine.last_stall_warning(), "lonely");
                                   }),
                                   "no stall warning"));
    }
  }
  TERSE_RETURN_IF_ERROR(engine.Barrier());  // After rank 0 has warned.
  if (rank == last) {
    h = engine.AllreduceAsync("lonely", v, v, {8}, ReduceOp::kSum);
    TERSE_RETURN_IF_ERROR(h.status());
  }
  TERSE_RETURN_IF_ERROR(engine.Wait(*h));
  if (rank == 0) {
    const std::string warning = engine.last_stall_warning();
    TERSE_RETURN_IF_ERROR(Expect(
        absl::StrContains(warning,
                          absl::StrCat("tensor 'lonely' submitted by ",
                                       RanksPhrase(AllBut(engine.size(), last)),
                                       " but not by rank ", last)),
        warning));
  }
  return Expect(w[0] == engine.size(), "sum after the stall");
}

// The same once the tensor is in the response cache.
absl::Status StallCached(int rank, Engine& engine) {
  const int last = engine.size() - 1;
  std::vector<float> w(8, 1.0f);
  TensorView v(w.data(), 8, DataType::kFloat32);
  for (int step = 0; step < 2; ++step) {
    TERSE_ASSIGN_OR_RETURN(
        Handle h, engine.AllreduceAsync("c", v, v, {8}, ReduceOp::kSum));
    TERSE_RETURN_IF_ERROR(engine.Wait(h));
  }
  absl::StatusOr<Handle> h;
  if (rank != last) {
    h = engine.AllreduceAsync("c", v, v, {8}, ReduceOp::kSum);
    TERSE_RETURN_IF_ERROR(h.status());
    if (rank == 0) {
      TERSE_RETURN_IF_ERROR(Expect(Eventually([&] {
                                     return absl::StrContains(
                                         engine.last_stall_warning(), "'c'");
                                   }),
                                   "no stall warning"));
      TERSE_RETURN_IF_ERROR(
          ExpectContains(absl::InternalError(engine.last_stall_warning()),
                         absl::StrCat("tensor 'c' submitted by ",
                                      RanksPhrase(AllBut(engine.size(), last)),
                                      " but not by rank ", last)));
    }
  }
  TERSE_RETURN_IF_ERROR(engine.Barrier());
  if (rank == last) {
    h = engine.AllreduceAsync("c", v, v, {8}, ReduceOp::kSum);
    TERSE_RETURN_IF_ERROR(h.status());
  }
  return engine.Wait(*h);
}

// Ranks but the last wait for 'lonely', the last for 'other'; after the
// stall-shutdown time both fail everywhere with the list.
absl::Status StallShutdown(int rank, Engine& engine) {
  const int last = engine.size() - 1;
  std::vector<float> w(8, 1.0f);
  TensorView v(w.data(), 8, DataType::kFloat32);
  TERSE_ASSIGN_OR_RETURN(
      Handle h, engine.AllreduceAsync(rank == last ? "other" : "lonely", v, v,
                                      {8}, ReduceOp::kSum));
  absl::Status s = engine.Wait(h);
  TERSE_RETURN_IF_ERROR(
      Expect(s.code() == absl::StatusCode::kDeadlineExceeded, s.ToString()));
  const std::string others = RanksPhrase(AllBut(engine.size(), last));
  TERSE_RETURN_IF_ERROR(
      ExpectContains(s, absl::StrCat("tensor 'lonely' submitted by ", others,
                                     " but not by rank ", last)));
  TERSE_RETURN_IF_ERROR(
      ExpectContains(s, absl::StrCat("tensor 'other' submitted by rank ", last,
                                     " but not by ", others)));
  // Later enqueues fail fast with the root cause.
  auto later = engine.AllreduceAsync("later", v, v, {8}, ReduceOp::kSum);
  TERSE_RETURN_IF_ERROR(ExpectContains(later.status(), "stalled"));
  TERSE_RETURN_IF_ERROR(ExpectContains(later.status(), "'lonely'"));
  return ExpectContains(engine.Shutdown(), "tensor 'lonely'");
}

// Rank 0 submits 'never' and shuts down: its op fails cleanly, every other
// rank's engine stops too.
absl::Status ShutdownWithPending(int rank, Engine& engine) {
  std::vector<float> w(8, 1.0f);
  TensorView v(w.data(), 8, DataType::kFloat32);
  TERSE_RETURN_IF_ERROR(engine.Barrier());
  if (rank == 0) {
    TERSE_ASSIGN_OR_RETURN(
        Handle h, engine.AllreduceAsync("never", v, v, {8}, ReduceOp::kSum));
    TERSE_RETURN_IF_ERROR(engine.Shutdown());
    absl::Status s = engine.Wait(h);
    TERSE_RETURN_IF_ERROR(
        Expect(s.code() == absl::StatusCode::kAborted, s.ToString()));
    TERSE_RETURN_IF_ERROR(ExpectContains(s, "terse was shut down"));
  } else {
    auto h = engine.AllreduceAsync(absl::StrCat("mine", rank), v, v, {8},
                                   ReduceOp::kSum);
    if (h.ok()) {
      TERSE_RETURN_IF_ERROR(ExpectContains(engine.Wait(*h), "shut down"));
    }
    TERSE_RETURN_IF_ERROR(Expect(
        Eventually([&] {
          return !engine.AllreduceAsync("x", v, v, {8}, ReduceOp::kSum).ok();
        }),
        "enqueue still accepted after shutdown"));
    TERSE_RETURN_IF_ERROR(engine.Shutdown());
  }
  auto after = engine.AllreduceAsync("after", v, v, {8}, ReduceOp::kSum);
  TERSE_RETURN_IF_ERROR(
      Expect(after.status().code() == absl::StatusCode::kFailedPrecondition,
             after.status().ToString()));
  return engine.Shutdown();  // Idempotent.
}

// The last rank joins at once; the others run five steps without it.
absl::Status JoinContributesZeros(int rank, Engine& engine) {
  const int last = engine.size() - 1;
  if (rank == last) {
    TERSE_ASSIGN_OR_RETURN(int joined_last, engine.Join());
    return Expect(joined_last >= 0 && joined_last < last,
                  absl::StrCat("last joined ", joined_last));
  }
  float want_a = 0;
  for (int r = 0; r < last; ++r) want_a += r + 1.0f;
  const float want_b = 2.0f * last / engine.size();
  for (int step = 0; step < 5; ++step) {  // Uncached, then cached.
    std::vector<float> a(6, rank + 1.0f), b(3, 2.0f);
    TensorView av(a.data(), 6, DataType::kFloat32);
    TensorView bv(b.data(), 3, DataType::kFloat32);
    TERSE_ASSIGN_OR_RETURN(
        Handle ha, engine.AllreduceAsync("a", av, av, {6}, ReduceOp::kSum));
    TERSE_ASSIGN_OR_RETURN(
        Handle hb, engine.AllreduceAsync("b", bv, bv, {3}, ReduceOp::kAverage));
    TERSE_RETURN_IF_ERROR(engine.Wait(ha));
    TERSE_RETURN_IF_ERROR(engine.Wait(hb));
    // Average divides by every rank (the joined one gave zeros).
    TERSE_RETURN_IF_ERROR(
        Expect(a[5] == want_a && std::abs(b[2] - want_b) < 1e-6,
               absl::StrCat("a=", a[5], " b=", b[2])));
  }
  TERSE_ASSIGN_OR_RETURN(int joined_last, engine.Join());
  return Expect(joined_last >= 0 && joined_last < last,
                absl::StrCat("last joined ", joined_last));
}

absl::Status BucketSplit(int rank, Engine& engine) {
  (void)rank;
  std::vector<float> a(4, 1.0f), b(4, 1.0f);
  TensorView av(a.data(), 4, DataType::kFloat32);
  TensorView bv(b.data(), 4, DataType::kFloat32);
  // Step 1: 'a' and 'b' together (one bucket when negotiated in the same
  // cycle). Step 2: only 'a'; it must still complete.
  TERSE_ASSIGN_OR_RETURN(
      Handle ha, engine.AllreduceAsync("a", av, av, {4}, ReduceOp::kSum));
  TERSE_ASSIGN_OR_RETURN(
      Handle hb, engine.AllreduceAsync("b", bv, bv, {4}, ReduceOp::kSum));
  TERSE_RETURN_IF_ERROR(engine.Wait(ha));
  TERSE_RETURN_IF_ERROR(engine.Wait(hb));
  TERSE_ASSIGN_OR_RETURN(
      ha, engine.AllreduceAsync("a", av, av, {4}, ReduceOp::kSum));
  TERSE_RETURN_IF_ERROR(engine.Wait(ha));
  const float n = static_cast<float>(engine.size());
  return Expect(a[0] == n * n, "a after two steps");
}

}  // namespace

std::vector<Scenario> ErrorScenarios() {
  auto stall = [](Config* c) { c->stall_check_seconds = 0.3; };
  return {
      {"ShapeMismatch", nullptr, ShapeMismatch},
      {"OtherMismatches", nullptr, OtherMismatches},
      {"ChangedCachedShape", nullptr, ChangedCachedShape},
      {"BadArguments", nullptr, BadArguments},
      {"StallWarning", stall, StallWarning},
      {"StallCached", stall, StallCached},
      {"StallShutdown",
       [](Config* c) {
         c->stall_check_seconds = 0.2;
         c->stall_shutdown_seconds = 0.5;
       },
       StallShutdown, /*stops_engine=*/true},
      {"ShutdownWithPending", nullptr, ShutdownWithPending,
       /*stops_engine=*/true},
      {"JoinContributesZeros", nullptr, JoinContributesZeros},
      {"BucketSplit", nullptr, BucketSplit, /*stops_engine=*/false,
       EngineOptions{/*bucket_split_seconds=*/0.05}},
  };
}

}  // namespace testing
}  // namespace terse
