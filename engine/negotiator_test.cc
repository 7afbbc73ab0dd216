// The negotiation protocol on two loopback ranks, driven cycle by cycle, with
// a communicator wrapper that counts which collectives each cycle used.
#include "engine/negotiator.h"

#include <map>
#include <string>
#include <thread>
#include <vector>

#include "collectives/loopback/loopback.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

class CountingCommunicator : public Communicator {
 public:
  explicit CountingCommunicator(Communicator* inner) : inner_(inner) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  int local_rank() const override { return inner_->local_rank(); }
  int local_size() const override { return inner_->local_size(); }
  absl::string_view backend() const override { return "counting"; }
  absl::Status Allreduce(void* b, int64_t c, DataType d, ReduceOp o) override {
    ++calls["allreduce"];
    return inner_->Allreduce(b, c, d, o);
  }
  absl::Status Allgather(const void* s, void* r, int64_t n) override {
    ++calls["allgather"];
    return inner_->Allgather(s, r, n);
  }
  absl::Status Allgatherv(const void* s, void* r,
                          const std::vector<int64_t>& b) override {
    ++calls["allgatherv"];
    return inner_->Allgatherv(s, r, b);
  }
  absl::Status Broadcast(void* b, int64_t n, int root) override {
    ++calls["broadcast"];
    return inner_->Broadcast(b, n, root);
  }
  absl::Status Barrier() override { return inner_->Barrier(); }
  absl::Status BitwiseAnd(uint64_t* w, int64_t n) override {
    ++calls["and"];
    return inner_->BitwiseAnd(w, n);
  }
  absl::Status BitwiseOr(uint64_t* w, int64_t n) override {
    ++calls["or"];
    return inner_->BitwiseOr(w, n);
  }
  std::map<std::string, int> calls;

 private:
  Communicator* inner_;
};

proto::Request Req(int rank, const std::string& name, int64_t n) {
  proto::Request r;
  r.set_rank(rank);
  r.set_name(name);
  r.set_op(proto::ALLREDUCE);
  r.set_reduce_op(proto::SUM);
  r.set_dtype(0);
  r.add_shape(n);
  r.set_device(-1);
  r.set_prescale(1);
  r.set_postscale(1);
  return r;
}

// Runs `cycles` cycles on both ranks; returns each rank's executed names.
std::vector<std::vector<std::string>> Cycles(std::vector<Negotiator*> ranks,
                                             int cycles) {
  std::vector<std::vector<std::string>> executed(ranks.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < ranks.size(); ++r) {
    threads.emplace_back([&, r] {
      for (int c = 0; c < cycles; ++c) {
        auto outcome = ranks[r]->RunCycle(false, absl::OkStatus());
        ASSERT_TRUE(outcome.ok()) << outcome.status();
        for (const auto& resp : outcome->responses) {
          EXPECT_EQ(resp.kind(), proto::Response::EXECUTE) << resp.error();
          executed[r].push_back(resp.names(0));
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  return executed;
}

TEST(NegotiatorTest, SteadyStateIsOneBitwiseAndPerCycle) {
  LoopbackGroup group(2);
  CountingCommunicator c0(group.communicator(0)), c1(group.communicator(1));
  NegotiatorOptions options;
  options.cache_capacity = 128;
  Negotiator n0(&c0, options), n1(&c1, options);

  // First step: through the coordinator.
  for (const char* name : {"a", "b", "c"}) {
    ASSERT_TRUE(n0.Submit(Req(0, name, 4), Clock::now()).ok());
    ASSERT_TRUE(n1.Submit(Req(1, name, 4), Clock::now()).ok());
  }
  auto first = Cycles({&n0, &n1}, 1);
  EXPECT_EQ(first[0], (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(first[1], first[0]);
  EXPECT_EQ(n0.coordinator_rounds(), 1);
  EXPECT_EQ(n0.cache().size(), 3);

  // Later steps: cached; rank 1 is late with 'b'.
  c0.calls.clear();
  c1.calls.clear();
  for (const char* name : {"c", "a", "b"}) {
    ASSERT_TRUE(n0.Submit(Req(0, name, 4), Clock::now()).ok());
  }
  for (const char* name : {"a", "c"}) {
    ASSERT_TRUE(n1.Submit(Req(1, name, 4), Clock::now()).ok());
  }
  auto second = Cycles({&n0, &n1}, 2);
  EXPECT_EQ(second[0], (std::vector<std::string>{"a", "c"}));  // Slot order.
  ASSERT_TRUE(n1.Submit(Req(1, "b", 4), Clock::now()).ok());
  auto third = Cycles({&n0, &n1}, 1);
  EXPECT_EQ(third[1], std::vector<std::string>{"b"});
  EXPECT_EQ(c0.calls, (std::map<std::string, int>{{"and", 3}}));
  EXPECT_EQ(c1.calls, c0.calls);
  EXPECT_EQ(n0.coordinator_rounds(), 1);
  EXPECT_EQ(n0.pending(), 0);
}

TEST(NegotiatorTest, ChangedRequestInvalidatesTheSlotOnEveryRank) {
  LoopbackGroup group(2);
  NegotiatorOptions options;
  options.cache_capacity = 64;
  Negotiator n0(group.communicator(0), options);
  Negotiator n1(group.communicator(1), options);
  ASSERT_TRUE(n0.Submit(Req(0, "w", 4), Clock::now()).ok());
  ASSERT_TRUE(n1.Submit(Req(1, "w", 4), Clock::now()).ok());
  Cycles({&n0, &n1}, 1);
  ASSERT_EQ(n1.cache().Find("w"), 0);
  // Same name, new shape on both ranks: evicted, renegotiated, re-cached.
  ASSERT_TRUE(n0.Submit(Req(0, "w", 8), Clock::now()).ok());
  ASSERT_TRUE(n1.Submit(Req(1, "w", 8), Clock::now()).ok());
  auto out = Cycles({&n0, &n1}, 1);
  EXPECT_EQ(out[0], std::vector<std::string>{"w"});
  EXPECT_EQ(n0.coordinator_rounds(), 2);
  const int64_t slot = n0.cache().Find("w");
  ASSERT_GE(slot, 0);
  EXPECT_EQ(n0.cache().response(slot).shape(0), 8);
  EXPECT_EQ(n1.cache().Find("w"), slot);
}

}  // namespace
}  // namespace terse
