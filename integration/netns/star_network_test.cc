#include "integration/netns/star_network.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace terse {
namespace {

// 8 Gbit/s: one byte takes exactly 1 ns on a link.
constexpr double kOneBytePerNs = 8e9;

TEST(StarNetworkTest, IdlePacketPaysTwoLinksEachWay) {
  StarNetwork net = *StarNetwork::Create(4, kOneBytePerNs, 25'000);
  // 2 x (25 us + 1000 B x 1 ns/B), from the closed form.
  EXPECT_EQ(net.Deliver(0, 1, 1000, 5'000), 5'000 + 2 * (25'000 + 1000));
}

TEST(StarNetworkTest, UnlimitedRateIsPureDelay) {
  StarNetwork net = *StarNetwork::Create(2, 0, 30'000);
  EXPECT_EQ(net.Deliver(0, 1, 65'000, 100), 100 + 60'000);
  // A second packet at the same instant is not held behind the first.
  EXPECT_EQ(net.Deliver(0, 1, 65'000, 100), 100 + 60'000);
}

TEST(StarNetworkTest, BackToBackPacketsQueueOnTheUplink) {
  StarNetwork net = *StarNetwork::Create(3, kOneBytePerNs, 1'000);
  const int64_t first = net.Deliver(0, 1, 500, 0);
  const int64_t second = net.Deliver(0, 2, 500, 0);  // Another destination.
  EXPECT_EQ(first, 2 * (1'000 + 500));
  // Waits 500 ns for the uplink, then crosses an idle downlink.
  EXPECT_EQ(second, 500 + 2 * (1'000 + 500));
  // The uplink has sent both 500-byte packets by 1000 ns; host 1's is idle.
  EXPECT_EQ(net.UplinkFreeNs(0), 1'000);
  EXPECT_EQ(net.UplinkFreeNs(1), 0);
}

TEST(StarNetworkTest, TwoSendersShareTheReceiversDownlink) {
  StarNetwork net = *StarNetwork::Create(3, kOneBytePerNs, 1'000);
  const int64_t a = net.Deliver(0, 2, 4'000, 0);
  const int64_t b = net.Deliver(1, 2, 4'000, 0);
  EXPECT_EQ(a, 2 * (1'000 + 4'000));
  // Reaches the switch with a, then waits for a's 4000 ns on the downlink.
  EXPECT_EQ(b, a + 4'000);
}

TEST(StarNetworkTest, ArrivalsAtOneDestinationNeverDecrease) {
  StarNetwork net = *StarNetwork::Create(4, 1e9, 20'000);
  int64_t last = 0;
  int64_t now = 0;
  for (int i = 0; i < 1000; ++i) {
    const int src = 1 + i % 3;
    const int64_t bytes = 64 + (i * 7919) % 65'000;
    const int64_t at = net.Deliver(src, 0, bytes, now);
    EXPECT_GE(at, last) << "packet " << i;
    last = at;
    now += (i * 104'729) % 9'000;
  }
}

TEST(StarNetworkTest, LongRunThroughputIsTheRate) {
  // One sender saturating its uplink: n packets of B bytes arrive over
  // n x B / rate, whatever the delay (conservation of link time).
  StarNetwork net = *StarNetwork::Create(2, kOneBytePerNs, 50'000);
  int64_t at = 0;
  for (int i = 0; i < 10'000; ++i) at = net.Deliver(0, 1, 9'000, 0);
  EXPECT_EQ(at, 10'000LL * 9'000 + 9'000 + 2 * 50'000);
}

TEST(StarNetworkTest, RejectsBadParameters) {
  EXPECT_FALSE(StarNetwork::Create(0, 1e9, 0).ok());
  EXPECT_FALSE(StarNetwork::Create(2, -1, 0).ok());
  EXPECT_FALSE(StarNetwork::Create(2, 1e9, -5).ok());
  absl::StatusOr<StarNetwork> bad = StarNetwork::Create(2, 1e9, -5);
  EXPECT_NE(bad.status().message().find("link_delay_ns"), std::string::npos);
}

}  // namespace
}  // namespace terse
