#include "gravac/policy_factory.h"

#include <memory>

#include "gtest/gtest.h"

namespace terse {
namespace gravac {
namespace {

TEST(PolicyFactoryTest, BuildsEachKindFromTheConfig) {
  Config c = Config::Defaults();
  EXPECT_EQ(CreatePolicy("none", 100, c, 4)->Decide().send_cf, 1);
  Decision topk = CreatePolicy("topk", 100, c, 4)->Decide();
  EXPECT_EQ(topk.compressor, "topk");
  EXPECT_EQ(topk.send_cf, 100);
  // Accordion: PowerSGD ranks by default (TERSE_ACCORDION_COMPRESSOR).
  Decision accordion = CreatePolicy("accordion", 100, c, 4)->Decide();
  EXPECT_EQ(accordion.compressor, "powersgd");
  EXPECT_EQ(accordion.level, c.accordion_high_rank) << "starts critical";
  EXPECT_FALSE(accordion.dense());
  // The default portfolio measures window gains, no survey; its first step
  // sends the candidate with the fewest bytes (powersgd:4), then dense.
  Decision start = CreatePolicy("gravac", 100, c, 4)->Decide();
  EXPECT_EQ(start.compressor, "powersgd");
  EXPECT_EQ(start.level, 4);
  EXPECT_EQ(start.window_gain_steps, 10);  // The warm-up: 50 / 5.
  {
    std::unique_ptr<Policy> p = CreatePolicy("gravac", 100, c, 4);
    p->Decide();
    Decision d = p->Decide();
    EXPECT_TRUE(d.dense());
    EXPECT_EQ(d.window_gain_steps, 0);  // Dense needs no window.
  }
  EXPECT_TRUE(start.gain_probes.empty());
  // The paper's step gain: the first decision surveys every other
  // candidate's gain.
  c.gravac_gain = "step";
  Decision survey = CreatePolicy("gravac", 100, c, 4)->Decide();
  EXPECT_TRUE(survey.dense());
  EXPECT_EQ(survey.gain_probes.size(), 3u);  // fp16, powersgd:4, topk:10.
  EXPECT_EQ(survey.window_gain_steps, 0);
  // One sparsifier family: the paper's controller. With the throughput
  // guard (default) the first steps measure dense without probes; without
  // it the first step probes at theta_min.
  c.gravac_candidates = {"topk"};
  Decision first = CreatePolicy("gravac", 100, c, 4)->Decide();
  EXPECT_TRUE(first.dense());
  EXPECT_EQ(first.probe_cf_min, 0);
  c.gravac_throughput_guard = false;
  first = CreatePolicy("gravac", 100, c, 4)->Decide();
  EXPECT_TRUE(first.dense());
  EXPECT_EQ(first.probe_cf_min, c.gravac_cf_min);
}

TEST(PolicyFactoryTest, AccordionPicksItsVariantByConfig) {
  Config c = Config::Defaults();
  c.accordion_high_rank = 8;
  c.accordion_low_rank = 2;
  std::unique_ptr<Policy> p = CreatePolicy("accordion", 100, c, 4);
  Decision d = p->Decide();
  EXPECT_EQ(d.compressor, "powersgd");
  EXPECT_EQ(d.level, 8);
  EXPECT_EQ(d.send_cf, 1);
  EXPECT_EQ(p->Describe(), "accordion powersgd rank=8 critical");

  c.accordion_compressor = "topk";
  c.accordion_low_cf = 20;
  c.accordion_high_cf = 500;
  p = CreatePolicy("accordion", 100, c, 4);
  d = p->Decide();
  EXPECT_EQ(d.compressor, "topk");
  EXPECT_EQ(d.send_cf, 20);
  EXPECT_EQ(d.level, 0);
  EXPECT_EQ(p->Describe(), "accordion topk cf=20");

  // The sparsifier is TERSE_ACCORDION_COMPRESSOR, not TERSE_GRAVAC_COMPRESSOR.
  c.accordion_compressor = "randomk";
  c.gravac_compressor = "dgc";
  EXPECT_EQ(CreatePolicy("accordion", 100, c, 4)->Decide().compressor,
            "randomk");
}

}  // namespace
}  // namespace gravac
}  // namespace terse
