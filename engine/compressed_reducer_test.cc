#include "engine/compressed_reducer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/forwarding_communicator.h"
#include "collectives/loopback/loopback.h"
#include "common/half.h"
#include "compressors/registry.h"
#include "engine/checkpoint_format.h"
#include "engine/compressed_reducer_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

using reducer_test::Gradient;
using reducer_test::MakeBucket;
using reducer_test::MakeConfig;
using reducer_test::RunRanks;
using reducer_test::RunResult;
using reducer_test::TopKReference;
using ::testing::HasSubstr;

TEST(CompressedReducerTest, StaticTopKEqualsTheSumOfWhatEachRankSelected) {
  const Bucket bucket = MakeBucket({300, 700});
  const Config config =
      MakeConfig({{"TERSE_COMPRESSION", "topk"}, {"TERSE_CF", "10"}});
  std::vector<std::unique_ptr<CompressedReducer>> reducers;
  const int size = 4, steps = 3;
  RunResult run = RunRanks(
      size, config, bucket, steps,
      [&](int r, int s) { return Gradient(r, s, bucket.count); }, &reducers);
  // Step 0 has no residual: the sum of every rank's top-100, in rank order.
  std::vector<float> expected(bucket.count, 0.0f);
  for (int r = 0; r < size; ++r) {
    std::vector<float> sent = TopKReference(Gradient(r, 0, bucket.count), 100);
    for (int64_t i = 0; i < bucket.count; ++i) expected[i] += sent[i];
  }
  for (int r = 0; r < size; ++r) {
    EXPECT_EQ(run.results[0][r], expected) << "rank " << r;
  }
  // Conservation over all ranks and steps: what was reduced plus what stays
  // in the residuals is everything that went in.
  for (int64_t i = 0; i < bucket.count; ++i) {
    double in = 0, out = 0;
    for (int s = 0; s < steps; ++s) {
      out += run.results[s][0][i];
      for (int r = 0; r < size; ++r) in += Gradient(r, s, bucket.count)[i];
    }
    for (int r = 0; r < size; ++r) {
      const int64_t t = i < 300 ? 0 : 1;
      const int64_t at = i < 300 ? i : i - 300;
      out +=
          reducers[r]->Residual(absl::StrCat("t", t), t == 0 ? 300 : 700)[at];
    }
    ASSERT_NEAR(out, in, 1e-4) << i;
  }
}

// With the throughput guard on (the default) the decisions also depend on
// measured step times; those are averaged across ranks like the gains, so
// the ranks still agree.
TEST(CompressedReducerTest, GravacDecidesIdenticallyOnEveryRank) {
  for (const char* guard : {"off", "on"}) {
    SCOPED_TRACE(absl::StrCat("throughput guard ", guard));
    const Bucket bucket = MakeBucket({2000});
    const Config config =
        MakeConfig({{"TERSE_COMPRESSION", "gravac"},
                    {"TERSE_GRAVAC_WINDOW", "2"},
                    {"TERSE_GRAVAC_CANDIDATES", "topk"},
                    {"TERSE_GRAVAC_EPSILON", "0.7"},
                    {"TERSE_GRAVAC_EWMA", "0.5"},
                    {"TERSE_GRAVAC_THROUGHPUT_GUARD", guard},
                    // No settling on throughputs within 1%:
                    // decisions follow the gradients only (guard off).
                    {"TERSE_GRAVAC_OMEGA", "0"}});
    std::vector<std::unique_ptr<CompressedReducer>> reducers;
    RunResult run = RunRanks(
        4, config, bucket, 16,
        [&](int r, int s) { return Gradient(r, s, bucket.count); }, &reducers);
    std::set<std::string> seen;
    for (int s = 0; s < 16; ++s) {
      for (int r = 1; r < 4; ++r) {
        EXPECT_EQ(run.policies[s][r], run.policies[s][0]) << "step " << s;
        EXPECT_EQ(run.results[s][r], run.results[s][0]) << "step " << s;
      }
      seen.insert(run.policies[s][0]);
    }
    EXPECT_GT(seen.size(), 2u) << "the controller explored several CFs";
    if (std::string(guard) == "on") {
      // Steps 0 and 1 measure dense; step 1 (no residual left by step 0,
      // no probes) is reduced in place: still the plain sum over ranks.
      for (int s = 0; s < 2; ++s) {
        std::vector<float> sum(bucket.count, 0.0f);
        for (int r = 0; r < 4; ++r) {
          const std::vector<float> g = Gradient(r, s, bucket.count);
          for (int64_t i = 0; i < bucket.count; ++i) sum[i] += g[i];
        }
        for (int64_t i = 0; i < bucket.count; ++i) {
          ASSERT_NEAR(run.results[s][0][i], sum[i], 1e-4) << s << " " << i;
        }
      }
      continue;  // What it sends later depends on timing.
    }
    // Which CF it settles on depends on measured throughput (a sanitizer
    // build compresses slowly enough that dense wins on loopback); that it
    // sends compressed while exploring depends only on the gains: a
    // heavy-tailed gradient keeps more than epsilon of its energy at CF 10.
    bool compressed = false;
    for (int s = 0; s < 16; ++s) {
      const std::string& line = run.policies[s][0];
      compressed |= line.substr(line.rfind(" sent ") + 6) != "1";
    }
    EXPECT_TRUE(compressed) << "a heavy-tailed gradient compresses";
  }
}

