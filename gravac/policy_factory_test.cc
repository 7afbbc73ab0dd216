#include "gravac/policy_factory.h"

#include "gtest/gtest.h"

namespace terse {
namespace gravac {
namespace {

TEST(PolicyFactoryTest, GlobMatch) {
  EXPECT_TRUE(GlobMatch("*.bias", "layer1.bias"));
  EXPECT_FALSE(GlobMatch("*.bias", "layer1.bias.grad"));
  EXPECT_TRUE(GlobMatch("layer?.*", "layer3.weight"));
  EXPECT_TRUE(GlobMatch("*", ""));
  EXPECT_FALSE(GlobMatch("a*b*c", "abx"));
  EXPECT_TRUE(GlobMatch("a*b*c", "aXXbYYc"));
}

TEST(PolicyFactoryTest, RulesPickPolicyPerTensor) {
  absl::StatusOr<Config> c = Config::FromMap(
      {{"TERSE_COMPRESSION", "gravac"},
       {"TERSE_COMPRESSION_RULES", "*.bias=none;fc*=topk:50;*=dgc"}});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(PolicyForTensor(*c, "conv.bias").first, "none");
  EXPECT_EQ(PolicyForTensor(*c, "fc1.weight"), std::make_pair(std::string("topk"), 50.0));
  EXPECT_EQ(PolicyForTensor(*c, "conv.weight"), std::make_pair(std::string("dgc"), 100.0));
  Config plain = Config::Defaults();
  EXPECT_EQ(PolicyForTensor(plain, "x").first, "none");
}

TEST(PolicyFactoryTest, BuildsEachKindFromTheConfig) {
  Config c = Config::Defaults();
  EXPECT_EQ(CreatePolicy("none", 100, c, 4)->Decide().send_cf, 1);
  Decision topk = CreatePolicy("topk", 100, c, 4)->Decide();
  EXPECT_EQ(topk.compressor, "topk");
  EXPECT_EQ(topk.send_cf, 100);
  EXPECT_EQ(CreatePolicy("accordion", 100, c, 4)->Decide().send_cf,
            c.accordion_low_cf);
  Decision first = CreatePolicy("gravac", 100, c, 4)->Decide();
  EXPECT_TRUE(first.dense());
  EXPECT_EQ(first.probe_cf_min, c.gravac_cf_min);
}

}  // namespace
}  // namespace gravac
}  // namespace terse
