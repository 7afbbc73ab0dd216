// Writes engine timelines for timeline_test.py: three loopback ranks run a
// few steps of fused allreduces (two buckets), a broadcast and an allgather
// with TERSE_TIMELINE=<dir>/timeline_{rank}.json.
//
//   timeline_demo OUTPUT_DIR
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/loopback/loopback.h"
#include "common/config.h"
#include "common/status.h"
#include "engine/engine.h"

namespace terse {
namespace {

absl::Status Run(const std::string& dir) {
  Config config = Config::Defaults();
  config.cycle_time_ms = 1;
  config.fusion_threshold_bytes = 4000;
  config.timeline_path = dir + "/timeline_{rank}.json";
  return RunLoopbackRanks(3, [&](int rank, Communicator* comm) {
    TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                           Engine::Create(config, comm));
    std::vector<std::vector<float>> grads(6, std::vector<float>(300, 1.0f));
    for (int step = 0; step < 3; ++step) {
      std::vector<Handle> handles;
      for (int t = 0; t < 6; ++t) {
        TensorView v(grads[t].data(), 300, DataType::kFloat32);
        TERSE_ASSIGN_OR_RETURN(
            Handle h, engine->AllreduceAsync(absl::StrCat("layer", t, "/\"w\""),
                                             v, v, {300}, ReduceOp::kAverage));
        handles.push_back(h);
      }
      for (Handle h : handles) TERSE_RETURN_IF_ERROR(engine->Wait(h));
    }
    std::vector<int32_t> b(5, rank);
    TERSE_ASSIGN_OR_RETURN(
        Handle hb,
        engine->BroadcastAsync(
            "bcast", TensorView(b.data(), 5, DataType::kInt32), {5}, 0));
    TERSE_RETURN_IF_ERROR(engine->Wait(hb));
    TERSE_ASSIGN_OR_RETURN(
        Handle hg,
        engine->AllgatherAsync("gather",
                               TensorView(b.data(), 5, DataType::kInt32), {5}));
    TERSE_RETURN_IF_ERROR(engine->Wait(hg));
    TERSE_RETURN_IF_ERROR(engine->TakeAllgatherResult(hg).status());
    TERSE_RETURN_IF_ERROR(engine->Barrier());
    return engine->Shutdown();
  });
}

}  // namespace
}  // namespace terse

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  absl::Status status = terse::Run(argv[1]);
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
