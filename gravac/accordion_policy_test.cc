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