TEST(CompressedReducerTest, MultiLevelSendsTopKOfTopK) {
  const Bucket bucket = MakeBucket({1000});
  // One rank; window 1 so the candidate (20) is explored from step 2 on
  // (the paper's start: no throughput guard measuring dense first).
  const Config config = MakeConfig({{"TERSE_COMPRESSION", "gravac"},
                                    {"TERSE_GRAVAC_THROUGHPUT_GUARD", "off"},
                                    {"TERSE_GRAVAC_WINDOW", "1"},
                                    {"TERSE_GRAVAC_CANDIDATES", "topk"},
                                    {"TERSE_GRAVAC_EPSILON", "0.5"},
                                    {"TERSE_GRAVAC_EWMA", "1"}});
  std::vector<std::unique_ptr<CompressedReducer>> reducers;
  const std::vector<float> g = Gradient(0, 0, bucket.count);
  RunResult run = RunRanks(
      1, config, bucket, 3, [&](int, int) { return g; }, &reducers);
  ASSERT_THAT(run.policies[2][0], HasSubstr("sent 20"));
  // The residual entering step 2 is what steps 0 and 1 left: both dense, so
  // none; level one keeps 100 entries, level two 50 of those.
  std::vector<float> level1 = TopKReference(g, 100);
  std::vector<float> level2 = TopKReference(level1, 50);
  EXPECT_EQ(run.results[2][0], level2);
}

// Corrupts the payload every rank receives from `victim` (one bit of its
// header), as a faulty or malicious peer would.
class CorruptingCommunicator : public ForwardingCommunicator {
 public:
  CorruptingCommunicator(Communicator* inner, int victim)
      : ForwardingCommunicator(inner), victim_(victim) {}
  absl::string_view backend() const override { return "corrupting"; }
  absl::Status Allgather(const void* s, void* r, int64_t n) override {
    absl::Status st = target()->Allgather(s, r, n);
    // Payloads (not the 8-byte size or 32-byte statistics exchanges).
    if (n > 64) static_cast<uint8_t*>(r)[victim_ * n] ^= 0x40;
    return st;
  }
  absl::Status Allgatherv(const void* send, void* recv,
                          const std::vector<int64_t>& sizes) override {
    absl::Status s = target()->Allgatherv(send, recv, sizes);
    int64_t at = 0;
    for (int r = 0; r < victim_; ++r) at += sizes[r];
    static_cast<uint8_t*>(recv)[at] ^= 0x40;  // The magic number.
    return s;
  }

 private:
  const int victim_;
};

