#include "common/config.h"

#include <cstdlib>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

using ::testing::HasSubstr;

TEST(ConfigTest, DefaultsMatchTheDesignTable) {
  Config c = Config::Defaults();
  EXPECT_EQ(c.fusion_threshold_bytes, 67108864);
  EXPECT_EQ(c.cycle_time_ms, 1.0);
  EXPECT_FALSE(c.autotune);
  EXPECT_EQ(c.autotune_log, "");
  EXPECT_EQ(c.autotune_warmup_samples, 1);
  EXPECT_EQ(c.autotune_samples, 2);
  EXPECT_EQ(c.autotune_steps_per_sample, 10);
  EXPECT_EQ(c.cache_capacity, 1024);
  EXPECT_EQ(c.forget_after_steps, 100);
  EXPECT_EQ(c.compression, "none");
  EXPECT_EQ(c.cf, 100.0);
  EXPECT_TRUE(c.compression_rules.empty());
  EXPECT_EQ(c.min_compress_bytes, 65536);
  EXPECT_EQ(c.momentum_correction, 0.0);
  EXPECT_EQ(c.gravac_compressor, "topk");
  EXPECT_EQ(c.gravac_cf_min, 10.0);
  EXPECT_EQ(c.gravac_cf_max, 1000.0);
  EXPECT_EQ(c.gravac_epsilon, 0.9);
  EXPECT_EQ(c.gravac_omega, 0.01);
  EXPECT_EQ(c.gravac_window, 500);
  EXPECT_EQ(c.gravac_policy, "exponential");
  EXPECT_EQ(c.gravac_scope, "bucket");
  EXPECT_EQ(c.gravac_ewma, 0.0);  // auto
  EXPECT_TRUE(c.gravac_throughput_guard);
  EXPECT_EQ(c.accordion_low_cf, 10.0);
  EXPECT_EQ(c.accordion_high_cf, 1000.0);
  EXPECT_EQ(c.accordion_switch_steps, 500);
  EXPECT_EQ(c.accordion_threshold, 0.5);
  EXPECT_EQ(c.powersgd_rank, 1);
  EXPECT_EQ(c.powersgd_start_step, 0);
  EXPECT_EQ(c.powersgd_min_compression_rate, 2.0);
  EXPECT_EQ(c.accordion_compressor, "powersgd");
  EXPECT_EQ(c.gravac_gain, "window");
  EXPECT_EQ(c.gravac_gain_window, 50);
  EXPECT_EQ(c.accordion_high_rank, 4);
  EXPECT_EQ(c.accordion_low_rank, 1);
  EXPECT_THAT(c.gravac_candidates,
              ::testing::ElementsAre("none", "fp16", "powersgd:4", "topk:10"));
  EXPECT_EQ(c.backend, "auto");
  EXPECT_EQ(c.gpu_operations, "nccl");
  EXPECT_EQ(c.mpi_allreduce, "auto");
  EXPECT_EQ(c.timeline_path, "");
  EXPECT_EQ(c.stall_check_seconds, 60.0);
  EXPECT_EQ(c.stall_shutdown_seconds, 0.0);
  EXPECT_EQ(c.log_level, "warning");
  EXPECT_EQ(c.seed, 0u);
}

TEST(ConfigTest, EveryDefaultParsesThroughItsOwnKnob) {
  std::map<std::string, std::string> all;
  for (const KnobDoc& k : ConfigKnobDocs()) all[k.name] = k.default_value;
  absl::StatusOr<Config> c = Config::FromMap(all);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->Describe(), Config::Defaults().Describe());
  EXPECT_EQ(ConfigKnobDocs().size(), 47u);
}

TEST(ConfigTest, ParsesValues) {
  absl::StatusOr<Config> c = Config::FromMap({
      {"TERSE_FUSION_THRESHOLD", "1024"},
      {"TERSE_COMPRESSION", "gravac"},
      {"TERSE_GRAVAC_EWMA", "0.04"},
      {"TERSE_GRAVAC_POLICY", "geometric"},
      {"TERSE_GRAVAC_THROUGHPUT_GUARD", "off"},
      {"TERSE_MOMENTUM_CORRECTION", "0.9"},
      {"TERSE_COMPRESSION_RULES", "*.bias=none; layer1.*=topk:50"},
      {"TERSE_SEED", "18446744073709551615"},
  });
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->fusion_threshold_bytes, 1024);
  EXPECT_EQ(c->compression, "gravac");
  EXPECT_EQ(c->gravac_ewma, 0.04);
  EXPECT_EQ(c->gravac_policy, "geometric");
  EXPECT_FALSE(c->gravac_throughput_guard);
  EXPECT_EQ(c->momentum_correction, 0.9);
  ASSERT_EQ(c->compression_rules.size(), 2u);
  EXPECT_EQ(c->compression_rules[0].glob, "*.bias");
  EXPECT_EQ(c->compression_rules[0].policy, "none");
  EXPECT_EQ(c->compression_rules[0].cf, 0.0);
  EXPECT_EQ(c->compression_rules[1].glob, "layer1.*");
  EXPECT_EQ(c->compression_rules[1].policy, "topk");
  EXPECT_EQ(c->compression_rules[1].cf, 50.0);
  EXPECT_EQ(c->seed, 18446744073709551615ull);
  EXPECT_THAT(c->Describe(), HasSubstr("TERSE_FUSION_THRESHOLD = 1024  [default 67108864]"));
}

