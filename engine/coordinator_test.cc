#include "engine/coordinator.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

using ::testing::HasSubstr;

proto::RequestList List(int rank, const std::vector<std::string>& names,
                        proto::OpType op = proto::ALLREDUCE) {
  proto::RequestList list;
  list.set_rank(rank);
  for (const std::string& name : names) {
    proto::Request* r = list.add_requests();
    r->set_rank(rank);
    r->set_name(name);
    r->set_op(op);
    r->add_shape(4);
    r->set_device(-1);
    r->set_prescale(1);
    r->set_postscale(1);
  }
  return list;
}

std::vector<std::string> Names(const proto::ResponseList& out) {
  std::vector<std::string> names;
  for (const auto& r : out.responses()) {
    names.push_back(r.names_size() ? r.names(0) : "<join>");
  }
  return names;
}

TEST(CoordinatorTest, CompletesInFirstRequestOrderOnceEveryRankSent) {
  Coordinator c(2);
  const auto now = Clock::now();
  ASSERT_TRUE(c.Add(0, List(0, {"a", "b", "c"}), now).ok());
  ASSERT_TRUE(c.Add(1, List(1, {"c", "a"}), now).ok());
  proto::ResponseList out;
  c.Complete(&out);
  EXPECT_EQ(Names(out), (std::vector<std::string>{"a", "c"}));
  ASSERT_EQ(c.PendingOps().size(), 1u);
  EXPECT_EQ(c.PendingOps()[0].name, "b");
  EXPECT_EQ(c.PendingOps()[0].submitted, std::vector<int>{0});
  ASSERT_TRUE(c.Add(1, List(1, {"b"}), now).ok());
  proto::ResponseList more;
  c.Complete(&more);
  EXPECT_EQ(Names(more), std::vector<std::string>{"b"});
}

TEST(CoordinatorTest, RejectsLiesAndDuplicates) {
  Coordinator c(2);
  const auto now = Clock::now();
  EXPECT_FALSE(c.Add(0, List(1, {"a"}), now).ok());
  ASSERT_TRUE(c.Add(0, List(0, {"a"}), now).ok());
  absl::Status twice = c.Add(0, List(0, {"a"}), now);
  EXPECT_THAT(std::string(twice.message()), HasSubstr("twice"));
}

TEST(CoordinatorTest, JoinedRanksCountForAllreduceOnly) {
  Coordinator c(3);
  const auto now = Clock::now();
  proto::RequestList join;
  join.set_rank(2);
  proto::Request* j = join.add_requests();
  j->set_rank(2);
  j->set_op(proto::JOIN);
  ASSERT_TRUE(c.Add(2, join, now).ok());
  ASSERT_TRUE(c.Add(0, List(0, {"a"}), now).ok());
  ASSERT_TRUE(c.Add(1, List(1, {"a"}), now).ok());
  ASSERT_TRUE(c.Add(0, List(0, {"g"}, proto::ALLGATHER), now).ok());
  ASSERT_TRUE(c.Add(1, List(1, {"g"}, proto::ALLGATHER), now).ok());
  proto::ResponseList out;
  c.Complete(&out);
  ASSERT_EQ(out.responses_size(), 2);
  EXPECT_EQ(out.responses(0).kind(), proto::Response::EXECUTE);
  EXPECT_EQ(out.responses(1).kind(), proto::Response::ERROR);
  EXPECT_THAT(out.responses(1).error(), HasSubstr("rank 2 has joined"));
  EXPECT_EQ(c.JoinedRanks(), std::vector<int>{2});

  for (int r = 0; r < 2; ++r) {
    proto::RequestList l;
    l.set_rank(r);
    proto::Request* q = l.add_requests();
    q->set_rank(r);
    q->set_op(proto::JOIN);
    ASSERT_TRUE(c.Add(r, l, now).ok());
  }
  proto::ResponseList done;
  c.Complete(&done);
  ASSERT_EQ(done.responses_size(), 1);
  EXPECT_EQ(done.responses(0).op(), proto::JOIN);
  EXPECT_EQ(done.responses(0).last_joined_rank(), 1);
  EXPECT_TRUE(c.JoinedRanks().empty());
}

TEST(CoordinatorTest, AgeComesFromTheOldestRequest) {
  Coordinator c(2);
  const auto now = Clock::now();
  proto::RequestList list = List(1, {"old"});
  list.mutable_requests(0)->set_queued_seconds(30);
  ASSERT_TRUE(c.Add(1, list, now).ok());
  const double age = SecondsBetween(c.PendingOps()[0].since, now);
  EXPECT_NEAR(age, 30, 1e-6);
}

// Tags every request of `list` as an op of group `group` of `size` ops.
proto::RequestList Grouped(proto::RequestList list, const std::string& group,
                           int size) {
  for (proto::Request& r : *list.mutable_requests()) {
    r.set_group(group);
    r.set_group_size(size);
  }
  return list;
}

