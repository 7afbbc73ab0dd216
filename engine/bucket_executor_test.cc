#include "engine/bucket_executor.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/forwarding_communicator.h"
#include "collectives/loopback/loopback.h"
#include "common/config.h"
#include "common/half.h"
#include "common/status.h"
#include "engine/compressed_reducer.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

Config MakeConfig(const std::string& compression) {
  absl::StatusOr<Config> c = Config::FromMap(
      {{"TERSE_COMPRESSION", compression}, {"TERSE_MIN_COMPRESS_BYTES", "0"}});
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
    ++reduces;
    return inner_->Reduce(ctx);
  }
  bool ReducesPlainDense(const BucketReduceContext& ctx) override {
    return inner_->ReducesPlainDense(ctx);
  }
  void DenseReduced(const BucketReduceContext& ctx, Clock::time_point start,
                    Clock::time_point end) override {
    ++pipelined;
    inner_->DenseReduced(ctx, start, end);
  }
  void CastReduced(const BucketReduceContext& ctx, DataType wire,
                   Clock::time_point start, Clock::time_point end,
                   const absl::Status& status) override {
    ++casts;
    ++pipelined;
    inner_->CastReduced(ctx, wire, start, end, status);
  }
  DataType CastWireType(const BucketReduceContext& ctx) override {
    return inner_->CastWireType(ctx);
  }
  int casts = 0;
  int reduces = 0;
  int pipelined = 0;

 private:
  CompressedReducer* inner_;
};

// Stages AllreduceStaged calls in ranges of `range` elements, filled in
// reverse order and drained from the front (as a backend that overlaps its
// copies might), around the target's Allreduce; counts the calls.
class RangeStagingCommunicator : public ForwardingCommunicator {
 public:
  RangeStagingCommunicator(Communicator* target, int64_t range)
      : ForwardingCommunicator(target), range_(range) {}
  absl::Status AllreduceStaged(void* buffer, int64_t count, DataType dtype,
                               ReduceOp op, const Staging& staging) override {
    ++staged;
    for (int64_t end = count; end > 0; end -= range_) {
      staging.fill(std::max<int64_t>(0, end - range_), end);
    }
    TERSE_RETURN_IF_ERROR(Allreduce(buffer, count, dtype, op));
    for (int64_t begin = 0; begin < count; begin += range_) {
      staging.drain(begin, std::min(count, begin + range_));
    }
    return absl::OkStatus();
  }
  int staged = 0;

 private:
  const int64_t range_;
};

struct Outcome {
  // [rank][step][member] outputs.
  std::vector<std::vector<std::vector<std::vector<float>>>> out;
  std::vector<BucketReport> reports;  // Rank 0's, after the last step.
  int64_t bytes_sent = 0;             // Rank 0's.
  std::vector<int> casts;             // Cast fast-path steps per rank.
  std::vector<int> reduces;           // Steps through Reduce, per rank.
  // Steps the executor reduced itself (DenseReduced/CastReduced: pipelined
  // or staged), per rank.
  std::vector<int> pipelined;
  std::vector<int> staged;  // AllreduceStaged calls, per rank.
};