struct BadValue {
  const char* name;
  const char* value;
  const char* accepted;  // A fragment of the accepted form.
};

TEST(ConfigTest, PipelineChunkIsAutoOrBytes) {
  EXPECT_EQ(Config::Defaults().pipeline_chunk_bytes, kAutoPipelineChunk);
  for (const auto& [value, bytes] :
       std::vector<std::pair<std::string, int64_t>>{
           {"auto", kAutoPipelineChunk}, {"0", 0}, {"4194304", 4194304}}) {
    absl::StatusOr<Config> c =
        Config::FromMap({{"TERSE_PIPELINE_CHUNK", value}});
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->pipeline_chunk_bytes, bytes) << value;
    EXPECT_THAT(c->Describe(),
                HasSubstr("TERSE_PIPELINE_CHUNK = " + value +
                          (value == "auto" ? "\n" : "  [default auto]")));
  }
}

TEST(ConfigTest, AutotuneLogNeedsAutotune) {
  absl::StatusOr<Config> c =
      Config::FromMap({{"TERSE_AUTOTUNE_LOG", "/tmp/tune.csv"}});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("TERSE_AUTOTUNE_LOG='/tmp/tune.csv'"));
  EXPECT_THAT(c.status().message(), HasSubstr("TERSE_AUTOTUNE is off"));
  c = Config::FromMap(
      {{"TERSE_AUTOTUNE", "1"}, {"TERSE_AUTOTUNE_LOG", "/tmp/tune.csv"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->autotune);
  EXPECT_EQ(c->autotune_log, "/tmp/tune.csv");
}

class ConfigBadValueTest : public ::testing::TestWithParam<BadValue> {};

TEST_P(ConfigBadValueTest, ErrorNamesVariableValueAndAcceptedForm) {
  const BadValue& bad = GetParam();
  absl::StatusOr<Config> c = Config::FromMap({{bad.name, bad.value}});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr(bad.name));
  EXPECT_THAT(c.status().message(), HasSubstr(absl::StrCat("'", bad.value, "'")));
  EXPECT_THAT(c.status().message(), HasSubstr(bad.accepted));
}

INSTANTIATE_TEST_SUITE_P(
    All, ConfigBadValueTest,
    ::testing::Values(
        BadValue{"TERSE_FUSION_THRESHOLD", "abc", "an integer in [0, 1099511627776]"},
        BadValue{"TERSE_FUSION_THRESHOLD", "-1", "an integer in [0,"},
        BadValue{"TERSE_FUSION_THRESHOLD", "1.5", "an integer"},
        BadValue{"TERSE_CYCLE_TIME_MS", "fast", "a number in [0, 10000]"},
        BadValue{"TERSE_PIPELINE_CHUNK", "-1", "'auto' or an integer in [0,"},
        BadValue{"TERSE_PIPELINE_CHUNK", "big", "'auto' or an integer"},
        BadValue{"TERSE_AUTOTUNE", "yes", "one of: on off true false 1 0"},
        BadValue{"TERSE_AUTOTUNE_STEPS_PER_SAMPLE", "0", "an integer in [1,"},
        BadValue{"TERSE_AUTOTUNE_SAMPLES", "0", "an integer in [1, 1000]"},
        BadValue{"TERSE_GRAVAC_THROUGHPUT_GUARD", "maybe",
                 "one of: on off true false 1 0"},
        BadValue{"TERSE_COMPRESSION", "zip", "one of: none fp16 bf16 topk"},
        BadValue{"TERSE_CF", "0.5", "a number in [1, 1000000]"},
        BadValue{"TERSE_MOMENTUM_CORRECTION", "1", "a number in [0, 0.999]"},
        BadValue{"TERSE_GRAVAC_EPSILON", "0", "a number in (0, 1]"},
        BadValue{"TERSE_GRAVAC_EPSILON", "nan", "a number in (0, 1]"},
        BadValue{"TERSE_GRAVAC_EWMA", "2", "'auto' (ranks/100) or a number"},
        BadValue{"TERSE_GRAVAC_WINDOW", "0", "an integer in [1,"},
        BadValue{"TERSE_BACKEND", "gloo", "one of: auto mpi nccl"},
        BadValue{"TERSE_GPU_OPERATIONS", "gloo", "one of: nccl mpi"},
        BadValue{"TERSE_LOG_LEVEL", "loud", "one of: trace debug info warning error"},
        BadValue{"TERSE_COMPRESSION_RULES", "*.bias", "glob=policy[:cf]"},
        BadValue{"TERSE_COMPRESSION_RULES", "a=zip", "bad rule 'a=zip'"},
        BadValue{"TERSE_COMPRESSION_RULES", "a=topk:0", "cf a number >= 1"},
        BadValue{"TERSE_GRAVAC_CANDIDATES", "powersgd", "bad entry 'powersgd'"},
        BadValue{"TERSE_GRAVAC_CANDIDATES", "topk:1", "bad entry 'topk:1'"},
        BadValue{"TERSE_GRAVAC_CANDIDATES", "fp16:2", "bad entry 'fp16:2'"},
        BadValue{"TERSE_GRAVAC_CANDIDATES", "qsgd:1", "qsgd bits an integer in [2, 16]"},
        BadValue{"TERSE_GRAVAC_CANDIDATES", "zip", "bad entry 'zip'"},
        BadValue{"TERSE_ACCORDION_COMPRESSOR", "qsgd", "one of: powersgd topk"},
        BadValue{"TERSE_SEED", "-3", "an integer in [0, 18446744073709551615]"}));

