#include "engine/bucket_assigner.h"

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
  std::vector<proto::Response> ready = {
      R("s1", 4), R("x", 4, 0, proto::ADASUM), R("y", 4, 0, proto::ADASUM),
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
  for (const auto& [name, spec] : seen) saw_fp16 |= name == "y" && spec == "fp16";
  EXPECT_TRUE(saw_fp16);
}

}  // namespace
}  // namespace terse