// Runs `steps` steps of `bucket` on `size` loopback ranks. `in_place`: each
// member's output is its input (allreduce_). `chunk_bytes`: the executor's
// pipeline piece (0: whole buckets).
Outcome RunSteps(const Config& config, const Bucket& bucket, int size,
                 int steps,
                 const std::function<float(int, int, size_t, int64_t)>& value,
                 int64_t chunk_bytes = 0, bool in_place = false,
                 int64_t staging_range = 1 << 30) {
  Outcome o;
  o.out.assign(size, {});
  o.casts.assign(size, 0);
  o.reduces.assign(size, 0);
  o.pipelined.assign(size, 0);
  o.staged.assign(size, 0);
  std::vector<std::unique_ptr<CompressedReducer>> reducers;
  for (int r = 0; r < size; ++r) {
    reducers.push_back(std::make_unique<CompressedReducer>(config, r, size));
  }
  absl::Status status = RunLoopbackRanks(size, [&](int rank,
                                                   Communicator* comm) {
    CountingReducer counting(reducers[rank].get());
    RangeStagingCommunicator staging(comm, staging_range);
    BucketExecutor executor(&staging, &counting, nullptr, chunk_bytes);
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
        entries[i].output = TensorView(in_place ? in[i].data() : out[i].data(),
                                       count, DataType::kFloat32);
        ptrs[i] = &entries[i];
      }
      absl::Status s = executor.Run(bucket, ptrs, Clock::now());
      if (!s.ok()) return s;
      o.out[rank].push_back(in_place ? in : out);
    }
    o.casts[rank] = counting.casts;
    o.reduces[rank] = counting.reduces;
    o.pipelined[rank] = counting.pipelined;
    o.staged[rank] = staging.staged;
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
// Whole buckets (chunk 0), steps 1-2 are staged: cast and widened through
// AllreduceStaged's callbacks in ranges of 7 elements that cut through the
// members, filled back to front. With pieces of 16 elements (chunk 64
// bytes) they are cast, reduced and widened piece by piece. Same results
// and accounting either way.
TEST(BucketExecutorTest, CastBucketsAverageExactlyOnBothPaths) {
  const Bucket bucket = MakeBucket({5, 1, 300, 0, 17}, ReduceOp::kAverage);
  const int size = 4, steps = 3;
  for (const int64_t chunk : {int64_t{0}, int64_t{64}})
    for (const std::string wire : {"fp16", "bf16"}) {
      Outcome o = RunSteps(MakeConfig(wire), bucket, size, steps, Value, chunk,
                           /*in_place=*/false, /*staging_range=*/7);
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
      EXPECT_EQ(o.pipelined, std::vector<int>(size, steps - 1)) << wire;
      EXPECT_EQ(o.staged, std::vector<int>(size, chunk == 0 ? steps - 1 : 0))
          << wire;
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
  for (const int64_t chunk : {int64_t{0}, int64_t{24}})
    for (const std::string wire : {"fp16", "bf16"}) {
      Outcome o = RunSteps(MakeConfig(wire), bucket, 3, 3, value, chunk,
                           /*in_place=*/false, /*staging_range=*/5);
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
        const double sum =
            static_cast<double>(Value(0, step, i, j)) + Value(1, step, i, j);
        EXPECT_EQ(o.out[0][step][i][j], static_cast<float>(sum / 2));
      }
    }
  }
  EXPECT_EQ(o.bytes_sent, 2 * bucket.count * 4);
  EXPECT_EQ(o.casts, std::vector<int>(2, 0));
}

// Every rank's output of every step is the fp64 closed form of Value()
// with prescale 0.5, Average over `size` ranks and postscale 4 (exact in
// fp32 for 4 ranks).
void ExpectScaledAverage(const Outcome& o, const Bucket& bucket, int size,
                         int steps, bool in_place) {
  for (int rank = 0; rank < size; ++rank) {
    for (int step = 0; step < steps; ++step) {
      for (size_t i = 0; i < bucket.members.size(); ++i) {
        for (int64_t j = 0; j < bucket.members[i].count; ++j) {
          double sum = 0;
          for (int r = 0; r < size; ++r) sum += 0.5 * Value(r, step, i, j);
          ASSERT_EQ(o.out[rank][step][i][j],
                    static_cast<float>(sum / size * 4.0))
              << "in_place " << in_place << " rank " << rank << " step " << step
              << " member " << i << " element " << j;
        }
      }
    }
  }
}

