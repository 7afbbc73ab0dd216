#include "compressors/registry.h"

#include "compressors/error_feedback.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

TEST(RegistryTest, CreatesEveryCompressorWord) {
  for (const std::string& name : CompressorNames()) {
    absl::StatusOr<std::unique_ptr<Compressor>> c =
        CreateCompressor(name, 100, {});
    ASSERT_TRUE(c.ok()) << name << ": " << c.status();
    EXPECT_EQ((*c)->name(), name);
    const bool wrapped = dynamic_cast<ErrorFeedback*>(c->get()) != nullptr;
    const bool lossless = name == "none" || name == "fp16" || name == "bf16";
    EXPECT_EQ(wrapped, !lossless) << name;
  }
  EXPECT_EQ(CompressorNames().size(), 11u);
}

TEST(RegistryTest, ErrorFeedbackOverride) {
  CompressorOptions opt;
  opt.error_feedback = ErrorFeedbackMode::kOff;
  auto c = CreateCompressor("topk", 10, opt);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(dynamic_cast<ErrorFeedback*>(c->get()), nullptr);
  opt.error_feedback = ErrorFeedbackMode::kOn;
  c = CreateCompressor("fp16", 10, opt);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(dynamic_cast<ErrorFeedback*>(c->get()), nullptr);
}

TEST(RegistryTest, RejectsPoliciesUnknownWordsAndBadCf) {
  auto c = CreateCompressor("gravac", 100, {});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("policy"), std::string::npos);
  EXPECT_FALSE(CreateCompressor("accordion", 100, {}).ok());
  c = CreateCompressor("topkk", 100, {});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("topk"), std::string::npos);
  EXPECT_FALSE(CreateCompressor("topk", 0.5, {}).ok());
  EXPECT_FALSE(CreateCompressor("topk", NAN, {}).ok());
  EXPECT_TRUE(IsPolicyName("gravac"));
  EXPECT_FALSE(IsPolicyName("topk"));
}

TEST(RegistryTest, ShouldCompressUsesMinBytes) {
  Config config = Config::Defaults();
  config.min_compress_bytes = 1000;
  EXPECT_FALSE(ShouldCompress(999, config));
  EXPECT_TRUE(ShouldCompress(1000, config));
  config.min_compress_bytes = 0;
  EXPECT_TRUE(ShouldCompress(0, config));
}

TEST(RegistryTest, RulesFirstMatchWins) {
  absl::StatusOr<Config> config = Config::FromMap(
      {{"TERSE_COMPRESSION", "topk"},
       {"TERSE_CF", "50"},
       {"TERSE_COMPRESSION_RULES",
        "*.bias=none;layer1.*=qsgd:8;layer*=gravac;*embed*=randomk:1000"}});
  ASSERT_TRUE(config.ok()) << config.status();
  CompressionChoice c = ChooseCompression("layer1.bias", *config);
  EXPECT_EQ(c.name, "none");
  EXPECT_EQ(c.rule, 0);
  c = ChooseCompression("layer1.weight", *config);
  EXPECT_EQ(c.name, "qsgd");
  EXPECT_EQ(c.cf, 8);
  c = ChooseCompression("layer2.weight", *config);
  EXPECT_EQ(c.name, "gravac");
  EXPECT_TRUE(c.is_policy);
  EXPECT_EQ(c.cf, 50);  // No cf in the rule: TERSE_CF.
  c = ChooseCompression("word_embedding", *config);
  EXPECT_EQ(c.name, "randomk");
  EXPECT_EQ(c.cf, 1000);
  c = ChooseCompression("head.weight", *config);
  EXPECT_EQ(c.name, "topk");
  EXPECT_EQ(c.cf, 50);
  EXPECT_EQ(c.rule, -1);
  EXPECT_EQ(OptionsFromConfig(*config).powersgd_rank, 1);
}

TEST(RegistryTest, GlobMatch) {
  EXPECT_TRUE(GlobMatch("*", ""));
  EXPECT_TRUE(GlobMatch("*", "anything"));
  EXPECT_TRUE(GlobMatch("a?c", "abc"));
  EXPECT_FALSE(GlobMatch("a?c", "ac"));
  // A glob's '*' stays a wildcard where the name holds a '*' (found by the
  // config fuzzer: the name below has "=*.fc" after an earlier "*").
  EXPECT_TRUE(GlobMatch("*.fc*", "a=*.bias;x=*.fc*=accordion"));
  EXPECT_TRUE(GlobMatch("*b", "*ab"));
  EXPECT_TRUE(GlobMatch("a*", "a*"));
  EXPECT_TRUE(GlobMatch("*.weight", "fc.weight"));
  EXPECT_FALSE(GlobMatch("*.weight", "fc.weight2"));
  EXPECT_TRUE(GlobMatch("a*b*c", "aXbYbZc"));
  EXPECT_FALSE(GlobMatch("a*b*c", "aXbYbZ"));
  EXPECT_TRUE(GlobMatch("**a", "a"));
  EXPECT_FALSE(GlobMatch("", "a"));
  EXPECT_TRUE(GlobMatch("", ""));
  EXPECT_TRUE(GlobMatch("exact", "exact"));
  EXPECT_FALSE(GlobMatch("exact", "exac"));
}

}  // namespace
}  // namespace terse
