// A fatal error on one rank (a failed collective) reaches every rank: every
// pending op and every later enqueue fails with that root cause, not a
// generic "shut down".
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "collectives/forwarding_communicator.h"
#include "collectives/loopback/loopback.h"
#include "collectives/registry.h"
#include "common/status.h"
#include "engine/engine.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

// Forwards everything, but reports a failure after every allreduce (the
// rank still took part, so no peer hangs in the collective).
class FailingAllreduce : public ForwardingCommunicator {
 public:
  using ForwardingCommunicator::ForwardingCommunicator;
  absl::string_view backend() const override { return "failing"; }
  absl::Status Allreduce(void* b, int64_t c, DataType d, ReduceOp o) override {
    TERSE_RETURN_IF_ERROR(target()->Allreduce(b, c, d, o));
    return absl::DataLossError("injected failure on rank 1");
  }
};

TEST(EngineFatalTest, FirstErrorReachesEveryRankAsTheRootCause) {
  Config config = Config::Defaults();
  config.cycle_time_ms = 1;
  absl::Status status = RunLoopbackRanks(3, [&](int rank, Communicator* comm) {
    FailingAllreduce failing(comm);
    Communicator* mine = rank == 1 ? &failing : comm;
    TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                           Engine::Create(config, mine));
    std::vector<float> w(16, 1.0f);
    TensorView v(w.data(), 16, DataType::kFloat32);
    TERSE_ASSIGN_OR_RETURN(
        Handle h, engine->AllreduceAsync("w", v, v, {16}, ReduceOp::kSum));
    absl::Status first = engine->Wait(h);
    // Rank 1's own op fails at once; the others' succeed (their allreduce
    // was fine) or fail with the root cause if it arrived first.
    if (rank == 1 && !absl::StrContains(first.message(), "injected")) {
      return absl::InternalError("rank 1: " + first.ToString());
    }
    // From now on every rank refuses work with the root cause.
    absl::Status later;
    for (int i = 0; i < 2000; ++i) {
      auto h2 = engine->AllreduceAsync("after", v, v, {16}, ReduceOp::kSum);
      later = h2.ok() ? engine->Wait(*h2) : h2.status();
      if (!later.ok()) break;
    }
    if (!absl::StrContains(later.message(), "injected failure on rank 1") ||
        later.code() != absl::StatusCode::kDataLoss) {
      return absl::InternalError(
          absl::StrCat("rank ", rank, ": ", later.ToString()));
    }
    absl::Status down = engine->Shutdown();
    if (!absl::StrContains(down.message(), "injected failure on rank 1")) {
      return absl::InternalError("shutdown: " + down.ToString());
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

}  // namespace
}  // namespace terse
