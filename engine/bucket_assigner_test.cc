#include "engine/bucket_assigner.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace terse {
namespace {

proto::Response R(const std::string& name, int64_t n, int dtype = 0,
                  proto::ReduceOp op = proto::SUM) {
  proto::Response r;
  r.set_kind(proto::Response::EXECUTE);
  r.set_op(proto::ALLREDUCE);
  r.add_names(name);
  r.set_dtype(dtype);
  r.set_device(-1);
  r.set_reduce_op(op);
  r.add_shape(n);
  r.set_prescale(1);
  r.set_postscale(1);
  return r;
}

std::vector<const proto::Response*> Ptrs(
    const std::vector<proto::Response>& v) {
  std::vector<const proto::Response*> p;
  for (const auto& r : v) p.push_back(&r);
  return p;
}

std::vector<std::string> Members(const Bucket& b) {
  std::vector<std::string> names;
  for (const auto& m : b.members) names.push_back(m.name);
  return names;
}

TEST(BucketAssignerTest, AdasumTensorsAreNeverFused) {
  // Adasum's dot products are per tensor: small Adasum tensors ready
  // together get a bucket each, while Sum tensors beside them still fuse.
  BucketAssigner a(1000, 0);
  std::vector<proto::Response> ready = {R("s1", 4), R("x", 4, 0, proto::ADASUM),
                                        R("y", 4, 0, proto::ADASUM),
                                        R("s2", 4)};
  a.OnReady(Ptrs(ready));
  EXPECT_NE(a.BucketOf("x"), a.BucketOf("y"));
  EXPECT_EQ(Members(a.bucket(a.BucketOf("x"))),
            (std::vector<std::string>{"x"}));
  EXPECT_EQ(Members(a.bucket(a.BucketOf("s1"))),
            (std::vector<std::string>{"s1", "s2"}));
}

TEST(BucketAssignerTest, GroupsByKeyUpToTheThresholdInNegotiatedOrder) {
  BucketAssigner a(100, 0);  // 25 floats.
  std::vector<proto::Response> first = {R("a", 10),   R("h", 10, /*f16*/ 1),
                                        R("b", 10),   R("c", 10),
                                        R("big", 50), R("d", 2, 0, proto::MAX)};
  std::vector<int> done = a.OnReady(Ptrs(first));
  EXPECT_EQ(a.num_buckets(), 5);  // {a,b} {h} {c} {big} {d}
  EXPECT_EQ(done.size(), 5u);     // All ready the first time.
  EXPECT_EQ(Members(a.bucket(a.BucketOf("a"))),
            (std::vector<std::string>{"a", "b"}));
  EXPECT_NE(a.BucketOf("c"), a.BucketOf("a"));
  EXPECT_EQ(a.bucket(a.BucketOf("big")).bytes, 200);
  for (int id : done) a.Reset(id);

  // Later steps: same buckets, complete only when every member is ready.
  std::vector<proto::Response> b_only = {R("b", 10)};
  EXPECT_TRUE(a.OnReady(Ptrs(b_only)).empty());
  std::vector<proto::Response> a_only = {R("a", 10)};
  EXPECT_EQ(a.OnReady(Ptrs(a_only)), std::vector<int>{a.BucketOf("a")});
  EXPECT_EQ(a.num_buckets(), 5);
}

TEST(BucketAssignerTest, NextFitKeepsBucketsConsecutiveAndLargeTensorsAlone) {
  BucketAssigner a(100, 60);  // Tensors of >= 15 floats go alone.
  std::vector<proto::Response> first = {R("a", 10), R("b", 10), R("c", 10),
                                        R("s", 1),  R("L", 20), R("t", 1)};
  a.OnReady(Ptrs(first));
  // a, b fill the first bucket; c opens the next, and the small s, t go
  // there (not back into the first); L is alone.
  EXPECT_EQ(Members(a.bucket(a.BucketOf("a"))),
            (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(Members(a.bucket(a.BucketOf("c"))),
            (std::vector<std::string>{"c", "s", "t"}));
  EXPECT_EQ(Members(a.bucket(a.BucketOf("L"))), std::vector<std::string>{"L"});
  EXPECT_EQ(a.num_buckets(), 3);
}

TEST(BucketAssignerTest, TensorsFirstSeenInDifferentCyclesDoNotShare) {
  BucketAssigner a(1000, 0);
  std::vector<proto::Response> c1 = {R("x", 1)}, c2 = {R("y", 1)};
  a.OnReady(Ptrs(c1));
  a.OnReady(Ptrs(c2));
  EXPECT_NE(a.BucketOf("x"), a.BucketOf("y"));
}

TEST(BucketAssignerTest, ChangedTensorLeavesItsBucket) {
  BucketAssigner a(1000, 0);
  std::vector<proto::Response> first = {R("x", 4), R("y", 4)};
  for (int id : a.OnReady(Ptrs(first))) a.Reset(id);
  const int old = a.BucketOf("x");
  std::vector<proto::Response> y_only = {R("y", 4)};
  EXPECT_TRUE(a.OnReady(Ptrs(y_only)).empty());
  // x comes back with another size: it leaves, so {y} completes, and x gets a
  // bucket of its own.
  std::vector<proto::Response> x_changed = {R("x", 8)};
  std::vector<int> done = a.OnReady(Ptrs(x_changed));
  EXPECT_EQ(done.size(), 2u);
  EXPECT_EQ(a.BucketOf("y"), old);
  EXPECT_NE(a.BucketOf("x"), old);
  EXPECT_EQ(a.bucket(old).count, 4);
  std::vector<int> changed = a.TakeChanged();
  EXPECT_EQ(changed, std::vector<int>{old});
}

TEST(BucketAssignerTest, RemoveAndSplit) {
  BucketAssigner a(1000, 0);
  std::vector<proto::Response> first = {R("p", 1), R("q", 1), R("r", 1)};
  for (int id : a.OnReady(Ptrs(first))) a.Reset(id);
  const int id = a.BucketOf("p");
  std::vector<proto::Response> p_only = {R("p", 1)};
  a.OnReady(Ptrs(p_only));
  // q failed this round: p is still waiting for r.
  EXPECT_TRUE(a.Remove("q").empty());
  EXPECT_EQ(a.BucketOf("q"), -1);
  // r never comes: after the limit p runs on its own.
  EXPECT_TRUE(a.Tick(3).empty());
  EXPECT_TRUE(a.Tick(3).empty());
  std::vector<int> split = a.Tick(3);
  ASSERT_EQ(split.size(), 1u);
  EXPECT_EQ(Members(a.bucket(split[0])), std::vector<std::string>{"p"});
  EXPECT_TRUE(a.bucket(split[0]).complete());
  EXPECT_EQ(Members(a.bucket(id)), std::vector<std::string>{"r"});
  EXPECT_EQ(a.bucket(id).ready_count, 0);
}

TEST(BucketAssignerTest, PerCallCompressionIsPartOfTheKey) {
  BucketAssigner a(1000, 0);
  auto with = [](const std::string& name, const std::string& spec) {
    proto::Response r = R(name, 10);
    r.set_compression(spec);
    return r;
  };
  std::vector<proto::Response> first = {with("a", "fp16"), with("b", ""),
                                        with("c", "fp16"), with("d", "topk:4"),
                                        with("e", "")};
  std::vector<int> done = a.OnReady(Ptrs(first));
  EXPECT_EQ(a.num_buckets(), 3);  // {a,c} {b,e} {d}
  EXPECT_EQ(Members(a.bucket(a.BucketOf("a"))),
            (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(Members(a.bucket(a.BucketOf("b"))),
            (std::vector<std::string>{"b", "e"}));
  EXPECT_EQ(a.bucket(a.BucketOf("a")).compression, "fp16");
  EXPECT_EQ(a.bucket(a.BucketOf("d")).compression, "topk:4");
  EXPECT_EQ(a.bucket(a.BucketOf("b")).compression, "");
  for (int id : done) a.Reset(id);
  // A tensor whose compression changes leaves its bucket for one of its
  // new key.
  std::vector<proto::Response> changed = {with("c", "topk:4")};
  a.OnReady(Ptrs(changed));
  EXPECT_EQ(Members(a.bucket(a.BucketOf("a"))), std::vector<std::string>{"a"});
  EXPECT_EQ(a.bucket(a.BucketOf("c")).compression, "topk:4");
}

TEST(BucketAssignerTest, GroupAndSoloSeeTheCompressionSpec) {
  std::vector<std::pair<std::string, std::string>> seen;
  BucketAssigner a(
      1000, 40,
      [&](const std::string& name, const std::string& spec) {
        seen.push_back({name, spec});
        return spec.empty() ? std::string("rules") : spec;
      },
      [](const std::string&, const std::string& spec) {
        return spec.empty() || spec == "none";
      });
  proto::Response big_dense = R("x", 20);  // 80 bytes >= 40: alone.
  proto::Response big_fp16 = R("y", 20);
  big_fp16.set_compression("fp16");
  proto::Response small = R("z", 2);
  small.set_compression("fp16");
  std::vector<proto::Response> v = {big_dense, big_fp16, small};
  a.OnReady(Ptrs(v));
  EXPECT_EQ(a.num_buckets(), 2);  // {x} solo, {y,z} fused (fp16: no solo).
  EXPECT_EQ(Members(a.bucket(a.BucketOf("y"))),
            (std::vector<std::string>{"y", "z"}));
  EXPECT_EQ(a.bucket(a.BucketOf("y")).group, "fp16");
  bool saw_fp16 = false;
  for (const auto& [name, spec] : seen)
    saw_fp16 |= name == "y" && spec == "fp16";
  EXPECT_TRUE(saw_fp16);
}

// Forgetting (bucket_assigner.h). Oracle: a training loop whose step is one
// OnReady of the same names, so the assigner's step count is the loop's.
TEST(BucketAssignerTest, NameUnseenForNStepsIsForgottenOnceAndItsBucketRuns) {
  const int64_t n = 5;
  BucketAssigner a(1000, 0, nullptr, nullptr, n);
  std::vector<proto::Response> first = {R("a", 1), R("b", 1), R("rare", 1)};
  std::vector<proto::Response> step = {R("a", 1), R("b", 1)};
  for (int id : a.OnReady(Ptrs(first))) a.Reset(id);
  const int id = a.BucketOf("a");
  ASSERT_EQ(a.BucketOf("rare"), id);  // {a, b, rare}
  a.TakeChanged();
  // Steps 1..n: "rare" is missing, so {a, b, rare} waits (nobody ticks).
  for (int64_t s = 1; s <= n; ++s) {
    EXPECT_TRUE(a.OnReady(Ptrs(step)).empty());
    EXPECT_EQ(a.steps(), s);
    EXPECT_TRUE(a.TakeForgotten().empty());
  }
  // Step n+1 begins: "rare" has missed n whole steps and goes; the bucket
  // it held up is complete with a and b ready since step 1.
  EXPECT_EQ(a.OnReady(Ptrs(step)), std::vector<int>{id});
  EXPECT_EQ(a.TakeForgotten(), std::vector<std::string>{"rare"});
  EXPECT_EQ(a.TakeChanged(), std::vector<int>{id});
  EXPECT_EQ(Members(a.bucket(id)), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(a.BucketOf("rare"), -1);
  EXPECT_EQ(a.num_names(), 2);
  a.Reset(id);
  // The kept names never go while they keep coming.
  for (int s = 0; s < 4 * n; ++s) {
    for (int done : a.OnReady(Ptrs(step))) a.Reset(done);
  }
  EXPECT_TRUE(a.TakeForgotten().empty());
  EXPECT_EQ(a.BucketOf("a"), id);
  // "rare" comes back: a new name, in a new bucket of its own cycle.
  std::vector<proto::Response> back = {R("rare", 1)};
  std::vector<int> done = a.OnReady(Ptrs(back));
  EXPECT_EQ(done.size(), 1u);
  EXPECT_NE(a.BucketOf("rare"), id);
  EXPECT_TRUE(a.bucket(a.BucketOf("rare")).complete());
}

TEST(BucketAssignerTest, FreshNamesStayBoundedAndEachIsForgottenOnce) {
  const int64_t n = 3;
  BucketAssigner a(1 << 20, 0, nullptr, nullptr, n);
  const int64_t fresh = 20000;
  std::set<std::string> forgotten;
  int64_t most = 0;
  for (int64_t i = 0; i < fresh; ++i) {
    // One to three fresh names a cycle, never repeated.
    std::vector<proto::Response> v;
    for (int64_t j = 0; j <= i % 3; ++j) {
      v.push_back(
          R("noname." + std::to_string(i) + "." + std::to_string(j), 1 + j));
    }
    for (int id : a.OnReady(Ptrs(v))) a.Reset(id);
    for (const std::string& name : a.TakeForgotten()) {
      EXPECT_TRUE(forgotten.insert(name).second) << name << " twice";
    }
    a.TakeChanged();
    most = std::max(most, a.num_names());
  }
  // No name repeats, so a step ends after kMinStepNames names: at most n
  // past steps and the current one are tracked.
  EXPECT_LE(most, (n + 1) * BucketAssigner::kMinStepNames);
  EXPECT_LE(a.num_buckets(), a.num_names());
  // Everything issued is tracked or was forgotten (once), nothing else.
  int64_t issued = 0;
  for (int64_t i = 0; i < fresh; ++i) issued += 1 + i % 3;
  EXPECT_EQ(static_cast<int64_t>(forgotten.size()) + a.num_names(), issued);
}

TEST(BucketAssignerTest, FreshNamesBesideATrainingLoopGoAfterNSteps) {
  // Each step: the loop's gradients g0..g9 and one fresh name.
  const int64_t n = 4;
  BucketAssigner a(1 << 20, 0, nullptr, nullptr, n);
  for (int s = 0; s < 200; ++s) {
    std::vector<proto::Response> v;
    for (int g = 0; g < 10; ++g) v.push_back(R("g" + std::to_string(g), 8));
    v.push_back(R("fresh." + std::to_string(s), 8));
    for (int id : a.OnReady(Ptrs(v))) a.Reset(id);
    std::vector<std::string> gone = a.TakeForgotten();
    if (s > n) {
      // Step s forgets the fresh name of step s - n - 1, nothing else.
      EXPECT_EQ(gone,
                std::vector<std::string>{"fresh." + std::to_string(s - n - 1)});
    } else {
      EXPECT_TRUE(gone.empty());
    }
    EXPECT_LE(a.num_names(), 10 + n + 1);
  }
}

// A loop of more gradients than kMinStepNames: its first pass is counted in
// steps of fresh names, but from the first repeat on one pass of the loop is
// one step, so a tensor that pauses for fewer than n passes keeps its state
// and one that stops goes at the (n+1)-th pass without it, as with a small
// loop. Oracle: the loop's pass count.
TEST(BucketAssignerTest, ALoopOfManyTensorsCountsOneStepPerPass) {
  const int64_t n = 3;
  // Longer than a step of fresh names, within n of them (see Forgetting).
  const int grads = 2 * BucketAssigner::kMinStepNames;
  BucketAssigner a(1 << 20, 0, nullptr, nullptr, n);
  auto pass = [&](bool with_rare) {
    std::vector<proto::Response> v;
    for (int g = 0; g < grads; ++g) v.push_back(R("g" + std::to_string(g), 8));
    if (with_rare) v.push_back(R("rare", 8));
    for (int id : a.OnReady(Ptrs(v))) a.Reset(id);
  };
  pass(true);
  pass(true);  // The first repeat: from here one pass is one step.
  const int64_t base = a.steps();
  EXPECT_TRUE(a.TakeForgotten().empty());
  // "rare" comes in passes 1-3, pauses for n - 1 passes, comes in pass
  // n + 3 = 6 and stops: it goes at pass 6 + n + 1 = 10, nothing else ever.
  for (int p = 1; p <= 20; ++p) {
    pass(p <= 3 || p == 3 + n);
    EXPECT_EQ(a.steps(), base + p) << "pass " << p;
    const std::vector<std::string> gone = a.TakeForgotten();
    if (p == 3 + n + n + 1) {
      EXPECT_EQ(gone, std::vector<std::string>{"rare"}) << "pass " << p;
    } else {
      EXPECT_TRUE(gone.empty()) << "pass " << p << ": " << gone.size();
    }
  }
  EXPECT_EQ(a.BucketOf("rare"), -1);
  EXPECT_EQ(a.num_names(), grads);
}

// A loop longer than n steps of fresh names forgets its first names before
// they come back; their return lengthens the steps of fresh names, so after
// a few passes it steps once a pass and forgets nothing. Oracle: the loop's
// pass count, and every name of the loop tracked.
TEST(BucketAssignerTest, ALoopLongerThanTheForgetWindowSettles) {
  const int64_t n = 2;
  const int grads = 5 * BucketAssigner::kMinStepNames;  // > n * 16 names
  BucketAssigner a(1 << 20, 0, nullptr, nullptr, n);
  auto pass = [&] {
    std::vector<proto::Response> v;
    for (int g = 0; g < grads; ++g) v.push_back(R("g" + std::to_string(g), 8));
    for (int id : a.OnReady(Ptrs(v))) a.Reset(id);
  };
  int settled_at = -1;
  int64_t before = 0;
  for (int p = 1; p <= 12; ++p) {
    before = a.steps();
    pass();
    const bool lost = !a.TakeForgotten().empty();
    if (lost || a.steps() != before + 1)
      settled_at = -1;
    else if (settled_at < 0)
      settled_at = p;
  }
  ASSERT_GT(settled_at, 0) << "never settled";
  EXPECT_LE(settled_at, 4);
  EXPECT_EQ(a.num_names(), grads);
}

// Names that never come back keep the bound however many are forgotten.
TEST(BucketAssignerTest, ForgottenNamesThatNeverComeBackKeepTheBound) {
  const int64_t n = 3;
  BucketAssigner a(1 << 20, 0, nullptr, nullptr, n);
  int64_t most = 0;
  for (int i = 0; i < 3 * static_cast<int>(BucketAssigner::kRecentlyForgotten);
       ++i) {
    std::vector<proto::Response> v = {R("fresh." + std::to_string(i), 1)};
    for (int id : a.OnReady(Ptrs(v))) a.Reset(id);
    a.TakeForgotten();
    a.TakeChanged();
    most = std::max(most, a.num_names());
  }
  EXPECT_LE(most, (n + 1) * BucketAssigner::kMinStepNames);
}

TEST(BucketAssignerTest, ForgetAfterZeroKeepsEveryName) {
  BucketAssigner a(1 << 20, 0);
  for (int i = 0; i < 2000; ++i) {
    std::vector<proto::Response> v = {R("n" + std::to_string(i), 1)};
    for (int id : a.OnReady(Ptrs(v))) a.Reset(id);
  }
  EXPECT_TRUE(a.TakeForgotten().empty());
  EXPECT_EQ(a.num_names(), 2000);
}

}  // namespace
}  // namespace terse