TEST(CompressedReducerTest, CorruptPayloadFailsEveryRankNamingTheSender) {
  const Bucket bucket = MakeBucket({500});
  const Config config =
      MakeConfig({{"TERSE_COMPRESSION", "topk"}, {"TERSE_CF", "10"}});
  std::vector<std::unique_ptr<CompressedReducer>> reducers;
  std::vector<std::unique_ptr<CorruptingCommunicator>> wrappers(3);
  std::vector<absl::Status> per_rank(3);
  absl::Status status;
  RunRanks(
      3, config, bucket, 1,
      [&](int r, int s) { return Gradient(r, s, bucket.count); }, &reducers,
      &status,
      [&](int rank, Communicator* comm) {
        wrappers[rank] = std::make_unique<CorruptingCommunicator>(comm, 2);
        return wrappers[rank].get();
      });
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(),
              HasSubstr("payload from rank 2 does not decode"));
}
TEST(CompressedReducerTest, SavedStateContinuesIdentically) {
  const Bucket bucket = MakeBucket({800});
  // omega = 0 and no throughput guard: no decision depends on measured wall
  // time (which differs between any two runs), only on the gains, the
  // window and the residuals. (The guard's state: gravac_policy_test.)
  const Config config = MakeConfig({{"TERSE_COMPRESSION", "gravac"},
                                    {"TERSE_GRAVAC_THROUGHPUT_GUARD", "off"},
                                    {"TERSE_GRAVAC_WINDOW", "2"},
                                    {"TERSE_GRAVAC_CANDIDATES", "topk"},
                                    {"TERSE_GRAVAC_OMEGA", "0"},
                                    {"TERSE_GRAVAC_EPSILON", "0.7"}});
  auto grads = [&](int r, int s) { return Gradient(r, s, bucket.count); };
  std::vector<std::unique_ptr<CompressedReducer>> original;
  RunRanks(2, config, bucket, 7, grads, &original);
  std::vector<std::unique_ptr<CompressedReducer>> restored;
  for (int r = 0; r < 2; ++r) {
    restored.push_back(std::make_unique<CompressedReducer>(config, r, 2));
    ASSERT_TRUE(restored[r]->LoadState(*original[r]->SaveState()).ok());
  }
  auto later = [&](int r, int s) { return grads(r, s + 7); };
  RunResult a = RunRanks(2, config, bucket, 10, later, &original);
  RunResult b = RunRanks(2, config, bucket, 10, later, &restored);
  EXPECT_EQ(a.results, b.results);
  // The policy lines agree but for the measured throughputs (T_c=[...]).
  auto decisions = [](std::vector<std::vector<std::string>> policies) {
    for (auto& step : policies) {
      for (std::string& line : step) {
        const size_t at = line.find(" T_c=[");
        const size_t end = line.find(']', at);
        if (at != std::string::npos && end != std::string::npos) {
          line.erase(at, end + 1 - at);
        }
      }
    }
    return policies;
  };
  EXPECT_EQ(decisions(a.policies), decisions(b.policies));
  EXPECT_FALSE(restored[0]->LoadState("not a checkpoint").ok());
}

