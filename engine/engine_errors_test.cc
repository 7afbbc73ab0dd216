// Failure behaviour of the engine with loopback ranks: disagreements between
// ranks, stalls, shutdown with pending ops, fatal errors, join, bad
// arguments, and buckets whose members stop arriving together.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "collectives/loopback/loopback.h"
#include "common/status.h"
#include "engine/engine.h"
#include "engine/engine_testing.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

using testing::RunEngines;
using testing::TestConfig;

absl::Status Expect(bool condition, const std::string& what) {
  return condition ? absl::OkStatus() : absl::InternalError(what);
}

absl::Status ExpectContains(const absl::Status& s, const std::string& text) {
  return Expect(absl::StrContains(s.message(), text),
                absl::StrCat("status '", s.ToString(), "' lacks '", text, "'"));
}

// Polls `done` every few ms for up to 30 s.
bool Eventually(const std::function<bool()>& done) {
  for (int i = 0; i < 6000; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

TEST(EngineErrorsTest, ShapeMismatchFailsOnEveryRankNamingTheRanks) {
  absl::Status status =
      RunEngines(4, TestConfig(), [&](int rank, Engine& engine) {
        const int64_t n = rank == 1 ? 5 : 4;
        std::vector<float> w(n, 1.0f);
        TensorView v(w.data(), n, DataType::kFloat32);
        TERSE_ASSIGN_OR_RETURN(
            Handle h, engine.AllreduceAsync("w", v, v, {n}, ReduceOp::kSum));
        absl::Status s = engine.Wait(h);
        TERSE_RETURN_IF_ERROR(Expect(
            s.code() == absl::StatusCode::kInvalidArgument, s.ToString()));
        TERSE_RETURN_IF_ERROR(ExpectContains(
            s, "tensor 'w': shape [4] on ranks 0,2,3 but [5] on rank 1"));
        // Not fatal: the next op works.
        std::vector<float> ok(3, 1.0f);
        TensorView u(ok.data(), 3, DataType::kFloat32);
        TERSE_ASSIGN_OR_RETURN(
            Handle h2, engine.AllreduceAsync("w", u, u, {3}, ReduceOp::kSum));
        TERSE_RETURN_IF_ERROR(engine.Wait(h2));
        return Expect(ok[0] == 4.0f, "sum after the error");
      });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(EngineErrorsTest, DtypeOpAndRootMismatches) {
  absl::Status status =
      RunEngines(3, TestConfig(), [&](int rank, Engine& engine) {
        std::vector<double> d(2, 1.0);
        std::vector<float> f(2, 1.0f);
        TensorView dv(d.data(), 2, DataType::kFloat64);
        TensorView fv(f.data(), 2, DataType::kFloat32);
        TensorView mine = rank == 2 ? dv : fv;
        TERSE_ASSIGN_OR_RETURN(
            Handle a,
            engine.AllreduceAsync("dt", mine, mine, {2}, ReduceOp::kSum));
        TERSE_ASSIGN_OR_RETURN(
            Handle b,
            engine.AllreduceAsync("op", fv, fv, {2},
                                  rank == 0 ? ReduceOp::kMax : ReduceOp::kSum));
        std::vector<float> g(2, 0.0f);
        TensorView gv(g.data(), 2, DataType::kFloat32);
        TERSE_ASSIGN_OR_RETURN(
            Handle c,
            engine.BroadcastAsync("root", gv, {2}, rank == 1 ? 1 : 0));
        TERSE_RETURN_IF_ERROR(ExpectContains(
            engine.Wait(a),
            "tensor 'dt': dtype f32 on ranks 0,1 but f64 on rank 2"));
        TERSE_RETURN_IF_ERROR(ExpectContains(
            engine.Wait(b),
            "tensor 'op': reduce op max on rank 0 but sum on ranks 1,2"));
        return ExpectContains(
            engine.Wait(c),
            "tensor 'root': root rank 0 on ranks 0,2 but 1 on rank 1");
      });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(EngineErrorsTest, ChangedShapeOfACachedTensorIsCaught) {
  absl::Status status =
      RunEngines(3, TestConfig(), [&](int rank, Engine& engine) {
        for (int step = 0; step < 3; ++step) {
          const int64_t n = (step == 2 && rank == 2) ? 6 : 4;
          std::vector<float> w(n, 1.0f);
          TensorView v(w.data(), n, DataType::kFloat32);
          TERSE_ASSIGN_OR_RETURN(
              Handle h, engine.AllreduceAsync("c", v, v, {n}, ReduceOp::kSum));
          absl::Status s = engine.Wait(h);
          if (step < 2) {
            TERSE_RETURN_IF_ERROR(s);
          } else {
            TERSE_RETURN_IF_ERROR(ExpectContains(
                s, "tensor 'c': shape [4] on ranks 0,1 but [6] on rank 2"));
          }
        }
        return absl::OkStatus();
      });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(EngineErrorsTest, DuplicateNameAndBadArgumentsFailAtEnqueue) {
  absl::Status status =
      RunEngines(2, TestConfig(), [&](int rank, Engine& engine) {
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
        auto shape = engine.AllreduceAsync("bad", v, v, {5}, ReduceOp::kSum);
        TERSE_RETURN_IF_ERROR(ExpectContains(shape.status(), "4"));
        std::vector<int32_t> i(4, 1);
        TensorView iv(i.data(), 4, DataType::kInt32);
        TERSE_RETURN_IF_ERROR(Expect(
            !engine.AllreduceAsync("iavg", iv, iv, {4}, ReduceOp::kAverage)
                 .ok(),
            "integer average"));
        TERSE_RETURN_IF_ERROR(Expect(
            !engine.BroadcastAsync("root", v, {4}, 7).ok(), "root range"));
        TERSE_RETURN_IF_ERROR(Expect(
            !engine.AllreduceAsync("__terse.x", v, v, {4}, ReduceOp::kSum).ok(),
            "reserved name"));
        return Expect(engine.Wait(12345).code() == absl::StatusCode::kNotFound,
                      "handle");
      });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(EngineErrorsTest, StallWarningNamesTheMissingRankAndTensor) {
  Config config = TestConfig();
  config.stall_check_seconds = 0.3;
  absl::Status status = RunEngines(3, config, [&](int rank, Engine& engine) {
    std::vector<float> w(8, 1.0f);
    TensorView v(w.data(), 8, DataType::kFloat32);
    if (rank != 2) {
      TERSE_ASSIGN_OR_RETURN(
          Handle h, engine.AllreduceAsync("lonely", v, v, {8}, ReduceOp::kSum));
      if (rank == 0) {
        TERSE_RETURN_IF_ERROR(Expect(
            Eventually([&] { return !engine.last_stall_warning().empty(); }),
            "no stall warning"));
      }
      TERSE_RETURN_IF_ERROR(engine.Barrier().code() == absl::StatusCode::kOk
                                ? absl::OkStatus()
                                : absl::InternalError("barrier"));
      TERSE_RETURN_IF_ERROR(engine.Wait(h));
    } else {
      // Rank 2 submits only after rank 0 has warned (the barrier).
      TERSE_RETURN_IF_ERROR(engine.Barrier());
      TERSE_ASSIGN_OR_RETURN(
          Handle h, engine.AllreduceAsync("lonely", v, v, {8}, ReduceOp::kSum));
      TERSE_RETURN_IF_ERROR(engine.Wait(h));
    }
    if (rank == 0) {
      const std::string warning = engine.last_stall_warning();
      TERSE_RETURN_IF_ERROR(Expect(
          absl::StrContains(warning,
                            "tensor 'lonely' submitted by ranks 0,1 but not "
                            "by rank 2"),
          warning));
    }
    return Expect(w[0] == 3.0f, "sum after the stall");
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(EngineErrorsTest, StallOfACachedTensorIsReportedToo) {
  Config config = TestConfig();
  config.stall_check_seconds = 0.3;
  absl::Status status = RunEngines(2, config, [&](int rank, Engine& engine) {
    std::vector<float> w(8, 1.0f);
    TensorView v(w.data(), 8, DataType::kFloat32);
    for (int step = 0; step < 2; ++step) {  // Cached after the first step.
      TERSE_ASSIGN_OR_RETURN(
          Handle h, engine.AllreduceAsync("c", v, v, {8}, ReduceOp::kSum));
      TERSE_RETURN_IF_ERROR(engine.Wait(h));
    }
    if (rank == 0) {
      TERSE_ASSIGN_OR_RETURN(
          Handle h, engine.AllreduceAsync("c", v, v, {8}, ReduceOp::kSum));
      TERSE_RETURN_IF_ERROR(Expect(
          Eventually([&] { return !engine.last_stall_warning().empty(); }),
          "no stall warning"));
      TERSE_RETURN_IF_ERROR(Expect(
          absl::StrContains(engine.last_stall_warning(),
                            "tensor 'c' submitted by rank 0 but not by rank 1"),
          engine.last_stall_warning()));
      TERSE_RETURN_IF_ERROR(engine.Barrier());
      return engine.Wait(h);
    }
    TERSE_RETURN_IF_ERROR(engine.Barrier());
    TERSE_ASSIGN_OR_RETURN(
        Handle h, engine.AllreduceAsync("c", v, v, {8}, ReduceOp::kSum));
    return engine.Wait(h);
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(EngineErrorsTest, StallShutdownFailsPendingOpsOnEveryRank) {
  Config config = TestConfig();
  config.stall_check_seconds = 0.2;
  config.stall_shutdown_seconds = 0.5;
  absl::Status status = RunLoopbackRanks(3, [&](int rank, Communicator* comm) {
    TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                           Engine::Create(config, comm));
    std::vector<float> w(8, 1.0f);
    TensorView v(w.data(), 8, DataType::kFloat32);
    // Ranks 0 and 1 wait for 'lonely'; rank 2 waits for 'other'.
    TERSE_ASSIGN_OR_RETURN(
        Handle h, engine->AllreduceAsync(rank == 2 ? "other" : "lonely", v, v,
                                         {8}, ReduceOp::kSum));
    absl::Status s = engine->Wait(h);
    TERSE_RETURN_IF_ERROR(
        Expect(s.code() == absl::StatusCode::kDeadlineExceeded, s.ToString()));
    TERSE_RETURN_IF_ERROR(ExpectContains(
        s, "tensor 'lonely' submitted by ranks 0,1 but not by rank 2"));
    TERSE_RETURN_IF_ERROR(ExpectContains(
        s, "tensor 'other' submitted by rank 2 but not by ranks 0,1"));
    // Later enqueues fail fast with the root cause.
    auto later = engine->AllreduceAsync("later", v, v, {8}, ReduceOp::kSum);
    TERSE_RETURN_IF_ERROR(ExpectContains(later.status(), "stalled"));
    absl::Status down = engine->Shutdown();
    return ExpectContains(down, "tensor 'lonely'");
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(EngineErrorsTest, ShutdownWithPendingOpsFailsThemCleanly) {
  absl::Status status = RunLoopbackRanks(3, [&](int rank, Communicator* comm) {
    TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                           Engine::Create(TestConfig(), comm));
    std::vector<float> w(8, 1.0f);
    TensorView v(w.data(), 8, DataType::kFloat32);
    TERSE_RETURN_IF_ERROR(engine->Barrier());
    // Only rank 0 submits 'never'; then rank 0 shuts everything down.
    absl::StatusOr<Handle> h;
    if (rank == 0) {
      h = engine->AllreduceAsync("never", v, v, {8}, ReduceOp::kSum);
      TERSE_RETURN_IF_ERROR(h.status());
      TERSE_RETURN_IF_ERROR(engine->Shutdown());
      absl::Status s = engine->Wait(*h);
      TERSE_RETURN_IF_ERROR(
          Expect(s.code() == absl::StatusCode::kAborted, s.ToString()));
      TERSE_RETURN_IF_ERROR(ExpectContains(s, "terse was shut down"));
    } else {
      // The other ranks' engines stop too; a pending op fails, new ones too.
      h = engine->AllreduceAsync(absl::StrCat("mine", rank), v, v, {8},
                                 ReduceOp::kSum);
      if (h.ok()) {
        TERSE_RETURN_IF_ERROR(ExpectContains(engine->Wait(*h), "shut down"));
      }
      TERSE_RETURN_IF_ERROR(Expect(
          Eventually([&] {
            return !engine->AllreduceAsync("x", v, v, {8}, ReduceOp::kSum).ok();
          }),
          "enqueue after shutdown"));
      TERSE_RETURN_IF_ERROR(engine->Shutdown());
    }
    auto after = engine->AllreduceAsync("after", v, v, {8}, ReduceOp::kSum);
    TERSE_RETURN_IF_ERROR(
        Expect(after.status().code() == absl::StatusCode::kFailedPrecondition,
               after.status().ToString()));
    return engine->Shutdown();  // Idempotent.
  });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(EngineErrorsTest, JoinedRankContributesZeros) {
  absl::Status status =
      RunEngines(4, TestConfig(), [&](int rank, Engine& engine) {
        if (rank == 3) {
          TERSE_ASSIGN_OR_RETURN(int last, engine.Join());
          return Expect(last != 3, absl::StrCat("last joined ", last));
        }
        // Ranks 0..2 run five steps (uncached, then cached) without rank 3.
        for (int step = 0; step < 5; ++step) {
          std::vector<float> a(6, rank + 1.0f), b(3, 2.0f);
          TensorView av(a.data(), 6, DataType::kFloat32);
          TensorView bv(b.data(), 3, DataType::kFloat32);
          TERSE_ASSIGN_OR_RETURN(
              Handle ha,
              engine.AllreduceAsync("a", av, av, {6}, ReduceOp::kSum));
          TERSE_ASSIGN_OR_RETURN(
              Handle hb,
              engine.AllreduceAsync("b", bv, bv, {3}, ReduceOp::kAverage));
          TERSE_RETURN_IF_ERROR(engine.Wait(ha));
          TERSE_RETURN_IF_ERROR(engine.Wait(hb));
          // Average divides by all 4 ranks (the joined one gave zeros).
          TERSE_RETURN_IF_ERROR(Expect(a[5] == 6.0f && b[2] == 1.5f,
                                       absl::StrCat("a=", a[5], " b=", b[2])));
        }
        TERSE_ASSIGN_OR_RETURN(int last, engine.Join());
        return Expect(last >= 0 && last < 3, absl::StrCat("last ", last));
      });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(EngineErrorsTest, BucketWhoseMemberStopsArrivingIsSplit) {
  Config config = TestConfig();
  config.cycle_time_ms = 2;  // Split after about a second of cycles.
  absl::Status status = RunEngines(2, config, [&](int rank, Engine& engine) {
    std::vector<float> a(4, 1.0f), b(4, 1.0f);
    TensorView av(a.data(), 4, DataType::kFloat32);
    TensorView bv(b.data(), 4, DataType::kFloat32);
    // Step 1: 'a' and 'b' together (one bucket, once they are negotiated in
    // the same cycle). Step 2: only 'a'; it must still complete.
    TERSE_ASSIGN_OR_RETURN(
        Handle ha, engine.AllreduceAsync("a", av, av, {4}, ReduceOp::kSum));
    TERSE_ASSIGN_OR_RETURN(
        Handle hb, engine.AllreduceAsync("b", bv, bv, {4}, ReduceOp::kSum));
    TERSE_RETURN_IF_ERROR(engine.Wait(ha));
    TERSE_RETURN_IF_ERROR(engine.Wait(hb));
    TERSE_ASSIGN_OR_RETURN(
        ha, engine.AllreduceAsync("a", av, av, {4}, ReduceOp::kSum));
    TERSE_RETURN_IF_ERROR(engine.Wait(ha));
    return Expect(a[0] == 4.0f, "a after two steps");
  });
  EXPECT_TRUE(status.ok()) << status;
}

}  // namespace
}  // namespace terse
