// Compression scenarios (see engine_testing.h): the compressing reducer seen
// through the engine, on loopback and under mpirun. The oracle is a
// conservation law, independent of how the tensors were fused: after T
// steps, what the allreduces returned plus every rank's residual equals
// everything the ranks put in; and every rank holds bitwise-identical sums.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/engine_testing.h"

namespace terse {
namespace testing {
namespace {

constexpr int kSteps = 4;
const int64_t kSizes[] = {500, 1200, 300};

std::vector<float> Gradient(int rank, int step, int t, int64_t n) {
  std::mt19937 rng(1 + rank * 1000 + step * 10 + t);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> g(n);
  for (float& x : g) x = normal(rng);
  return g;
}

absl::Status Reduce(Engine& engine, const std::string& name,
                    std::vector<float>* values, ReduceOp op) {
  TensorView view(values->data(), static_cast<int64_t>(values->size()),
                  DataType::kFloat32);
  TERSE_ASSIGN_OR_RETURN(
      Handle h,
      engine.AllreduceAsync(name, view, view,
                            {static_cast<int64_t>(values->size())}, op));
  return engine.Wait(h);
}

// The max and the min over ranks of `values` are equal exactly when every
// rank holds the same bits (no NaN here).
absl::Status ExpectIdenticalOnEveryRank(Engine& engine, const std::string& name,
                                        const std::vector<float>& values) {
  std::vector<float> max = values, min = values;
  TERSE_RETURN_IF_ERROR(Reduce(engine, name + ".max", &max, ReduceOp::kMax));
  TERSE_RETURN_IF_ERROR(Reduce(engine, name + ".min", &min, ReduceOp::kMin));
  return Expect(max == min, name + " is bitwise identical on every rank");
}

absl::Status CompressedConservation(int rank, Engine& engine) {
  const int n = 3;
  std::vector<std::vector<double>> reduced(n), inputs(n);
  for (int t = 0; t < n; ++t) {
    reduced[t].assign(kSizes[t], 0.0);
    inputs[t].assign(kSizes[t], 0.0);
  }
  for (int step = 0; step < kSteps; ++step) {
    std::vector<std::vector<float>> tensors(n);
    std::vector<Handle> handles(n);
    for (int t = 0; t < n; ++t) {
      tensors[t] = Gradient(rank, step, t, kSizes[t]);
      // Everybody's inputs, for the oracle.
      for (int r = 0; r < engine.size(); ++r) {
        std::vector<float> g = Gradient(r, step, t, kSizes[t]);
        for (int64_t i = 0; i < kSizes[t]; ++i) inputs[t][i] += g[i];
      }
      TensorView view(tensors[t].data(), kSizes[t], DataType::kFloat32);
      TERSE_ASSIGN_OR_RETURN(
          handles[t], engine.AllreduceAsync(absl::StrCat("grad", t), view, view,
                                            {kSizes[t]}, ReduceOp::kSum));
    }
    for (int t = 0; t < n; ++t) {
      TERSE_RETURN_IF_ERROR(engine.Wait(handles[t]));
      for (int64_t i = 0; i < kSizes[t]; ++i) reduced[t][i] += tensors[t][i];
      TERSE_RETURN_IF_ERROR(ExpectIdenticalOnEveryRank(
          engine, absl::StrCat("dense.check", t), tensors[t]));
    }
  }
  std::vector<BucketReport> reports = engine.compression().Reports();
  bool compressed = false;
  for (const BucketReport& r : reports) {
    compressed |= r.compressor == "topk" && r.cf == 10;
  }
  TERSE_RETURN_IF_ERROR(Expect(compressed, "a bucket was sent as topk cf 10"));
  for (int t = 0; t < n; ++t) {
    // The residuals, summed densely (the rule keeps "dense.*" uncompressed).
    std::vector<float> residual =
        engine.compression().Residual(absl::StrCat("grad", t), kSizes[t]);
    TERSE_RETURN_IF_ERROR(Reduce(engine, absl::StrCat("dense.residual", t),
                                 &residual, ReduceOp::kSum));
    for (int64_t i = 0; i < kSizes[t]; ++i) {
      const double total = reduced[t][i] + residual[i];
      if (std::fabs(total - inputs[t][i]) > 1e-3) {
        return absl::InternalError(absl::StrCat(
            "rank ", rank, ": grad", t, "[", i, "]: reduced + residuals = ",
            total, " but the inputs sum to ", inputs[t][i]));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<Scenario> CompressionScenarios() {
  return {
      {"CompressedTopKConserves",
       [](Config* c) {
         c->compression = "topk";
         c->cf = 10;
         c->min_compress_bytes = 0;
         c->compression_rules = {{"dense.*", "none", 0}};
       },
       CompressedConservation},
  };
}

}  // namespace testing
}  // namespace terse