// PowerSGD's warm starts (each tensor's last Q) travel in the checkpoint:
// a restored reducer continues bit for bit like the original, while one
// that lost them (a fresh reducer given only the residuals, as before this
// was saved) starts from the drawn Q and differs.
TEST(CompressedReducerTest, PowerSgdSavedStateContinuesIdentically) {
  Bucket bucket = MakeBucket({24 * 30, 30, 16 * 12}, "layer.");
  bucket.members[0].shape = {24, 30};
  bucket.members[1].shape = {30};
  bucket.members[2].shape = {16, 12};
  const Config config = MakeConfig(
      {{"TERSE_COMPRESSION", "powersgd"}, {"TERSE_POWERSGD_RANK", "2"}});
  auto grads = [&](int r, int s) { return Gradient(r, s, bucket.count); };
  std::vector<std::unique_ptr<CompressedReducer>> original;
  RunRanks(2, config, bucket, 5, grads, &original);
  std::vector<std::unique_ptr<CompressedReducer>> restored, cold;
  for (int r = 0; r < 2; ++r) {
    restored.push_back(std::make_unique<CompressedReducer>(config, r, 2));
    absl::StatusOr<std::string> saved = original[r]->SaveState();
    ASSERT_TRUE(saved.ok()) << saved.status();
    ASSERT_TRUE(restored[r]->LoadState(*saved).ok());
    // The same checkpoint without its warm states.
    checkpoint::StringSource source(*saved);
    absl::StatusOr<checkpoint::Checkpoint> ckpt =
        checkpoint::ReadCheckpoint(&source);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    int warm = 0;
    for (const proto::BucketCompressionState& bs : ckpt->header.buckets()) {
      warm += bs.warm_states_size();
    }
    EXPECT_EQ(warm, 2);  // The two matrices; the bias goes uncompressed.
    proto::CheckpointHeader meta = ckpt->header;
    for (proto::BucketCompressionState& bs : *meta.mutable_buckets()) {
      bs.clear_warm_states();
    }
    std::vector<checkpoint::TensorToWrite> tensors;
    for (int i = 0; i < ckpt->header.tensors_size(); ++i) {
      const proto::CheckpointTensor& t = ckpt->header.tensors(i);
      if (t.kind() == proto::CheckpointTensor::WARM_STATE) continue;
      tensors.push_back(
          {t.name(), t.tensor_offset(), t.kind(), ckpt->values[i]});
    }
    std::string stripped;
    checkpoint::StringSink sink(&stripped);
    ASSERT_TRUE(
        checkpoint::WriteCheckpoint(meta, tensors, &sink, 1 << 20).ok());
    cold.push_back(std::make_unique<CompressedReducer>(config, r, 2));
    ASSERT_TRUE(cold[r]->LoadState(stripped).ok());
  }
  auto later = [&](int r, int s) { return grads(r, s + 5); };
  RunResult a = RunRanks(2, config, bucket, 4, later, &original);
  RunResult b = RunRanks(2, config, bucket, 4, later, &restored);
  RunResult c = RunRanks(2, config, bucket, 4, later, &cold);
  EXPECT_EQ(a.results, b.results);
  EXPECT_NE(a.results[0], c.results[0]);
  EXPECT_EQ(a.sent[0], "powersgd");
}

TEST(CompressedReducerTest, SmallOrNoneBucketsGoDense) {
  const Bucket bucket = MakeBucket({100});
  absl::StatusOr<Config> c = Config::FromMap(
      {{"TERSE_COMPRESSION", "topk"}, {"TERSE_MIN_COMPRESS_BYTES", "1000"}});
  ASSERT_TRUE(c.ok());
  std::vector<std::unique_ptr<CompressedReducer>> reducers;
  RunResult run = RunRanks(
      2, *c, bucket, 1,
      [&](int r, int s) { return Gradient(r, s, bucket.count); }, &reducers);
  std::vector<float> expected = Gradient(0, 0, 100);
  std::vector<float> other = Gradient(1, 0, 100);
  for (int i = 0; i < 100; ++i) expected[i] += other[i];
  EXPECT_EQ(run.results[0][0], expected);
  EXPECT_EQ(reducers[0]->Reports().at(0).policy, "none");
}