TEST(ConfigTest, TypoOfAKnownVariableIsAnErrorWithSuggestion) {
  absl::StatusOr<Config> c = Config::FromMap({{"TERSE_FUSON_THRESHOLD", "1"}});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("unknown variable TERSE_FUSON_THRESHOLD"));
  EXPECT_THAT(c.status().message(), HasSubstr("did you mean TERSE_FUSION_THRESHOLD?"));
}

TEST(ConfigTest, UnrelatedUnknownVariablesAreReportedNotFatal) {
  absl::StatusOr<Config> c =
      Config::FromMap({{"TERSE_SOMETHING_ELSE_ENTIRELY", "1"}, {"OTHER", "x"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->unknown_variables, ::testing::ElementsAre("TERSE_SOMETHING_ELSE_ENTIRELY"));
}

TEST(ConfigTest, CrossFieldChecks) {
  absl::StatusOr<Config> c = Config::FromMap(
      {{"TERSE_GRAVAC_CF_MIN", "2000"}, {"TERSE_GRAVAC_CF_MAX", "1000"}});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("TERSE_GRAVAC_CF_MIN='2000'"));
}

TEST(ConfigTest, FromEnvironmentReadsTerseVariables) {
  setenv("TERSE_CACHE_CAPACITY", "7", 1);
  absl::StatusOr<Config> c = Config::FromEnvironment();
  unsetenv("TERSE_CACHE_CAPACITY");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->cache_capacity, 7);
}

TEST(ConfigTest, EditDistance) {
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3);
  EXPECT_EQ(EditDistance("", "abc"), 3);
  EXPECT_EQ(EditDistance("TERSE_FUSON_THRESHOLD", "TERSE_FUSION_THRESHOLD"), 1);
}

TEST(ConfigTest, CompressionSpecsParseToACanonicalForm) {
  absl::StatusOr<CompressionRule> r = ParseCompressionSpec("topk:100.0");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->policy, "topk");
  EXPECT_EQ(r->cf, 100);
  EXPECT_EQ(CompressionSpecString(*r), "topk:100");
  r = ParseCompressionSpec("gravac");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->cf, 0);
  EXPECT_EQ(CompressionSpecString(*r), "gravac");
  for (const char* bad : {"", "zip", "topk:", "topk:0.5", "topk:x", "fp16:1:2"}) {
    EXPECT_THAT(ParseCompressionSpec(bad).status().message(),
                HasSubstr("policy one of"))
        << bad;
  }
}

TEST(ConfigTest, GpuOperationsTakesNcclOrMpi) {
  absl::StatusOr<Config> c = Config::FromMap({{"TERSE_GPU_OPERATIONS", "mpi"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->gpu_operations, "mpi");
}

TEST(ConfigTest, MpiAllreduceTakesAutoMpiOrRing) {
  for (const char* word : {"auto", "mpi", "ring"}) {
    absl::StatusOr<Config> c = Config::FromMap({{"TERSE_MPI_ALLREDUCE", word}});
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->mpi_allreduce, word);
  }
  absl::StatusOr<Config> bad =
      Config::FromMap({{"TERSE_MPI_ALLREDUCE", "tree"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("TERSE_MPI_ALLREDUCE"));
  EXPECT_THAT(bad.status().message(), HasSubstr("tree"));
  EXPECT_THAT(bad.status().message(), HasSubstr("ring"));
}

}  // namespace
}  // namespace terse
