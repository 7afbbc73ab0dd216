#include "engine/peer_monitor.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/loopback/loopback.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

// Waits (a liveness bound, not a speed assertion) until `done` holds.
template <typename F>
bool Eventually(F done) {
  const Clock::time_point give_up = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < give_up) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return done();
}

std::vector<std::unique_ptr<PeerMonitor>> Ring(int n) {
  std::vector<std::unique_ptr<PeerMonitor>> m;
  std::vector<std::string> addresses;
  for (int r = 0; r < n; ++r) {
    auto made = PeerMonitor::Create(r, n, 0.05);
    EXPECT_TRUE(made.ok()) << made.status();
    m.push_back(std::move(*made));
    addresses.push_back(m.back()->LocalAddresses());
  }
  for (auto& p : m) EXPECT_TRUE(p->SetPeers(addresses).ok());
  return m;
}

TEST(PeerMonitorTest, TheRankThatFallsSilentIsNamedAndOnlyIt) {
  std::vector<std::unique_ptr<PeerMonitor>> m = Ring(3);
  const Clock::time_point start = Clock::now();
  for (auto& p : m) p->Start();
  // Every rank hears every other (heard after start).
  ASSERT_TRUE(Eventually([&] {
    const Clock::time_point now = Clock::now();
    for (int r = 0; r < 3; ++r) {
      for (int q = 0; q < 3; ++q) {
        if (m[r]->SilentFor(q, now) >= SecondsBetween(start, now)) {
          return false;
        }
      }
    }
    return true;
  }));
  // Rank 2's link goes: it sends to nobody.
  m[2]->MuteForTesting(0);
  m[2]->MuteForTesting(1);
  ASSERT_TRUE(Eventually([&] {
    return m[0]->Silent(1.0, Clock::now()) == std::vector<int>{2} &&
           m[1]->Silent(1.0, Clock::now()) == std::vector<int>{2};
  }));
  // Rank 2 itself still hears the others.
  EXPECT_TRUE(m[2]->Silent(1.0, Clock::now()).empty());
  EXPECT_EQ(m[0]->SilentFor(0, Clock::now()), 0.0);
}

TEST(PeerMonitorTest, ConnectExchangesAddressesOverACommunicator) {
  LoopbackGroup group(3);
  std::vector<std::unique_ptr<PeerMonitor>> m(3);
  std::vector<absl::Status> status(3);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r) {
    ranks.emplace_back([&, r] {
      // Rank 2 runs without a monitor: it still takes part.
      auto made = PeerMonitor::Connect(group.communicator(r),
                                       r == 2 ? 0.0 : 0.05);
      status[r] = made.status();
      if (made.ok()) m[r] = std::move(*made);
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(status[r].ok()) << status[r];
  ASSERT_NE(m[0], nullptr);
  ASSERT_NE(m[1], nullptr);
  EXPECT_EQ(m[2], nullptr);
  // Ranks 0 and 1 hear each other; rank 2 sends nothing, so both name it.
  ASSERT_TRUE(Eventually([&] {
    return m[0]->Silent(1.0, Clock::now()) == std::vector<int>{2} &&
           m[1]->Silent(1.0, Clock::now()) == std::vector<int>{2};
  }));
}

TEST(PeerMonitorTest, StrayDatagramsAreIgnored) {
  auto a = PeerMonitor::Create(0, 2, 0.05);
  ASSERT_TRUE(a.ok());
  const std::string mine = (*a)->LocalAddresses();
  // Rank 1 advertises a port nobody listens on.
  ASSERT_TRUE((*a)->SetPeers({mine, "127.0.0.1:9"}).ok());
  (*a)->Start();
  const int port = std::stoi(mine.substr(mine.rfind(':') + 1));
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  auto send = [&](uint32_t magic, uint32_t rank, uint32_t size, size_t n) {
    uint8_t b[32] = {};
    for (int i = 0; i < 4; ++i) {
      b[i] = static_cast<uint8_t>(magic >> (8 * i));
      b[4 + i] = static_cast<uint8_t>(rank >> (8 * i));
      b[8 + i] = static_cast<uint8_t>(size >> (8 * i));
    }
    sendto(fd, b, n, 0, reinterpret_cast<sockaddr*>(&to), sizeof(to));
  };
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const double before = (*a)->SilentFor(1, Clock::now());
  send(0x54485254, 1, 3, 16);   // Wrong job size.
  send(0x54485254, 7, 2, 16);   // Rank out of range.
  send(0x12345678, 1, 2, 16);   // Wrong magic.
  send(0x54485254, 1, 2, 15);   // Short.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_GT((*a)->SilentFor(1, Clock::now()), before);
  send(0x54485254, 1, 2, 16);   // A real heartbeat from rank 1.
  EXPECT_TRUE(Eventually(
      [&] { return (*a)->SilentFor(1, Clock::now()) < before; }));
  close(fd);
}

TEST(PeerMonitorTest, BadArgumentsAreErrorsNamingThem) {
  EXPECT_FALSE(PeerMonitor::Create(2, 2, 1.0).ok());
  EXPECT_FALSE(PeerMonitor::Create(0, 2, 0.0).ok());
  auto m = PeerMonitor::Create(0, 2, 1.0);
  ASSERT_TRUE(m.ok());
  absl::Status wrong_count = (*m)->SetPeers({"127.0.0.1:5"});
  EXPECT_NE(wrong_count.message().find("1 address lists for 2 ranks"),
            std::string::npos)
      << wrong_count;
  absl::Status bad = (*m)->SetPeers({"", "10.0.0.1:80,nonsense"});
  EXPECT_NE(bad.message().find("rank 1's address 'nonsense'"),
            std::string::npos)
      << bad;
  EXPECT_FALSE((*m)->SetPeers({"", "10.0.0.1:0"}).ok());
  EXPECT_FALSE((*m)->SetPeers({"", "10.0.0.1:70000"}).ok());
  EXPECT_TRUE((*m)->SetPeers({"", "10.0.0.1:80,127.0.0.1:81"}).ok());
}

}  // namespace
}  // namespace terse