// The two ways the executor fuses and reduces a plain dense bucket itself:
// - pipelined: larger than the pipeline piece, fused, reduced and unfused
//   in pieces that cut through its members (16 elements here);
// - staged: whole, not fused in its outputs, through AllreduceStaged's
//   callbacks (ranges of 7 elements that cut through its members, filled
//   back to front).
// Either way the result is the fp64 closed form (values exact in fp32:
// Average over 4 ranks, prescale 0.5, postscale 4), in place (each output
// its own input, separate allocations) and not, every step, and the step is
// accounted as one dense step of the whole bucket.
TEST(BucketExecutorTest, PipelinedAndStagedDenseBucketsGiveTheWholeReduction) {
  Bucket bucket = MakeBucket({5, 1, 300, 0, 17, 33}, ReduceOp::kAverage);
  bucket.prescale = 0.5;
  bucket.postscale = 4.0;
  const int size = 4, steps = 2;
  for (const bool staged : {false, true}) {
    for (const bool in_place : {false, true}) {
      SCOPED_TRACE(staged ? "staged" : "pipelined");
      Outcome o = RunSteps(MakeConfig("none"), bucket, size, steps, Value,
                           /*chunk_bytes=*/staged ? 0 : 64, in_place,
                           /*staging_range=*/7);
      ExpectScaledAverage(o, bucket, size, steps, in_place);
      EXPECT_EQ(o.staged, std::vector<int>(size, staged ? steps : 0));
      EXPECT_EQ(o.pipelined, std::vector<int>(size, steps));
      EXPECT_EQ(o.reduces, std::vector<int>(size, 0));
      ASSERT_EQ(o.reports.size(), 1u);
      EXPECT_EQ(o.reports[0].compressor, "none");
      EXPECT_EQ(o.reports[0].steps, steps);
      EXPECT_EQ(o.bytes_sent, steps * bucket.bytes);
    }
  }
}

// TERSE_PIPELINE_CHUNK=auto pipelines a set whose ranks share one host and
// leaves a set that spans hosts (a network between them) whole; a number is
// taken as it is.
TEST(BucketExecutorTest, AutoPipelinesOnlyWhereEveryRankSharesAHost) {
  LoopbackGroup one_host(4), two_hosts(4, /*local_size=*/2);
  EXPECT_EQ(PipelineChunkFor(kAutoPipelineChunk, *one_host.communicator(0)),
            kSharedMemoryPipelineChunk);
  EXPECT_EQ(PipelineChunkFor(kAutoPipelineChunk, *two_hosts.communicator(3)),
            0);
  EXPECT_EQ(PipelineChunkFor(4096, *two_hosts.communicator(0)), 4096);
  EXPECT_EQ(PipelineChunkFor(0, *one_host.communicator(0)), 0);
}

// Min and Max pipeline too; a bucket no larger than one piece is staged
// whole, and a bucket the reducer compresses takes Reduce.
TEST(BucketExecutorTest, OnlyPlainDenseBucketsLargerThanAPiecePipeline) {
  for (const ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
    const Bucket bucket = MakeBucket({40, 9}, op);
    Outcome o = RunSteps(MakeConfig("none"), bucket, 3, 1, Value, 32);
    for (size_t i = 0; i < 2; ++i) {
      for (int64_t j = 0; j < bucket.members[i].count; ++j) {
        float want = Value(0, 0, i, j);
        for (int r = 1; r < 3; ++r) {
          want = op == ReduceOp::kMin ? std::min(want, Value(r, 0, i, j))
                                      : std::max(want, Value(r, 0, i, j));
        }
        ASSERT_EQ(o.out[2][0][i][j], want) << i << " " << j;
      }
    }
    EXPECT_EQ(o.pipelined, std::vector<int>(3, 1));
  }
  const Bucket small = MakeBucket({4, 4}, ReduceOp::kSum);  // 32 bytes.
  Outcome whole = RunSteps(MakeConfig("none"), small, 2, 1, Value, 32);
  EXPECT_EQ(whole.staged, std::vector<int>(2, 1));
  EXPECT_EQ(whole.reduces, std::vector<int>(2, 0));
  const Bucket big = MakeBucket({400}, ReduceOp::kSum);
  Outcome topk = RunSteps(MakeConfig("topk"), big, 2, 1, Value, 32);
  EXPECT_EQ(topk.pipelined, std::vector<int>(2, 0));
  EXPECT_EQ(topk.staged, std::vector<int>(2, 0));
  EXPECT_EQ(topk.reduces, std::vector<int>(2, 1));
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
