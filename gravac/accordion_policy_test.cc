#include "gravac/accordion_policy.h"

#include "gtest/gtest.h"

namespace terse {
namespace gravac {
namespace {

// Feeds one period of `steps` steps whose accumulated gradient ends with
// norm `norm`; returns the CF used during the period.
double Period(AccordionPolicy* policy, int steps, double norm) {
  double cf = 0;
  for (int i = 0; i < steps; ++i) {
    Decision d = policy->Decide();
    cf = d.send_cf;
    EXPECT_EQ(d.reset_accumulator, i == steps - 1);
    StepStats s;
    s.accumulated_norm2 = norm * norm * (i + 1) / steps;
    s.seconds = 1;
    policy->Observe(d, s);
  }
  return cf;
}

TEST(AccordionPolicyTest, SwitchesOnTheRelativeNormChange) {
  AccordionOptions o;
  o.low_cf = 10;
  o.high_cf = 1000;
  o.switch_steps = 4;
  o.threshold = 0.5;
  AccordionPolicy policy(o);
  EXPECT_EQ(Period(&policy, 4, 10.0), 10) << "starts critical";
  EXPECT_EQ(Period(&policy, 4, 10.2), 10) << "no earlier period compared yet";
  EXPECT_EQ(Period(&policy, 4, 10.0), 1000) << "2% change: not critical";
  EXPECT_EQ(Period(&policy, 4, 30.0), 1000);
  EXPECT_EQ(Period(&policy, 4, 30.0), 10) << "200% change: critical";
  EXPECT_EQ(Period(&policy, 4, 29.0), 1000);
  policy.OnLearningRateDrop();
  EXPECT_EQ(Period(&policy, 4, 29.0), 10) << "low CF right after an LR drop";
}

// The PowerSGD variant: one period of `steps` steps ending with norm `norm`;
// checks that every decision of the period is the same PowerSGD rank and
// returns it.
int64_t RankPeriod(AccordionPolicy* policy, int steps, double norm) {
  int64_t rank = -1;
  for (int i = 0; i < steps; ++i) {
    Decision d = policy->Decide();
    EXPECT_EQ(d.compressor, "powersgd");
    EXPECT_EQ(d.send_cf, 1);
    EXPECT_FALSE(d.dense()) << "a decision with a level is never dense";
    EXPECT_EQ(d.probe_cf_min, 0);
    EXPECT_FALSE(d.clear_residual);
    EXPECT_EQ(d.reset_accumulator, i == steps - 1);
    if (i == 0) rank = d.level;
    EXPECT_EQ(d.level, rank) << "the rank changes only between periods";
    StepStats s;
    s.accumulated_norm2 = norm * norm * (i + 1) / steps;
    s.seconds = 1;
    policy->Observe(d, s);
  }
  return rank;
}

TEST(AccordionPolicyTest, PowerSgdSwitchesRanksOnTheRelativeNormChange) {
  AccordionOptions o;
  o.compressor = "powersgd";
  o.high_rank = 4;
  o.low_rank = 1;
  o.low_cf = 10;  // ignored by the PowerSGD variant
  o.high_cf = 1000;
  o.switch_steps = 3;
  o.threshold = 0.5;
  AccordionPolicy policy(o);
  ASSERT_TRUE(policy.switches_rank());
  // Hand-computed: the regime of period k+1 comes from |n_{k-1} - n_k| /
  // n_{k-1} at the end of period k (critical when >= 0.5).
  EXPECT_EQ(policy.Describe(), "accordion powersgd rank=4 critical");
  EXPECT_EQ(RankPeriod(&policy, 3, 10.0), 4) << "starts critical";
  EXPECT_EQ(RankPeriod(&policy, 3, 10.2), 4) << "no earlier period yet";
  // |10 - 10.2| / 10 = 0.02 < 0.5: not critical.
  EXPECT_EQ(policy.Describe(), "accordion powersgd rank=1 not critical");
  EXPECT_EQ(RankPeriod(&policy, 3, 10.0), 1);
  // |10.2 - 10| / 10.2 = 0.0196: still not critical.
  EXPECT_EQ(RankPeriod(&policy, 3, 30.0), 1);
  // |10 - 30| / 10 = 2: critical.
  EXPECT_EQ(policy.Describe(), "accordion powersgd rank=4 critical");
  EXPECT_EQ(RankPeriod(&policy, 3, 30.0), 4);
  // |30 - 30| / 30 = 0: not critical.
  EXPECT_EQ(RankPeriod(&policy, 3, 29.0), 1);
  // |30 - 29| / 30 = 0.033: not critical, but the LR drop forces rank 4.
  policy.OnLearningRateDrop();
  EXPECT_EQ(RankPeriod(&policy, 3, 29.0), 4) << "high rank after an LR drop";
  // |29 - 29| / 29 = 0: not critical.
  EXPECT_EQ(RankPeriod(&policy, 3, 43.5), 1);
  // |29 - 43.5| / 29 = 0.5 exactly: critical (the test is >= threshold).
  EXPECT_EQ(RankPeriod(&policy, 3, 43.5), 4);
  EXPECT_EQ(RankPeriod(&policy, 3, 43.5), 1);
}

TEST(AccordionPolicyTest, SparsifierVariantSwitchesCfsWithoutALevel) {
  AccordionOptions o;
  o.compressor = "dgc";
  o.low_cf = 10;
  o.high_cf = 1000;
  o.switch_steps = 2;
  AccordionPolicy policy(o);
  EXPECT_FALSE(policy.switches_rank());
  Decision d = policy.Decide();
  EXPECT_EQ(d.compressor, "dgc");
  EXPECT_EQ(d.send_cf, 10);
  EXPECT_EQ(d.level, 0);
  EXPECT_EQ(policy.Describe(), "accordion dgc cf=10");
  // low_cf 1 sends dense.
  o.low_cf = 1;
  AccordionPolicy dense(o);
  d = dense.Decide();
  EXPECT_EQ(d.compressor, "none");
  EXPECT_TRUE(d.dense());
}

TEST(AccordionPolicyTest, PowerSgdStateRoundTrip) {
  AccordionOptions o;
  o.compressor = "powersgd";
  o.switch_steps = 2;
  AccordionPolicy a(o);
  RankPeriod(&a, 2, 5);
  RankPeriod(&a, 2, 5.1);
  proto::PolicyState state;
  a.SaveState(&state);
  EXPECT_EQ(state.kind(), "accordion");
  AccordionPolicy b(o);
  ASSERT_TRUE(b.RestoreState(state).ok());
  EXPECT_EQ(a.critical(), b.critical());
  EXPECT_EQ(a.Describe(), b.Describe());
  EXPECT_EQ(RankPeriod(&a, 2, 5), RankPeriod(&b, 2, 5));
  EXPECT_EQ(RankPeriod(&a, 2, 9), RankPeriod(&b, 2, 9));
}

TEST(AccordionPolicyTest, StateRoundTrip) {
  AccordionOptions o;
  o.switch_steps = 2;
  AccordionPolicy a(o);
  Period(&a, 2, 5);
  Period(&a, 2, 5.1);
  proto::PolicyState state;
  a.SaveState(&state);
  AccordionPolicy b(o);
  ASSERT_TRUE(b.RestoreState(state).ok());
  EXPECT_EQ(Period(&a, 2, 5), Period(&b, 2, 5));
  EXPECT_EQ(a.critical(), b.critical());
}

}  // namespace
}  // namespace gravac
}  // namespace terse
