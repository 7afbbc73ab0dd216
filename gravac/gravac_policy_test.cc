#include "gravac/gravac_policy.h"

#include <cmath>
#include <functional>
#include <vector>

#include "gtest/gtest.h"

namespace terse {
namespace gravac {
namespace {

// A synthetic bucket: the compression gain and the step time as functions of
// the CF, as if measured and averaged over ranks.
struct Trace {
  std::function<double(double)> gain;     // ||C(g, cf)||^2 / ||g||^2
  std::function<double(double)> seconds;  // time of a step sending at cf
};

StepStats Measure(const Decision& d, const Trace& trace) {
  StepStats s;
  if (!d.wants_stats) return s;  // The engine skips the exchange: zeros.
  s.norm2_ef = 1.0;
  if (d.probe_cf_min > 0) {
    s.norm2_min = trace.gain(d.probe_cf_min);
    s.norm2_candidate = trace.gain(d.probe_cf_candidate);
  }
  s.seconds = trace.seconds(d.send_cf);
  s.samples = 256;
  return s;
}

// Runs `steps` steps and returns the CF sent at each.
std::vector<double> RunSteps(GravacPolicy* policy, const Trace& trace,
                             int steps) {
  std::vector<double> sent;
  for (int i = 0; i < steps; ++i) {
    Decision d = policy->Decide();
    sent.push_back(d.send_cf);
    policy->Observe(d, Measure(d, trace));
  }
  return sent;
}

std::vector<double> Collapse(const std::vector<double>& v) {
  std::vector<double> out;
  for (double x : v) {
    if (out.empty() || out.back() != x) out.push_back(x);
  }
  return out;
}

// Gains above epsilon = 0.7 but 3% apart per doubling (more than omega = 1%),
// and each higher CF strictly faster: nothing settles, the floor stays.
Trace Exploring() {
  return Trace{[](double cf) { return 0.99 - 0.03 * std::log2(cf / 10); },
               [](double cf) { return 1.0 / (1.0 + cf / 10); }};
}

GravacOptions Options(double cf_max, bool exponential, int window) {
  GravacOptions o;
  o.compressor = "topk";
  o.cf_min = 10;
  o.cf_max = cf_max;
  o.epsilon = 0.7;
  o.omega = 0.01;
  o.window = window;
  o.exponential = exponential;
  o.ewma = 1.0;
  // The paper's algorithm: the sequences below are Algorithm 1's. The
  // throughput guard (an extension, on by default) has its own tests below.
  o.throughput_guard = false;
  return o;
}

GravacOptions GuardedOptions(int window) {
  GravacOptions o = Options(1000, /*exponential=*/true, window);
  o.throughput_guard = true;
  return o;
}

// A fast link: every gain passes epsilon, but a compressed step (top-k and
// its probes) takes 3x a dense one, so its T_c is below dense's.
Trace FastLink() {
  return Trace{Exploring().gain, [](double cf) { return cf <= 1 ? 1.0 : 3.0; }};
}

TEST(GravacPolicyTest, ExponentialPolicyVisitsThePaperSequence) {
  GravacPolicy policy(Options(1000, /*exponential=*/true, /*window=*/5));
  std::vector<double> sent = RunSteps(&policy, Exploring(), 40);
  EXPECT_EQ(Collapse(sent), (std::vector<double>{1, 10, 20, 40, 160, 1000}));
  // One candidate per window: the CF changes only at window boundaries.
  for (int i = 1; i < 40; ++i) {
    if (sent[i] != sent[i - 1] && sent[i - 1] != 1) {
      EXPECT_EQ(i % 5, 0) << "changed at step " << i;
    }
  }
  EXPECT_EQ(policy.theta_min(), 10);
  EXPECT_FALSE(policy.settled());
}

TEST(GravacPolicyTest, GeometricPolicyVisitsThePaperSequence) {
  GravacPolicy policy(Options(2000, /*exponential=*/false, /*window=*/3));
  std::vector<double> sent = RunSteps(&policy, Exploring(), 40);
  EXPECT_EQ(Collapse(sent), (std::vector<double>{1, 10, 20, 40, 80, 160, 320,
                                                 640, 1280, 2000}));
  EXPECT_EQ(policy.theta_min(), 10);
}

TEST(GravacPolicyTest, GainDropFallsBackToThetaMinAtOnceThenDense) {
  GravacPolicy policy(Options(1000, true, 4));
  Trace trace = Exploring();
  RunSteps(&policy, trace, 6);  // Now exploring candidate 20 (steps 4-7).
  Decision d = policy.Decide();
  ASSERT_EQ(d.send_cf, 20);

  // The candidate's gain collapses below epsilon; theta_min's holds.
  Trace degraded{[](double cf) { return cf > 10 ? 0.5 : 0.9; }, trace.seconds};
  policy.Observe(d, Measure(d, degraded));
  d = policy.Decide();
  EXPECT_EQ(d.send_cf, 10) << "one step later: back to theta_min";
  EXPECT_FALSE(d.clear_residual);

  // Both gains below epsilon: dense, and the residual is dropped.
  Trace collapsed{[](double) { return 0.3; }, trace.seconds};
  policy.Observe(d, Measure(d, collapsed));
  d = policy.Decide();
  EXPECT_TRUE(d.dense());
  EXPECT_TRUE(d.clear_residual);

  // Recovery is immediate too once the gains are back.
  policy.Observe(d, Measure(d, trace));
  EXPECT_FALSE(policy.Decide().dense());
}

TEST(GravacPolicyTest, EwmaSmoothsTheGains) {
  GravacOptions o = Options(1000, true, 100);
  o.ewma = 0.25;
  GravacPolicy policy(o);
  Trace high{[](double) { return 0.95; }, [](double) { return 1.0; }};
  RunSteps(&policy, high, 1);
  EXPECT_DOUBLE_EQ(policy.delta_min(), 0.95);
  Trace low{[](double) { return 0.15; }, [](double) { return 1.0; }};
  RunSteps(&policy, low, 1);
  EXPECT_DOUBLE_EQ(policy.delta_min(), 0.25 * 0.15 + 0.75 * 0.95);
}

TEST(GravacPolicyTest, EqualThroughputsSettleOnTheLowerCf) {
  GravacPolicy policy(Options(1000, true, 4));
  // Gains 0.99 at 10 and 0.95 at 20 (apart by more than omega); times chosen
  // so T_c(10) == T_c(20); dense is much slower.
  Trace trace{[](double cf) { return cf <= 10 ? 0.99 : 0.95; },
              [](double cf) {
                if (cf <= 1) return 10.0;
                return cf <= 10 ? 1.0 : 0.95 / 0.99;
              }};
  std::vector<double> sent = RunSteps(&policy, trace, 40);
  EXPECT_TRUE(policy.settled());
  EXPECT_EQ(policy.candidate_cf(), 10);
  EXPECT_EQ(Collapse(sent), (std::vector<double>{1, 10, 20, 10}));
  for (int i = 8; i < 40; ++i) EXPECT_EQ(sent[i], 10) << i;
}

TEST(GravacPolicyTest, EqualGainsRaiseTheFloor) {
  GravacPolicy policy(Options(1000, true, 4));
  // theta_min and the candidate lose nothing more than each other.
  Trace trace{[](double) { return 0.95; },
              [](double cf) { return 1.0 / (1.0 + cf / 10); }};
  RunSteps(&policy, trace, 8);  // Windows: cand 10, cand 20.
  EXPECT_EQ(policy.theta_min(), 20) << "floor raised to the evaluated 20";
  Decision d = policy.Decide();
  EXPECT_EQ(d.probe_cf_min, 20);
  EXPECT_EQ(d.probe_cf_candidate, 40);
}

TEST(GravacPolicyTest, OmegaAndWindowEdges) {
  // omega = 0: a 0.5% difference in gains does not raise the floor.
  GravacOptions o = Options(1000, true, 1);
  o.omega = 0;
  GravacPolicy strict(o);
  Trace close{[](double cf) { return cf <= 10 ? 0.95 : 0.95 * 0.995; },
              [](double cf) { return 1.0 / (1.0 + cf / 10); }};
  std::vector<double> sent = RunSteps(&strict, close, 6);
  EXPECT_EQ(strict.theta_min(), 10);
  // window = 1: a new candidate every step.
  EXPECT_EQ(sent, (std::vector<double>{1, 20, 40, 160, 1000, 1000}));

  // The same difference is within omega = 1%: the floor rises.
  GravacPolicy lenient(Options(1000, true, 1));
  RunSteps(&lenient, close, 3);
  EXPECT_GT(lenient.theta_min(), 10);
}

TEST(GravacPolicyTest, RestoredStateContinuesTheSameSequence) {
  GravacPolicy original(Options(1000, true, 3));
  Trace trace = Exploring();
  RunSteps(&original, trace, 7);  // Mid-exploration, mid-window.
  proto::PolicyState state;
  original.SaveState(&state);

  std::string wire = state.SerializeAsString();
  proto::PolicyState parsed;
  ASSERT_TRUE(parsed.ParseFromString(wire));
  GravacPolicy restored(Options(1000, true, 3));
  ASSERT_TRUE(restored.RestoreState(parsed).ok());

  EXPECT_EQ(RunSteps(&original, trace, 20), RunSteps(&restored, trace, 20));
  proto::PolicyState wrong;
  wrong.set_kind("accordion");
  EXPECT_FALSE(restored.RestoreState(wrong).ok());
}

TEST(GravacPolicyTest, GuardIsOnByDefault) {
  EXPECT_TRUE(GravacOptions().throughput_guard);
}

TEST(GravacPolicyTest, GuardKeepsAFastLinkDenseAfterProbing) {
  GravacPolicy policy(GuardedOptions(/*window=*/5));
  std::vector<Decision> decisions;
  Trace trace = FastLink();
  for (int i = 0; i < 200; ++i) {
    Decision d = policy.Decide();
    decisions.push_back(d);
    policy.Observe(d, Measure(d, trace));
  }
  // Decisions 0-1 measure dense without probes, 2 measures the gains, 3 is
  // the first compressed step; its T_c is below dense's: vetoed from 4 on.
  EXPECT_EQ(decisions[0].probe_cf_min, 0);
  EXPECT_TRUE(decisions[1].dense());
  EXPECT_GT(decisions[2].probe_cf_min, 0);
  EXPECT_FALSE(decisions[3].dense());
  std::vector<int> compressed;
  int quiet = 0;
  for (int i = 4; i < 200; ++i) {
    if (!decisions[i].dense()) {
      compressed.push_back(i);
      EXPECT_TRUE(decisions[i].wants_stats);
    } else {
      EXPECT_EQ(decisions[i].probe_cf_min, 0) << "vetoed steps do not probe";
      EXPECT_TRUE(decisions[i].clear_residual);
      // One vetoed step per window (mid-window) measures dense's time.
      // (5 and 15 are guard probes measuring dense: they want them.)
      if (i != 5 && i != 15) {
        EXPECT_EQ(decisions[i].wants_stats, i % 5 == 2) << i;
      }
      quiet += !decisions[i].wants_stats;
    }
  }
  EXPECT_GT(quiet, 140) << "most vetoed steps skip the statistics exchange";
  // 6, 10, 16, 20: each new rung of the ladder (20, 40, 160, 1000) is sent
  // once to be measured (an unmeasured CF is never vetoed); the guard probes
  // at 5 and 15 found an unmeasured candidate, so they measured dense. Then
  // guard probes: 35, 40, 50, 70, 110, 150, 190 (1, 2, 4, 8, 8, 8 windows).
  EXPECT_EQ(compressed,
            (std::vector<int>{6, 10, 16, 20, 35, 40, 50, 70, 110, 150, 190}));
  EXPECT_TRUE(policy.guarded());
  EXPECT_DOUBLE_EQ(policy.guard_dense_throughput(), 256.0);
  EXPECT_GT(policy.guard_throughput(10), 0);
  EXPECT_LT(policy.guard_throughput(10), 256.0);
}

TEST(GravacPolicyTest, GuardLetsASlowLinkCompressAsThePaperDoes) {
  Trace trace = Exploring();  // Each higher CF strictly faster than dense.
  GravacPolicy paper(Options(1000, true, 5));
  GravacPolicy guarded(GuardedOptions(5));
  std::vector<Decision> with_guard;
  std::vector<double> without = RunSteps(&paper, trace, 60);
  for (int i = 0; i < 60; ++i) {
    Decision d = guarded.Decide();
    with_guard.push_back(d);
    guarded.Observe(d, Measure(d, trace));
  }
  // Same CFs at the same steps, but for plain-dense measuring steps: two at
  // the start and one per guard probe (1, 2, 4, 8 windows apart).
  std::vector<int> dense_steps;
  for (int i = 0; i < 60; ++i) {
    if (with_guard[i].dense()) {
      dense_steps.push_back(i);
    } else {
      EXPECT_EQ(with_guard[i].send_cf, without[i]) << "step " << i;
    }
  }
  EXPECT_EQ(dense_steps, (std::vector<int>{0, 1, 2, 5, 15, 35}));
  EXPECT_EQ(Collapse(without), (std::vector<double>{1, 10, 20, 40, 160, 1000}));
  EXPECT_FALSE(guarded.guarded());
  EXPECT_GT(guarded.guard_throughput(1000), guarded.guard_dense_throughput());
}

TEST(GravacPolicyTest, GuardFallsBackToThetaMinWhenOnlyTheCandidateIsSlow) {
  GravacPolicy policy(GuardedOptions(4));
  // CF 10 halves the step; CF 20 and beyond are slower than dense.
  Trace trace{Exploring().gain, [](double cf) {
                if (cf <= 1) return 1.0;
                return cf <= 10 ? 0.5 : 4.0;
              }};
  std::vector<double> sent = RunSteps(&policy, trace, 40);
  // Candidate 20 is sent once (steps 4-7's window) to be measured, then the
  // guard sends theta_min instead, and never the slower candidates again
  // except at guard probes.
  int at_min = 0, above_min = 0;
  for (int i = 10; i < 40; ++i) {
    at_min += sent[i] == 10;
    above_min += sent[i] > 10;
  }
  EXPECT_GE(at_min, 25);
  EXPECT_LE(above_min, 2);
}

TEST(GravacPolicyTest, GuardDenseThroughputDoesNotGoStale) {
  GravacPolicy policy(GuardedOptions(5));
  RunSteps(&policy, FastLink(), 30);
  ASSERT_TRUE(policy.guarded());
  // The link slows down: dense now takes 10x, compressed steps 1/(1+cf/10).
  std::vector<double> sent = RunSteps(&policy, Exploring(), 40);
  // Vetoed steps are plain dense and keep measuring T_d; the next guard
  // probe (at most 8 windows away) sees compression win, and it resumes.
  Trace slow{Exploring().gain,
             [](double cf) { return cf <= 1 ? 10.0 : 1.0 / (1 + cf / 10); }};
  sent = RunSteps(&policy, slow, 60);
  EXPECT_FALSE(policy.guarded());
  EXPECT_FALSE(policy.Decide().dense());
}

TEST(GravacPolicyTest, GuardStateIsPartOfTheCheckpoint) {
  GravacPolicy original(GuardedOptions(5));
  RunSteps(&original, FastLink(), 23);  // Vetoed, between guard probes.
  proto::PolicyState state;
  original.SaveState(&state);
  EXPECT_EQ(state.decisions(), 23);
  EXPECT_DOUBLE_EQ(state.guard_dense_throughput(), 256.0);
  EXPECT_GT(state.guard_throughput_size(), 0);
  EXPECT_EQ(state.guard_next_probe(), 35);
  EXPECT_EQ(state.guard_interval(), 4);
  EXPECT_FALSE(state.guard_probe_verdict());
  EXPECT_TRUE(state.guarded());

  proto::PolicyState parsed;
  ASSERT_TRUE(parsed.ParseFromString(state.SerializeAsString()));
  GravacPolicy restored(GuardedOptions(5));
  ASSERT_TRUE(restored.RestoreState(parsed).ok());
  EXPECT_EQ(RunSteps(&original, FastLink(), 60),
            RunSteps(&restored, FastLink(), 60));

  proto::PolicyState bad = state;
  bad.set_guard_interval(GravacPolicy::kGuardMaxInterval + 1);
  EXPECT_FALSE(restored.RestoreState(bad).ok());
}

TEST(GravacPolicyTest, GuardedPoliciesFedTheSameAveragesAgree) {
  // Ranks feed the same averaged statistics (the engine averages them), so
  // their guarded decisions are identical at every step, also when the
  // averaged time sits right at the veto threshold.
  GravacPolicy a(GuardedOptions(3)), b(GuardedOptions(3));
  Trace edge{Exploring().gain, [](double cf) {
               return cf <= 1 ? 1.0 : 0.99 * 1.0 / Exploring().gain(cf);
             }};
  for (int i = 0; i < 100; ++i) {
    Decision da = a.Decide(), db = b.Decide();
    ASSERT_EQ(da.send_cf, db.send_cf) << i;
    ASSERT_EQ(da.probe_cf_min, db.probe_cf_min) << i;
    ASSERT_EQ(da.clear_residual, db.clear_residual) << i;
    StepStats s = Measure(da, edge);
    a.Observe(da, s);
    b.Observe(db, s);
  }
}

}  // namespace
}  // namespace gravac
}  // namespace terse