// bytes_sent counts what each rank put on the wire: the encoded payload for
// a sparsifier (the size the compressor itself produces for the same input),
// 2 bytes per element for fp16, the dense bucket otherwise.
TEST(CompressedReducerTest, BytesSentCountsTheWirePayload) {
  const Bucket bucket = MakeBucket({300, 700});
  const int size = 2;
  auto grads = [&](int r, int s) { return Gradient(r, s, bucket.count); };

  const Config topk =
      MakeConfig({{"TERSE_COMPRESSION", "topk"}, {"TERSE_CF", "10"}});
  std::vector<std::unique_ptr<CompressedReducer>> sparse;
  RunRanks(size, topk, bucket, 1, grads, &sparse);
  CompressorOptions options = OptionsFromConfig(topk);
  options.error_feedback = ErrorFeedbackMode::kOff;
  absl::StatusOr<std::unique_ptr<Compressor>> c =
      CreateCompressor("topk", 10, options);
  ASSERT_TRUE(c.ok()) << c.status();
  for (int r = 0; r < size; ++r) {
    CompressContext cctx;
    cctx.rank = r;
    cctx.key = "bucket:t0";
    Payload payload;
    ASSERT_TRUE(
        (*c)->Compress(Gradient(r, 0, bucket.count), cctx, &payload).ok());
    EXPECT_EQ(sparse[r]->Reports().at(0).bytes_sent,
              static_cast<int64_t>(payload.bytes.size()))
        << "rank " << r;
    EXPECT_EQ(sparse[r]->bytes_sent(),
              static_cast<int64_t>(payload.bytes.size()));
    EXPECT_GT(payload.bytes.size(), 0u);
  }

  std::vector<std::unique_ptr<CompressedReducer>> half;
  RunRanks(size, MakeConfig({{"TERSE_COMPRESSION", "fp16"}}), bucket, 2, grads,
           &half);
  EXPECT_EQ(half[0]->Reports().at(0).bytes_sent, 2 * bucket.count);
  EXPECT_EQ(half[0]->bytes_sent(), 2 * 2 * bucket.count);

  std::vector<std::unique_ptr<CompressedReducer>> gravac;
  // The second step is dense's trial (the first sends the candidate with
  // the fewest bytes).
  RunRanks(size, MakeConfig({{"TERSE_COMPRESSION", "gravac"}}), bucket, 2,
           grads, &gravac);
  EXPECT_EQ(gravac[0]->Reports().at(0).cf, 1);
  EXPECT_EQ(gravac[0]->Reports().at(0).bytes_sent, bucket.bytes);
}

}  // namespace
}  // namespace terse

