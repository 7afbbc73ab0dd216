#include "integration/netns/flow_queue.h"

#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace terse {
namespace {

// A packet of `flow` tagged with `tag` (its length) so the order can be read
// back.
QueuedPacket Tagged(uint64_t flow, size_t tag) {
  QueuedPacket p;
  p.flow = flow;
  p.length = tag;
  return p;
}

std::vector<size_t> PopAll(FlowQueue* q) {
  std::vector<size_t> tags;
  while (!q->empty()) tags.push_back(q->Pop().length);
  return tags;
}

TEST(FlowQueueTest, OneFlowIsFifo) {
  FlowQueue q;
  for (size_t i = 1; i <= 5; ++i) q.Push(Tagged(7, i));
  EXPECT_EQ(q.size(), 5u);
  EXPECT_EQ(PopAll(&q), (std::vector<size_t>{1, 2, 3, 4, 5}));
  EXPECT_TRUE(q.empty());
}

TEST(FlowQueueTest, AnAckGoesAheadOfABacklog) {
  FlowQueue q;
  for (size_t i = 1; i <= 4; ++i) q.Push(Tagged(1, i));  // Bulk data.
  EXPECT_EQ(q.Pop().length, 1u);
  q.Push(Tagged(2, 100));  // An ACK of the flow coming the other way.
  // The ACK's flow had nothing queued: it leaves next, not after 2, 3, 4.
  EXPECT_EQ(PopAll(&q), (std::vector<size_t>{100, 2, 3, 4}));
}

TEST(FlowQueueTest, BackloggedFlowsTakeTurns) {
  FlowQueue q;
  for (size_t i = 1; i <= 3; ++i) q.Push(Tagged(1, i));
  for (size_t i = 11; i <= 13; ++i) q.Push(Tagged(2, i));
  // Both start as new flows (one packet each), then alternate.
  EXPECT_EQ(PopAll(&q), (std::vector<size_t>{1, 11, 2, 12, 3, 13}));
}

TEST(FlowQueueTest, AFlowThatDrainedIsNewAgain) {
  FlowQueue q;
  q.Push(Tagged(1, 1));
  q.Push(Tagged(1, 2));
  q.Push(Tagged(1, 3));
  q.Push(Tagged(2, 20));
  EXPECT_EQ(q.Pop().length, 1u);   // Flow 1, new.
  EXPECT_EQ(q.Pop().length, 20u);  // Flow 2, new; now empty and forgotten.
  q.Push(Tagged(2, 21));           // Flow 2 again: new, ahead of flow 1.
  EXPECT_EQ(PopAll(&q), (std::vector<size_t>{21, 2, 3}));
}

// Against an independent oracle: whatever the interleaving, every packet
// leaves exactly once and each flow's packets leave in push order.
TEST(FlowQueueTest, KeepsEveryPacketAndEachFlowsOrder) {
  std::mt19937 rng(42);
  FlowQueue q;
  std::map<uint64_t, std::vector<size_t>> pushed, popped;
  size_t next_tag = 1;
  size_t in_queue = 0;
  for (int step = 0; step < 20000; ++step) {
    if (in_queue == 0 || rng() % 3 != 0) {
      const uint64_t flow = rng() % 6;
      pushed[flow].push_back(next_tag);
      q.Push(Tagged(flow, next_tag++));
      ++in_queue;
    } else {
      QueuedPacket p = q.Pop();
      popped[p.flow].push_back(p.length);
      --in_queue;
    }
    ASSERT_EQ(q.size(), in_queue);
  }
  while (!q.empty()) {
    QueuedPacket p = q.Pop();
    popped[p.flow].push_back(p.length);
  }
  EXPECT_EQ(popped, pushed);
}

// An IPv4 TCP header: protocol 6, addresses, then ports after IHL x 4 bytes.
std::vector<char> Ipv4(unsigned char protocol, unsigned char src_host,
                       uint16_t src_port, uint16_t dst_port) {
  std::vector<char> p(40, 0);
  p[0] = 0x45;  // Version 4, IHL 5.
  p[9] = static_cast<char>(protocol);
  p[12] = 10, p[15] = static_cast<char>(src_host);
  p[16] = 10, p[19] = 9;
  p[20] = static_cast<char>(src_port >> 8), p[21] = src_port & 0xff;
  p[22] = static_cast<char>(dst_port >> 8), p[23] = dst_port & 0xff;
  return p;
}

TEST(FlowOfTest, TellsFlowsApartByAddressesAndPorts) {
  const std::vector<char> a = Ipv4(6, 1, 5000, 80);
  EXPECT_EQ(FlowOf(a.data(), a.size()), FlowOf(a.data(), a.size()));
  const std::vector<char> other_port = Ipv4(6, 1, 5001, 80);
  const std::vector<char> other_host = Ipv4(6, 2, 5000, 80);
  const std::vector<char> udp = Ipv4(17, 1, 5000, 80);
  EXPECT_NE(FlowOf(a.data(), a.size()),
            FlowOf(other_port.data(), other_port.size()));
  EXPECT_NE(FlowOf(a.data(), a.size()),
            FlowOf(other_host.data(), other_host.size()));
  EXPECT_NE(FlowOf(a.data(), a.size()), FlowOf(udp.data(), udp.size()));
  EXPECT_EQ(FlowOf(a.data(), 10), 0u);  // Too short for a header.
}

}  // namespace
}  // namespace terse
