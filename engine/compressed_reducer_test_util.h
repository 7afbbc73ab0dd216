// Test helpers shared by the compressed reducer's tests: buckets, configs,
// synthetic gradients, a top-k reference, and RunRanks, which drives every
// rank's reducer over the loopback communicator (ranks as threads).
#ifndef TERSE_ENGINE_COMPRESSED_REDUCER_TEST_UTIL_H_
#define TERSE_ENGINE_COMPRESSED_REDUCER_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "collectives/loopback/loopback.h"
#include "common/config.h"
#include "common/half.h"
#include "engine/compressed_reducer.h"
#include "gtest/gtest.h"

namespace terse {
namespace reducer_test {

inline Bucket MakeBucket(std::vector<int64_t> counts,
                         const std::string& prefix = "t") {
  Bucket b;
  b.id = 7;
  for (size_t i = 0; i < counts.size(); ++i) {
    b.members.push_back({absl::StrCat(prefix, i), counts[i]});
    b.count += counts[i];
  }
  b.bytes = b.count * 4;
  return b;
}

inline Config MakeConfig(std::map<std::string, std::string> values) {
  values["TERSE_MIN_COMPRESS_BYTES"] = "0";
  absl::StatusOr<Config> c = Config::FromMap(values);
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

// A heavy-tailed gradient: a few large entries, the rest small, so top-k
// at moderate CFs keeps nearly all the energy.
inline std::vector<float> Gradient(int rank, int step, int64_t n) {
  std::mt19937 rng(1000 * rank + step);
  std::normal_distribution<float> small(0.0f, 0.001f);
  std::vector<float> g(n);
  for (float& x : g) x = small(rng);
  for (int64_t i = (rank * 7 + step) % 50; i < n; i += 50) {
    g[i] = (i % 3 == 0 ? -1.0f : 1.0f) * (1.0f + 0.01f * (i % 97));
  }
  return g;
}

// Reference sparsifier: top-k by magnitude (ties: lower index) through a
// full sort, values rounded to bf16 as the default wire format does.
inline std::vector<float> TopKReference(const std::vector<float>& a,
                                        int64_t k) {
  std::vector<int64_t> order(a.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
    return std::fabs(a[x]) > std::fabs(a[y]);
  });
  std::vector<float> out(a.size(), 0.0f);
  for (int64_t j = 0; j < k; ++j) {
    out[order[j]] = BFloat16ToFloat(FloatToBFloat16(a[order[j]]));
  }
  return out;
}

// Runs `steps` steps of every rank's reducer on loopback; grads(rank, step)
// gives each rank's bucket. Returns results[step][rank].
struct RunResult {
  std::vector<std::vector<std::vector<float>>> results;
  std::vector<std::vector<std::string>> policies;  // [step][rank]
  std::vector<std::string> sent;  // What rank 0 sent at each step.
};

inline RunResult RunRanks(
    int size, const Config& config, const Bucket& bucket, int steps,
    const std::function<std::vector<float>(int, int)>& grads,
    std::vector<std::unique_ptr<CompressedReducer>>* reducers,
    absl::Status* status_out = nullptr,
    std::function<Communicator*(int, Communicator*)> wrap = nullptr) {
  RunResult run;
  run.results.assign(steps, std::vector<std::vector<float>>(size));
  run.policies.assign(steps, std::vector<std::string>(size));
  if (reducers->empty()) {
    for (int r = 0; r < size; ++r) {
      reducers->push_back(std::make_unique<CompressedReducer>(config, r, size));
    }
  }
  absl::Status status =
      RunLoopbackRanks(size, [&](int rank, Communicator* comm) {
        if (wrap) comm = wrap(rank, comm);
        for (int step = 0; step < steps; ++step) {
          std::vector<float> data = grads(rank, step);
          BucketReduceContext ctx;
          ctx.bucket = &bucket;
          ctx.data = data.data();
          ctx.op = ReduceOp::kSum;
          ctx.comm = comm;
          ctx.step = step;
          absl::Status s = (*reducers)[rank]->Reduce(ctx);
          if (!s.ok()) return s;
          run.results[step][rank] = data;
          run.policies[step][rank] =
              (*reducers)[rank]->Reports().at(0).policy + " sent " +
              absl::StrCat((*reducers)[rank]->Reports().at(0).cf);
          if (rank == 0) {
            run.sent.push_back((*reducers)[rank]->Reports().at(0).compressor);
          }
        }
        return absl::OkStatus();
      });
  if (status_out != nullptr)
    *status_out = status;
  else
    EXPECT_TRUE(status.ok()) << status;
  return run;
}

}  // namespace reducer_test
}  // namespace terse

#endif  // TERSE_ENGINE_COMPRESSED_REDUCER_TEST_UTIL_H_