TEST(CoordinatorTest, AGroupIsAnsweredInOneCycleOnceEveryOpIsReady) {
  Coordinator c(2);
  const auto now = Clock::now();
  // Rank 0 has the whole group and an ungrouped op; rank 1 one member.
  ASSERT_TRUE(c.Add(0, Grouped(List(0, {"g.0", "g.1"}), "g", 2), now).ok());
  ASSERT_TRUE(c.Add(0, List(0, {"x"}), now).ok());
  ASSERT_TRUE(c.Add(1, Grouped(List(1, {"g.0"}), "g", 2), now).ok());
  ASSERT_TRUE(c.Add(1, List(1, {"x"}), now).ok());
  proto::ResponseList first;
  c.Complete(&first);
  // g.0 is ready everywhere but held for g.1; x goes.
  EXPECT_EQ(Names(first), std::vector<std::string>{"x"});
  ASSERT_TRUE(c.Add(1, Grouped(List(1, {"g.1"}), "g", 2), now).ok());
  proto::ResponseList second;
  c.Complete(&second);
  EXPECT_EQ(Names(second), (std::vector<std::string>{"g.0", "g.1"}));
  for (const proto::Response& r : second.responses()) {
    EXPECT_EQ(r.kind(), proto::Response::EXECUTE);
    EXPECT_EQ(r.group(), "g");
  }
  EXPECT_TRUE(c.PendingOps().empty());
}

TEST(CoordinatorTest, AGroupFailsAsOneOnAMismatch) {
  Coordinator c(2);
  const auto now = Clock::now();
  proto::RequestList zero = Grouped(List(0, {"g.0", "g.1", "g.2"}), "g", 3);
  proto::RequestList one = Grouped(List(1, {"g.0", "g.1"}), "g", 3);
  one.mutable_requests(1)->set_shape(0, 5);  // g.1: [4] on 0, [5] on 1.
  ASSERT_TRUE(c.Add(0, zero, now).ok());
  ASSERT_TRUE(c.Add(1, one, now).ok());
  proto::ResponseList out;
  c.Complete(&out);
  // g.0 and g.1 are ready and fail; g.2 fails once rank 1 sends it.
  ASSERT_EQ(Names(out), (std::vector<std::string>{"g.0", "g.1"}));
  for (const proto::Response& r : out.responses()) {
    EXPECT_EQ(r.kind(), proto::Response::ERROR);
    EXPECT_THAT(r.error(), HasSubstr("shape [4] on rank 0 but [5] on rank 1"));
  }
  EXPECT_THAT(out.responses(0).error(), HasSubstr("its group 'g' failed"));
  ASSERT_TRUE(c.Add(1, Grouped(List(1, {"g.2"}), "g", 3), now).ok());
  proto::ResponseList late;
  c.Complete(&late);
  ASSERT_EQ(Names(late), std::vector<std::string>{"g.2"});
  EXPECT_EQ(late.responses(0).kind(), proto::Response::ERROR);
  EXPECT_THAT(late.responses(0).error(), HasSubstr("[5] on rank 1"));
  // The failed group is forgotten: a new group of that name runs.
  ASSERT_TRUE(c.Add(0, Grouped(List(0, {"h"}), "g", 1), now).ok());
  ASSERT_TRUE(c.Add(1, Grouped(List(1, {"h"}), "g", 1), now).ok());
  proto::ResponseList again;
  c.Complete(&again);
  ASSERT_EQ(again.responses_size(), 1);
  EXPECT_EQ(again.responses(0).kind(), proto::Response::EXECUTE);
}

TEST(CoordinatorTest, RanksThatGroupDifferentlyFailNamingThem) {
  Coordinator c(2);
  const auto now = Clock::now();
  ASSERT_TRUE(c.Add(0, Grouped(List(0, {"a"}), "g", 1), now).ok());
  ASSERT_TRUE(c.Add(1, List(1, {"a"}), now).ok());
  proto::ResponseList out;
  c.Complete(&out);
  ASSERT_EQ(out.responses_size(), 1);
  EXPECT_EQ(out.responses(0).kind(), proto::Response::ERROR);
  EXPECT_THAT(out.responses(0).error(),
              HasSubstr("group 'g' of 1 ops on rank 0 but none on rank 1"));
}

TEST(CoordinatorTest, ARefusedOpFailsOnEveryRankWithTheReason) {
  Coordinator c(3);
  const auto now = Clock::now();
  for (int r = 0; r < 3; ++r) {
    proto::RequestList list = List(r, {"a2a"}, proto::ALLTOALL);
    if (r == 1) {
      list.mutable_requests(0)->set_refused(
          "splits sum to 3, the first "
          "dimension of the tensor is 4");
    } else {
      for (int j = 0; j < 3; ++j)
        list.mutable_requests(0)->add_splits(j < 2 ? 2 : 0);
    }
    ASSERT_TRUE(c.Add(r, list, now).ok());
  }
  proto::ResponseList out;
  c.Complete(&out);
  ASSERT_EQ(out.responses_size(), 1);
  EXPECT_EQ(out.responses(0).kind(), proto::Response::ERROR);
  EXPECT_THAT(out.responses(0).error(),
              HasSubstr("tensor 'a2a': rank 1 refused it: splits sum to 3"));
}

}  // namespace
}  // namespace terse
