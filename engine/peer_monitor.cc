#include "engine/peer_monitor.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status.h"

namespace terse {
namespace {

constexpr uint32_t kMagic = 0x54485254;  // "TRHT"
constexpr size_t kDatagram = 16;

void Put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint32_t Get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PeerMonitor>> PeerMonitor::Create(
    int rank, int size, double period_seconds) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "peer monitor: rank ", rank, " is not in [0, size ", size, ")"));
  }
  if (!(period_seconds > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "peer monitor: period ", period_seconds, " s must be > 0"));
  }
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("peer monitor: socket(): ", std::strerror(errno)));
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string why = std::strerror(errno);
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("peer monitor: bind(): ", why));
  }
  return std::unique_ptr<PeerMonitor>(new PeerMonitor(
      rank, size, period_seconds, fd, ntohs(addr.sin_port)));
}

absl::StatusOr<std::unique_ptr<PeerMonitor>> PeerMonitor::Connect(
    Communicator* comm, double period_seconds) {
  const int size = comm->size();
  absl::StatusOr<std::unique_ptr<PeerMonitor>> made =
      period_seconds > 0
          ? Create(comm->rank(), size, period_seconds)
          : absl::StatusOr<std::unique_ptr<PeerMonitor>>(nullptr);
  const std::string mine =
      made.ok() && *made != nullptr ? (*made)->LocalAddresses() : "";
  int64_t len = static_cast<int64_t>(mine.size());
  std::vector<int64_t> lens(size);
  TERSE_RETURN_IF_ERROR(comm->Allgather(&len, lens.data(), sizeof(len)));
  std::vector<int64_t> offsets(size + 1, 0);
  for (int r = 0; r < size; ++r) {
    if (lens[r] < 0 || lens[r] > (1 << 16)) {
      return absl::DataLossError(absl::StrCat(
          "peer monitor: rank ", r, " sent an address list of ", lens[r],
          " bytes"));
    }
    offsets[r + 1] = offsets[r] + lens[r];
  }
  std::string all(offsets[size], '\0');
  TERSE_RETURN_IF_ERROR(
      comm->AllgathervAgreedSizes(mine.data(), all.data(), lens));
  if (!made.ok() || *made == nullptr) return made;
  std::vector<std::string> addresses(size);
  for (int r = 0; r < size; ++r) {
    addresses[r] = all.substr(offsets[r], lens[r]);
  }
  TERSE_RETURN_IF_ERROR((*made)->SetPeers(addresses));
  (*made)->Start();
  return made;
}

PeerMonitor::PeerMonitor(int rank, int size, double period_seconds, int fd,
                         int port)
    : rank_(rank),
      size_(size),
      period_(period_seconds),
      fd_(fd),
      port_(port),
      peers_(size),
      heard_(size, Clock::now()),
      muted_(size, false) {}

PeerMonitor::~PeerMonitor() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  close(fd_);
}

std::string PeerMonitor::LocalAddresses() const {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
      if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) {
        continue;
      }
      char text[INET_ADDRSTRLEN];
      const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
      if (inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text)) != nullptr) {
        out.push_back(absl::StrCat(text, ":", port_));
      }
    }
    freeifaddrs(list);
  }
  if (out.empty()) out.push_back(absl::StrCat("127.0.0.1:", port_));
  return absl::StrJoin(out, ",");
}

absl::Status PeerMonitor::SetPeers(const std::vector<std::string>& addresses) {
  if (static_cast<int>(addresses.size()) != size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("peer monitor: ", addresses.size(),
                     " address lists for ", size_, " ranks"));
  }
  std::vector<std::vector<Endpoint>> peers(size_);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    for (absl::string_view item :
         absl::StrSplit(addresses[r], ',', absl::SkipEmpty())) {
      const size_t colon = item.rfind(':');
      Endpoint e;
      in_addr ip{};
      uint32_t port = 0;
      const std::string host(item.substr(0, colon));
      if (colon == absl::string_view::npos ||
          inet_pton(AF_INET, host.c_str(), &ip) != 1 ||
          !absl::SimpleAtoi(item.substr(colon + 1), &port) || port == 0 ||
          port > 65535) {
        return absl::InvalidArgumentError(
            absl::StrCat("peer monitor: rank ", r, "'s address '", item,
                         "' is not ip:port"));
      }
      e.ip = ip.s_addr;
      e.port = htons(static_cast<uint16_t>(port));
      peers[r].push_back(e);
    }
  }
  peers_ = std::move(peers);
  return absl::OkStatus();
}

void PeerMonitor::Start() {
  {
    absl::MutexLock lock(&mu_);
    std::fill(heard_.begin(), heard_.end(), Clock::now());
  }
  thread_ = std::thread([this] { Run(); });
}

void PeerMonitor::Run() {
  uint8_t beat[kDatagram] = {};
  Put32(beat, kMagic);
  Put32(beat + 4, static_cast<uint32_t>(rank_));
  Put32(beat + 8, static_cast<uint32_t>(size_));
  const auto period = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(period_));
  Clock::time_point next_send = Clock::now();
  while (!stop_) {
    const Clock::time_point now = Clock::now();
    if (now >= next_send) {
      std::vector<bool> muted;
      {
        absl::MutexLock lock(&mu_);
        muted = muted_;
      }
      for (int r = 0; r < size_; ++r) {
        if (r == rank_ || muted[r]) continue;
        for (const Endpoint& e : peers_[r]) {
          sockaddr_in to{};
          to.sin_family = AF_INET;
          to.sin_addr.s_addr = e.ip;
          to.sin_port = e.port;
          // Best effort: a full buffer or an unreachable network is what
          // this class exists to notice, not an error.
          sendto(fd_, beat, sizeof(beat), MSG_DONTWAIT,
                 reinterpret_cast<const sockaddr*>(&to), sizeof(to));
        }
      }
      next_send = now + period;
    }
    // Wait for datagrams until the next send, but at most 100 ms so that
    // stop_ is seen promptly.
    const auto wait = std::min<Clock::duration>(
        next_send - Clock::now(), std::chrono::milliseconds(100));
    pollfd p{fd_, POLLIN, 0};
    const int ms = static_cast<int>(
        std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(
                                 wait).count()));
    if (poll(&p, 1, ms) <= 0) continue;
    uint8_t buf[64];
    while (true) {
      const ssize_t n = recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
      if (n < 0) break;
      if (n != static_cast<ssize_t>(kDatagram) || Get32(buf) != kMagic ||
          Get32(buf + 8) != static_cast<uint32_t>(size_)) {
        continue;
      }
      const uint32_t from = Get32(buf + 4);
      if (from >= static_cast<uint32_t>(size_)) continue;
      absl::MutexLock lock(&mu_);
      heard_[from] = Clock::now();
    }
  }
}

double PeerMonitor::SilentFor(int peer, Clock::time_point now) const {
  if (peer == rank_ || peer < 0 || peer >= size_) return 0;
  absl::MutexLock lock(&mu_);
  return std::max(0.0, SecondsBetween(heard_[peer], now));
}

std::vector<int> PeerMonitor::Silent(double seconds,
                                     Clock::time_point now) const {
  std::vector<int> out;
  for (int r = 0; r < size_; ++r) {
    if (r != rank_ && SilentFor(r, now) > seconds) out.push_back(r);
  }
  return out;
}

void PeerMonitor::MuteForTesting(int peer) {
  absl::MutexLock lock(&mu_);
  if (peer >= 0 && peer < size_) muted_[peer] = true;
}

}  // namespace terse
