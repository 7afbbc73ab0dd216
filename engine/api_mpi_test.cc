// The process-wide API (api.h) under mpirun (np 2 and 4): lifecycle errors,
// every op through the free functions, re-initialisation, configuration
// errors. Every rank runs the same cases in the same order.
#include <cstdlib>
#include <vector>

#include "engine/api.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

using ::testing::HasSubstr;

Config TestConfig() {
  Config config = Config::Defaults();
  config.cycle_time_ms = 1;
  return config;
}

TEST(ApiMpiTest, CallsBeforeInitFailCleanly) {
  EXPECT_FALSE(IsInitialized());
  absl::StatusOr<int> rank = Rank();
  EXPECT_EQ(rank.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(rank.status().message()),
              HasSubstr("terse is not initialised; call init() first"));
  float x = 0;
  TensorView v(&x, 1, DataType::kFloat32);
  EXPECT_EQ(AllreduceAsync("x", v, v, {1}, ReduceOp::kSum).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Barrier().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Shutdown().ok());  // Idempotent, even before Init.
}

TEST(ApiMpiTest, OpsThroughTheFreeFunctions) {
  ASSERT_TRUE(Init(TestConfig()).ok());
  EXPECT_EQ(Init(TestConfig()).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(IsInitialized());
  const int rank = *Rank();
  const int size = *Size();
  ASSERT_GE(size, 2);
  EXPECT_GE(*LocalRank(), 0);
  EXPECT_EQ(*LocalSize(), size);  // One host.

  std::vector<float> grad(1000, rank + 1.0f);
  TensorView g(grad.data(), 1000, DataType::kFloat32);
  auto h = AllreduceAsync("grad", g, g, {10, 100}, ReduceOp::kAverage);
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_TRUE(Wait(*h).ok());
  EXPECT_FLOAT_EQ(grad[999], (size + 1) / 2.0f);

  std::vector<int32_t> mine(rank + 1, rank);
  auto ag = AllgatherAsync(
      "rows", TensorView(mine.data(), rank + 1, DataType::kInt32), {rank + 1});
  ASSERT_TRUE(ag.ok());
  bool polled = false;
  while (!polled) polled = *Poll(*ag);
  ASSERT_TRUE(Wait(*ag).ok());
  auto result = TakeAllgatherResult(*ag);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->shape[0], size * (size + 1) / 2);
  const int32_t* rows = reinterpret_cast<const int32_t*>(result->data.data());
  EXPECT_EQ(rows[0], 0);
  EXPECT_EQ(rows[result->shape[0] - 1], size - 1);

  std::vector<double> weights(3, rank == 1 ? 42.0 : 0.0);
  auto b = BroadcastAsync(
      "w", TensorView(weights.data(), 3, DataType::kFloat64), {3}, 1);
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(Wait(*b).ok());
  EXPECT_EQ(weights[2], 42.0);

  EXPECT_TRUE(Barrier().ok());
  auto last = Join();
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_GE(*last, 0);
  EXPECT_LT(*last, size);
  EXPECT_TRUE(Shutdown().ok());
  EXPECT_FALSE(IsInitialized());
  EXPECT_EQ(Size().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ApiMpiTest, ReinitialiseAfterShutdown) {
  ASSERT_TRUE(Init(TestConfig()).ok());
  std::vector<float> x(4, 1.0f);
  TensorView v(x.data(), 4, DataType::kFloat32);
  auto h = AllreduceAsync("again", v, v, {4}, ReduceOp::kSum);
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(Wait(*h).ok());
  EXPECT_EQ(x[0], static_cast<float>(*Size()));
  ASSERT_TRUE(Barrier().ok());
  EXPECT_TRUE(Shutdown().ok());
  EXPECT_TRUE(Shutdown().ok());
}

// TERSE_MPI_ALLREDUCE=ring reaches the MPI backend: a fused bucket of an
// odd-sized tensor and a tiny one goes around terse's ring (which the
// default takes only across hosts), against the closed-form sums.
TEST(ApiMpiTest, RingAllreduceThroughTheEngine) {
  setenv("TERSE_MPI_ALLREDUCE", "ring", 1);
  absl::Status init = InitFromEnvironment();
  unsetenv("TERSE_MPI_ALLREDUCE");
  ASSERT_TRUE(init.ok()) << init;
  const int rank = *Rank();
  const int size = *Size();
  std::vector<float> big(100003), tiny(3);
  for (size_t i = 0; i < big.size(); ++i) big[i] = (rank + 1) * (i % 7);
  for (size_t i = 0; i < tiny.size(); ++i) tiny[i] = rank * 10.0f + i;
  TensorView b(big.data(), static_cast<int64_t>(big.size()),
               DataType::kFloat32);
  TensorView t(tiny.data(), 3, DataType::kFloat32);
  auto hb = AllreduceAsync("ring.big", b, b, {static_cast<int64_t>(big.size())},
                           ReduceOp::kSum);
  auto ht = AllreduceAsync("ring.tiny", t, t, {3}, ReduceOp::kAverage);
  EXPECT_TRUE(hb.ok() && Wait(*hb).ok());
  EXPECT_TRUE(ht.ok() && Wait(*ht).ok());
  const float rank_sum = size * (size + 1) / 2.0f;  // Sum of rank + 1.
  int64_t wrong = 0, first_wrong = -1;
  for (size_t i = 0; i < big.size(); ++i) {
    if (big[i] != rank_sum * (i % 7) && wrong++ == 0) first_wrong = i;
  }
  EXPECT_EQ(wrong, 0) << "first wrong element " << first_wrong;
  for (size_t i = 0; i < tiny.size(); ++i) {
    EXPECT_FLOAT_EQ(tiny[i], 10.0f * (size - 1) / 2.0f + i);
  }
  EXPECT_TRUE(Shutdown().ok());
}

TEST(ApiMpiTest, BadEnvironmentNamesTheVariable) {
  setenv("TERSE_CYCLE_TIME_MS", "fast", 1);
  absl::Status s = InitFromEnvironment();
  unsetenv("TERSE_CYCLE_TIME_MS");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("TERSE_CYCLE_TIME_MS"));
  EXPECT_FALSE(IsInitialized());
}

}  // namespace
}  // namespace terse