namespace terse {
namespace {

// TERSE_MOMENTUM_CORRECTION on a bucket that goes dense: the sum over ranks
// of the velocities, i.e. momentum SGD's velocity of the summed gradient
// (closed form in fp64: sum_r sum_{t <= s} m^(s - t) g_r,t).
TEST(CompressedReducerTest, MomentumCorrectionOnDenseBucketsIsMomentumSgd) {
  const Bucket bucket = MakeBucket({300, 700}, "grad.t");
  const Config config = MakeConfig(
      {{"TERSE_COMPRESSION", "none"}, {"TERSE_MOMENTUM_CORRECTION", "0.9"}});
  const int size = 4, steps = 5;
  auto grads = [&](int r, int s) { return Gradient(r, s, bucket.count); };
  std::vector<std::unique_ptr<CompressedReducer>> reducers;
  RunResult run = RunRanks(size, config, bucket, steps, grads, &reducers);
  for (int s = 0; s < steps; ++s) {
    for (int64_t i = 0; i < bucket.count; ++i) {
      double expected = 0;
      for (int t = 0; t <= s; ++t) {
        for (int r = 0; r < size; ++r) {
          expected += std::pow(0.9, s - t) * grads(r, t)[i];
        }
      }
      ASSERT_NEAR(run.results[s][0][i], expected,
                  1e-5 * (1 + std::fabs(expected)))
          << "step " << s << " element " << i;
    }
  }
}

// With top-k, every rank runs DGC's Algorithm 1 (momentum correction and
// factor masking): u = m*u + g, v = v + u, send top-k(v), clear the sent
// entries of u and v. The reference below does that directly per rank.
TEST(CompressedReducerTest, MomentumCorrectionWithTopKFollowsDgc) {
  const Bucket bucket = MakeBucket({300, 700}, "grad.t");
  const Config config = MakeConfig({{"TERSE_COMPRESSION", "topk"},
                                    {"TERSE_CF", "10"},
                                    {"TERSE_MOMENTUM_CORRECTION", "0.9"}});
  const int size = 4, steps = 6;
  const int64_t n = bucket.count;
  auto grads = [&](int r, int s) { return Gradient(r, s, n); };
  std::vector<std::unique_ptr<CompressedReducer>> reducers;
  RunResult run = RunRanks(size, config, bucket, steps, grads, &reducers);

  std::vector<std::vector<float>> u(size, std::vector<float>(n, 0.0f));
  std::vector<std::vector<float>> v = u;
  for (int s = 0; s < steps; ++s) {
    std::vector<float> expected(n, 0.0f);
    for (int r = 0; r < size; ++r) {
      const std::vector<float> g = grads(r, s);
      for (int64_t i = 0; i < n; ++i) {
        u[r][i] = 0.9f * u[r][i] + g[i];
        v[r][i] = u[r][i] + v[r][i];
      }
      const std::vector<float> sent = TopKReference(v[r], n / 10);
      for (int64_t i = 0; i < n; ++i) {
        expected[i] += sent[i];
        if (sent[i] != 0.0f) u[r][i] = v[r][i] = 0.0f;
      }
    }
    for (int r = 0; r < size; ++r) {
      ASSERT_EQ(run.results[s][r], expected) << "step " << s << " rank " << r;
    }
  }
  // The residual left behind is the reference's v.
  std::vector<float> residual = reducers[1]->Residual("grad.t1", 700);
  EXPECT_EQ(residual, std::vector<float>(v[1].begin() + 300, v[1].end()));
}

TEST(CompressedReducerTest, MomentumCorrectionSurvivesACheckpoint) {
  const Bucket bucket = MakeBucket({800}, "grad.t");
  const Config config = MakeConfig({{"TERSE_COMPRESSION", "topk"},
                                    {"TERSE_CF", "20"},
                                    {"TERSE_MOMENTUM_CORRECTION", "0.5"}});
  auto grads = [&](int r, int s) { return Gradient(r, s, bucket.count); };
  std::vector<std::unique_ptr<CompressedReducer>> original;
  RunRanks(2, config, bucket, 3, grads, &original);
  std::vector<std::unique_ptr<CompressedReducer>> restored, fresh;
  for (int r = 0; r < 2; ++r) {
    restored.push_back(std::make_unique<CompressedReducer>(config, r, 2));
    ASSERT_TRUE(restored[r]->LoadState(*original[r]->SaveState()).ok());
  }
  auto later = [&](int r, int s) { return grads(r, s + 3); };
  RunResult a = RunRanks(2, config, bucket, 4, later, &original);
  RunResult b = RunRanks(2, config, bucket, 4, later, &restored);
  EXPECT_EQ(a.results, b.results);
  // Without the velocities (a fresh reducer) the sequence differs.
  RunResult c = RunRanks(2, config, bucket, 4, later, &fresh);
  EXPECT_NE(a.results, c.results);
}

// Accordion's live accumulators go through the chunked format's tensors
// (several chunks each here).
TEST(CompressedReducerTest, AccordionSavedStateContinuesIdentically) {
  const Bucket bucket = MakeBucket({300, 500});
  const Config config = MakeConfig({{"TERSE_COMPRESSION", "accordion"},
                                    {"TERSE_ACCORDION_COMPRESSOR", "topk"},
                                    {"TERSE_ACCORDION_SWITCH_STEPS", "2"}});
  auto grads = [&](int r, int s) { return Gradient(r, s, bucket.count); };
  std::vector<std::unique_ptr<CompressedReducer>> original;
  RunRanks(2, config, bucket, 5, grads, &original);
  std::vector<std::unique_ptr<CompressedReducer>> restored;
  for (int r = 0; r < 2; ++r) {
    original[r]->set_checkpoint_chunk_bytes(256);
    absl::StatusOr<std::string> saved = original[r]->SaveState();
    ASSERT_TRUE(saved.ok()) << saved.status();
    checkpoint::StringSource source(*saved);
    absl::StatusOr<checkpoint::Checkpoint> read =
        checkpoint::ReadCheckpoint(&source);
    ASSERT_TRUE(read.ok()) << read.status();
    ASSERT_EQ(read->header.buckets_size(), 1);
    EXPECT_EQ(read->header.buckets(0).policy().kind(), "accordion");
    EXPECT_EQ(read->header.buckets(0).accumulator_size(), 0);
    ASSERT_GE(read->header.tensors_size(), 1);
    EXPECT_EQ(read->header.tensors(0).kind(),
              proto::CheckpointTensor::ACCUMULATOR);
    EXPECT_EQ(read->header.tensors(0).count(), bucket.count);
    EXPECT_EQ(read->header.tensors(0).chunk_crc32_size(), 800 * 4 / 256 + 1);
    restored.push_back(std::make_unique<CompressedReducer>(config, r, 2));
    ASSERT_TRUE(restored[r]->LoadState(*saved).ok());
    restored[r]->set_checkpoint_chunk_bytes(256);
    // Restored but not yet stepped: the same checkpoint.
    EXPECT_EQ(*restored[r]->SaveState(), *saved);
  }
  auto later = [&](int r, int s) { return grads(r, s + 5); };
  RunResult a = RunRanks(2, config, bucket, 6, later, &original);
  RunResult b = RunRanks(2, config, bucket, 6, later, &restored);
  EXPECT_EQ(a.results, b.results);
  EXPECT_EQ(a.policies, b.policies);
}

TEST(CompressedReducerTest, MomentumCorrectionRejectsGradientsItCannotCarry) {
  Bucket bucket = MakeBucket({8}, "grad.t");
  bucket.dtype = DataType::kFloat16;
  bucket.bytes = 16;
  const Config config = MakeConfig({{"TERSE_MOMENTUM_CORRECTION", "0.9"}});
  CompressedReducer reducer(config, 0, 1);
  std::vector<uint16_t> data(8, 0);
  BucketReduceContext ctx;
  ctx.bucket = &bucket;
  ctx.data = data.data();
  ctx.op = ReduceOp::kSum;
  const absl::Status s = reducer.Reduce(ctx);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("TERSE_MOMENTUM_CORRECTION"));
  EXPECT_THAT(s.message(), HasSubstr("grad.t0"));
  EXPECT_THAT(s.message(),
              HasSubstr(std::string(DataTypeName(DataType::kFloat16))));
}

}  // namespace
}  // namespace terse

