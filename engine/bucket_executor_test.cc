#include "engine/bucket_executor.h"

#include <functional>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/loopback/loopback.h"
#include "common/config.h"
#include "common/half.h"
#include "common/status.h"
#include "engine/compressed_reducer.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

Config MakeConfig(const std::string& compression) {
  absl::StatusOr<Config> c =
      Config::FromMap({{"TERSE_COMPRESSION", compression},
                       {"TERSE_MIN_COMPRESS_BYTES", "0"}});
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

Bucket MakeBucket(const std::vector<int64_t>& counts, ReduceOp op) {
  Bucket b;
  b.id = 3;
  b.reduce_op = op;
  for (size_t i = 0; i < counts.size(); ++i) {
    b.members.push_back({absl::StrCat("g", i), counts[i]});
    b.count += counts[i];
  }
  b.bytes = b.count * 4;
  return b;
}

// Rank r's element j of member i at step s: multiples of 1/8 below 64, so
// every value, every partial sum over 4 ranks and the average are exact in
// fp16 and bf16 and the fp64 closed form is the oracle.
float Value(int rank, int step, size_t member, int64_t j) {
  return static_cast<float>((rank * 13 + step * 5 + member * 7 + j * 3) % 97) /
             8.0f -
         6.0f;
}

// Forwards to a CompressedReducer and counts the cast fast path's steps.
class CountingReducer : public BucketReducer {
 public:
  explicit CountingReducer(CompressedReducer* inner) : inner_(inner) {}
  absl::Status Reduce(const BucketReduceContext& ctx) override {
    return inner_->Reduce(ctx);
  }
  DataType CastWireType(const BucketReduceContext& ctx) override {
    return inner_->CastWireType(ctx);
  }
  absl::Status ReduceCast(const BucketReduceContext& ctx,
                          DataType wire) override {
    ++casts;
    return inner_->ReduceCast(ctx, wire);
  }
  int casts = 0;

 private:
  CompressedReducer* inner_;
};

struct Outcome {
  // [rank][step][member] outputs.
  std::vector<std::vector<std::vector<std::vector<float>>>> out;
  std::vector<BucketReport> reports;  // Rank 0's, after the last step.
  int64_t bytes_sent = 0;             // Rank 0's.
  std::vector<int> casts;             // Fast-path steps per rank.
};

Outcome RunSteps(const Config& config, const Bucket& bucket, int size, int steps,
            const std::function<float(int, int, size_t, int64_t)>& value) {
  Outcome o;
  o.out.assign(size, {});
  o.casts.assign(size, 0);
  std::vector<std::unique_ptr<CompressedReducer>> reducers;
  for (int r = 0; r < size; ++r) {
    reducers.push_back(std::make_unique<CompressedReducer>(config, r, size));
  }
  absl::Status status = RunLoopbackRanks(size, [&](int rank,
                                                   Communicator* comm) {
    CountingReducer counting(reducers[rank].get());
    BucketExecutor executor(comm, &counting, nullptr);
    for (int step = 0; step < steps; ++step) {
      const size_t n = bucket.members.size();
      std::vector<std::vector<float>> in(n), out(n);
      std::vector<TensorEntry> entries(n);
      std::vector<const TensorEntry*> ptrs(n);
      for (size_t i = 0; i < n; ++i) {
        const int64_t count = bucket.members[i].count;
        in[i].resize(count);
        for (int64_t j = 0; j < count; ++j) in[i][j] = value(rank, step, i, j);
        out[i].assign(count, -7.0f);
        entries[i].name = bucket.members[i].name;
        entries[i].input = TensorView(in[i].data(), count, DataType::kFloat32);
        entries[i].output =
            TensorView(out[i].data(), count, DataType::kFloat32);
        ptrs[i] = &entries[i];
      }
      absl::Status s = executor.Run(bucket, ptrs, Clock::now());
      if (!s.ok()) return s;
      o.out[rank].push_back(out);
    }
    o.casts[rank] = counting.casts;
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
  o.reports = reducers[0]->Reports();
  o.bytes_sent = reducers[0]->bytes_sent();
  return o;
}

// Steps 0 (the general path: the residual is not yet known to be empty) and
// 1-2 (the cast fast path) give the fp64 average on every rank, and the
// report counts 16-bit bytes.
TEST(BucketExecutorTest, CastBucketsAverageExactlyOnBothPaths) {
  const Bucket bucket = MakeBucket({5, 1, 300, 0, 17}, ReduceOp::kAverage);
  const int size = 4, steps = 3;
  for (const std::string wire : {"fp16", "bf16"}) {
    Outcome o = RunSteps(MakeConfig(wire), bucket, size, steps, Value);
    for (int rank = 0; rank < size; ++rank) {
      for (int step = 0; step < steps; ++step) {
        for (size_t i = 0; i < bucket.members.size(); ++i) {
          for (int64_t j = 0; j < bucket.members[i].count; ++j) {
            double sum = 0;
            for (int r = 0; r < size; ++r) sum += Value(r, step, i, j);
            ASSERT_EQ(o.out[rank][step][i][j], static_cast<float>(sum / size))
                << wire << " rank " << rank << " step " << step << " member "
                << i << " element " << j;
          }
        }
      }
    }
    EXPECT_EQ(o.casts, std::vector<int>(size, steps - 1)) << wire;
    ASSERT_EQ(o.reports.size(), 1u);
    EXPECT_EQ(o.reports[0].compressor, wire);
    EXPECT_EQ(o.reports[0].steps, steps);
    EXPECT_EQ(o.reports[0].bytes_sent, bucket.count * 2);
    EXPECT_EQ(o.bytes_sent, steps * bucket.count * 2);
  }
}

// Values that need rounding: one rank contributes, the others send zeros,
// so the sum is that rank's rounded value (x * prescale in fp32, rounded
// once to 16 bits), widened and postscaled in fp32. Both paths agree bitwise
// with that closed form.
TEST(BucketExecutorTest, CastRoundsOnceAndScalesInFloat) {
  Bucket bucket = MakeBucket({64, 3}, ReduceOp::kSum);
  bucket.prescale = 0.3;
  bucket.postscale = 1.7;
  auto value = [](int rank, int step, size_t member, int64_t j) {
    if (rank != 1) return 0.0f;
    return (static_cast<float>(j) + 0.1f * step) / 3.0f - 9.0f * member;
  };
  for (const std::string wire : {"fp16", "bf16"}) {
    Outcome o = RunSteps(MakeConfig(wire), bucket, 3, 3, value);
    for (int step = 0; step < 3; ++step) {
      for (size_t i = 0; i < 2; ++i) {
        for (int64_t j = 0; j < bucket.members[i].count; ++j) {
          const float x = value(1, step, i, j) * static_cast<float>(0.3);
          const float rounded = wire == "fp16"
                                    ? HalfToFloat(FloatToHalf(x))
                                    : BFloat16ToFloat(FloatToBFloat16(x));
          ASSERT_EQ(o.out[2][step][i][j], rounded * static_cast<float>(1.7))
              << wire << " step " << step << " member " << i << " " << j;
        }
      }
    }
  }
}

// "none" never takes the cast path: the exact fp32 average.
TEST(BucketExecutorTest, UncastBucketsUseTheGeneralPath) {
  const Bucket bucket = MakeBucket({9, 4}, ReduceOp::kAverage);
  Outcome o = RunSteps(MakeConfig("none"), bucket, 2, 2, Value);
  for (int step = 0; step < 2; ++step) {
    for (size_t i = 0; i < 2; ++i) {
      for (int64_t j = 0; j < bucket.members[i].count; ++j) {
        const double sum = static_cast<double>(Value(0, step, i, j)) +
                           Value(1, step, i, j);
        EXPECT_EQ(o.out[0][step][i][j], static_cast<float>(sum / 2));
      }
    }
  }
  EXPECT_EQ(o.bytes_sent, 2 * bucket.count * 4);
  EXPECT_EQ(o.casts, std::vector<int>(2, 0));
}

// bytes_run and steps_run (autotune's measurements): two buckets per step,
// three steps; a step ends when a name is reduced again.
TEST(BucketExecutorTest, CountsBytesAndStepsAsHorovodsAutotune) {
  Bucket a = MakeBucket({9, 4}, ReduceOp::kSum);
  Bucket b = MakeBucket({5}, ReduceOp::kSum);
  b.id = 4;
  b.members[0].name = "h0";
  CompressedReducer reducer(MakeConfig("none"), 0, 1);
  absl::Status status = RunLoopbackRanks(1, [&](int, Communicator* comm) {
    BucketExecutor executor(comm, &reducer, nullptr);
    std::vector<float> buf(9, 1.0f);
    std::vector<int64_t> steps;
    for (int step = 0; step < 3; ++step) {
      for (const Bucket* bucket : {&a, &b}) {
        std::vector<TensorEntry> entries(bucket->members.size());
        std::vector<const TensorEntry*> ptrs;
        for (size_t i = 0; i < entries.size(); ++i) {
          const int64_t n = bucket->members[i].count;
          entries[i].input = TensorView(buf.data(), n, DataType::kFloat32);
          entries[i].output = entries[i].input;
          ptrs.push_back(&entries[i]);
        }
        TERSE_RETURN_IF_ERROR(executor.Run(*bucket, ptrs, Clock::now()));
        steps.push_back(executor.steps_run());
      }
    }
    EXPECT_EQ(steps, (std::vector<int64_t>{0, 0, 1, 1, 2, 2}));
    EXPECT_EQ(executor.bytes_run(), 3 * (a.bytes + b.bytes));
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

}  // namespace
}  // namespace terse