namespace terse {
namespace {

// Readers never wait for a bucket's collective: while rank 0 sits in its
// step's collective (rank 1 has not started its own), Reports, bytes_sent and
// OnLearningRateDrop on rank 0's reducer return at once, with the state of
// the last finished step. SaveState waits for the step boundary and then
// sees the whole step.
TEST(CompressedReducerTest, ReadersDoNotWaitForTheNetwork) {
  const Bucket bucket = MakeBucket({300, 700});
  const Config config =
      MakeConfig({{"TERSE_COMPRESSION", "topk"}, {"TERSE_CF", "10"}});
  std::vector<std::unique_ptr<CompressedReducer>> reducers;
  for (int r = 0; r < 2; ++r) {
    reducers.push_back(std::make_unique<CompressedReducer>(config, r, 2));
  }
  std::string saved;
  absl::Status status = RunLoopbackRanks(2, [&](int rank, Communicator* comm) {
    std::vector<float> data = Gradient(rank, 0, bucket.count);
    BucketReduceContext ctx;
    ctx.bucket = &bucket;
    ctx.data = data.data();
    ctx.op = ReduceOp::kSum;
    ctx.comm = comm;
    ctx.step = 0;
    std::thread saver;
    if (rank == 1) {
      // Rank 0 is in its collective by now (it waits for this rank).
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      EXPECT_TRUE(reducers[0]->Reports().empty());
      EXPECT_EQ(reducers[0]->bytes_sent(), 0);
      reducers[0]->OnLearningRateDrop();
      saver = std::thread([&] {
        absl::StatusOr<std::string> bytes = reducers[0]->SaveState();
        EXPECT_TRUE(bytes.ok()) << bytes.status();
        if (bytes.ok()) saved = *std::move(bytes);
      });
    }
    absl::Status s = reducers[rank]->Reduce(ctx);
    if (saver.joinable()) saver.join();
    return s;
  });
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_EQ(reducers[0]->Reports().size(), 1u);
  EXPECT_GT(reducers[0]->bytes_sent(), 0);
  // Saved after rank 0's step: its byte count is in it.
  CompressedReducer loaded(config, 0, 2);
  ASSERT_TRUE(loaded.LoadState(saved).ok());
  EXPECT_EQ(loaded.bytes_sent(), reducers[0]->bytes_sent());
  EXPECT_EQ(saved, *reducers[0]->SaveState());
}

}  // namespace
}  // namespace terse
