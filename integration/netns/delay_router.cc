// delay_router: a switched network with per-message latency between network
// namespaces, for kernels without tc netem (this machine's has none, nor fq,
// so no qdisc can hold a packet back for a fixed time). netns.sh starts it
// for `netns.sh datacentre N`.
//
//   delay_router --netns NS0,NS1,... --subnet 10.79.0 --link_delay_us 25
//                --rate_mbit 2000 [--ifname tdr0] [--rt_priority 10]
//
// In each namespace NSi it opens a TUN device (--ifname, layer 3, no packet
// information header); netns.sh gives NSi's device the address
// SUBNET.(i+1)/24. Every IPv4 packet a host sends comes out of its TUN fd
// here; the router looks up the destination host from the last octet of the
// destination address, asks StarNetwork when the packet arrives (two link
// traversals of --link_delay_us each, serialised at --rate_mbit on the
// sender's uplink and the receiver's downlink) and writes it into the
// destination's TUN fd at that time. Packets to other addresses, and
// non-IPv4 packets, are dropped.
//
// Each host's uplink sends its packets in the order fq_codel would
// (flow_queue.h: a flow with nothing queued first, backlogged flows in
// turn): the router reads every packet as it comes and queues it per host,
// and hands the next one to StarNetwork once that host's uplink is free
// (kSendLeadNs before), so a packet's downlink is booked when it is sent,
// not while it still waits behind others on its uplink.
//
// One thread: epoll on the TUN fds and a timerfd armed for the next
// delivery or the next send of a host with packets waiting (timer slack
// 1 ns). A timer wakes this machine's VM about 24 us
// late (measured), so the timer is armed early by a running estimate of its
// lateness (an average over the last ~16 wake-ups), and packets due within
// kEarlyNs are delivered at once, which keeps the mean delay near the
// model's (a packet leaves at most 8 us early). Its own CPU time comes on top;
// --rt_priority N runs it under SCHED_FIFO N so that busy ranks on the same
// cores delay it less (a NIC and a switch have their own hardware). Prints
// "ready" on stdout once every device exists, runs until SIGTERM or SIGINT,
// then prints its packet counts on stderr.
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "integration/netns/flow_queue.h"
#include "integration/netns/star_network.h"

namespace terse {
namespace {

constexpr size_t kMaxPacket = 65536;
// Lateness samples above this (a descheduled router) are clipped.
constexpr int64_t kMaxLateNs = 200'000;
// A packet due this soon is delivered now: the early-armed timer fires on
// either side of the due time (its lateness varies by about 8 us), and
// waiting for another timer for the rest would cost a whole lateness.
constexpr int64_t kEarlyNs = 8'000;
// A host's next packet is sent once its uplink is due to be free within
// this, so the early-armed timer does not leave the link idle.
constexpr int64_t kSendLeadNs = kEarlyNs;

struct Options {
  std::vector<std::string> netns;
  std::string subnet;  // First three octets, e.g. "10.79.0".
  std::string ifname = "tdr0";
  double link_delay_us = 25;
  double rate_mbit = 0;
  int rt_priority = 0;
};

struct Packet {
  int64_t arrival_ns = 0;
  size_t length = 0;
  std::unique_ptr<char[]> data;
};

volatile sig_atomic_t stop_requested = 0;

void OnSignal(int) { stop_requested = 1; }

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "delay_router: %s\n", what.c_str());
  std::exit(1);
}

int64_t NowNs() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}

Options ParseOptions(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) Die(absl::StrCat("flag ", flag, " needs a value"));
    const std::string value = argv[++i];
    bool ok = true;
    if (flag == "--netns") {
      opt.netns = absl::StrSplit(value, ',', absl::SkipEmpty());
    } else if (flag == "--subnet") {
      opt.subnet = value;
    } else if (flag == "--ifname") {
      opt.ifname = value;
    } else if (flag == "--link_delay_us") {
      ok = absl::SimpleAtod(value, &opt.link_delay_us) &&
           opt.link_delay_us >= 0;
    } else if (flag == "--rate_mbit") {
      ok = absl::SimpleAtod(value, &opt.rate_mbit) && opt.rate_mbit >= 0;
    } else if (flag == "--rt_priority") {
      ok = absl::SimpleAtoi(value, &opt.rt_priority) && opt.rt_priority >= 0 &&
           opt.rt_priority <= 99;
    } else {
      Die(absl::StrCat("unknown flag ", flag));
    }
    if (!ok) Die(absl::StrCat("bad value for ", flag, ": '", value, "'"));
  }
  if (opt.netns.empty()) Die("--netns NS0,NS1,... is required");
  if (opt.netns.size() > 254) Die("at most 254 namespaces");
  std::vector<std::string> octets = absl::StrSplit(opt.subnet, '.');
  if (octets.size() != 3) {
    Die(absl::StrCat("--subnet must be three octets like 10.79.0, got '",
                     opt.subnet, "'"));
  }
  if (opt.ifname.empty() || opt.ifname.size() >= IFNAMSIZ) {
    Die(absl::StrCat("--ifname must have 1 to ", IFNAMSIZ - 1,
                     " characters, got '", opt.ifname, "'"));
  }
  return opt;
}

// Opens a TUN device named `ifname` inside network namespace `netns`
// (/run/netns/NAME) and returns its fd, non-blocking; the calling thread
// returns to `home` (an fd of its own namespace) before returning.
int OpenTunIn(const std::string& netns, const std::string& ifname, int home) {
  const std::string path = "/run/netns/" + netns;
  const int ns = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (ns < 0) Die(absl::StrCat("cannot open ", path, ": ", strerror(errno)));
  if (setns(ns, CLONE_NEWNET) != 0) {
    Die(absl::StrCat("setns ", netns, ": ", strerror(errno)));
  }
  close(ns);
  const int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) Die(absl::StrCat("open /dev/net/tun: ", strerror(errno)));
  ifreq request;
  std::memset(&request, 0, sizeof(request));
  request.ifr_flags = IFF_TUN | IFF_NO_PI;
  std::strncpy(request.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
  if (ioctl(fd, TUNSETIFF, &request) != 0) {
    Die(absl::StrCat("TUNSETIFF ", ifname, " in ", netns, ": ",
                     strerror(errno)));
  }
  if (setns(home, CLONE_NEWNET) != 0) {
    Die(absl::StrCat("setns back: ", strerror(errno)));
  }
  return fd;
}

class Router {
 public:
  Router(const Options& opt, StarNetwork network, std::vector<int> tun)
      : network_(std::move(network)),
        tun_(std::move(tun)),
        queues_(tun_.size()),
        uplinks_(tun_.size()) {
    std::vector<std::string> octets = absl::StrSplit(opt.subnet, '.');
    for (int i = 0; i < 3; ++i) {
      int octet = 0;
      if (!absl::SimpleAtoi(octets[i], &octet) || octet < 0 || octet > 255) {
        Die(absl::StrCat("bad --subnet octet '", octets[i], "'"));
      }
      subnet_[i] = static_cast<unsigned char>(octet);
    }
  }

  void Run() {
    const int epoll = epoll_create1(EPOLL_CLOEXEC);
    timer_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (epoll < 0 || timer_ < 0) Die("epoll_create1/timerfd_create failed");
    for (size_t i = 0; i <= tun_.size(); ++i) {
      epoll_event e;
      std::memset(&e, 0, sizeof(e));
      e.events = EPOLLIN;
      e.data.u64 = i;  // tun_.size() stands for the timer.
      const int fd = i < tun_.size() ? tun_[i] : timer_;
      if (epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &e) != 0) Die("epoll_ctl");
    }
    std::vector<epoll_event> events(tun_.size() + 1);
    while (!stop_requested) {
      SendDue(NowNs() + kSendLeadNs);
      DeliverDue(NowNs() + kEarlyNs);
      ArmTimer();
      const int n = epoll_wait(epoll, events.data(),
                               static_cast<int>(events.size()), -1);
      if (n < 0 && errno != EINTR) Die("epoll_wait");
      for (int k = 0; k < n; ++k) {
        const size_t i = events[k].data.u64;
        if (i == tun_.size()) {
          uint64_t expirations;
          if (read(timer_, &expirations, sizeof(expirations)) > 0 &&
              armed_ns_ > 0) {
            const int64_t late =
                std::clamp<int64_t>(NowNs() - armed_ns_, 0, kMaxLateNs);
            lateness_ns_ += (late - lateness_ns_) / 16;
          }
        } else {
          ReadAll(static_cast<int>(i));
        }
      }
    }
    std::fprintf(stderr,
                 "delay_router: %llu packets delivered, %llu dropped, timer "
                 "lateness %.1f us\n",
                 static_cast<unsigned long long>(delivered_),
                 static_cast<unsigned long long>(dropped_),
                 lateness_ns_ / 1e3);
  }

 private:
  // The host index of an IPv4 destination, or -1.
  int HostOf(const char* packet, size_t length) const {
    if (length < 20 || (static_cast<unsigned char>(packet[0]) >> 4) != 4) {
      return -1;
    }
    const auto* dst = reinterpret_cast<const unsigned char*>(packet + 16);
    if (dst[0] != subnet_[0] || dst[1] != subnet_[1] || dst[2] != subnet_[2]) {
      return -1;
    }
    const int host = dst[3] - 1;
    return host >= 0 && host < static_cast<int>(tun_.size()) ? host : -1;
  }

  std::unique_ptr<char[]> Buffer() {
    if (free_.empty()) return std::make_unique<char[]>(kMaxPacket);
    std::unique_ptr<char[]> b = std::move(free_.back());
    free_.pop_back();
    return b;
  }

  // Queues every packet host `src` has sent on its uplink.
  void ReadAll(int src) {
    for (;;) {
      std::unique_ptr<char[]> buffer = Buffer();
      const ssize_t got = read(tun_[src], buffer.get(), kMaxPacket);
      if (got <= 0) {
        free_.push_back(std::move(buffer));
        if (got < 0 && errno != EAGAIN && errno != EINTR) Die("read tun");
        return;
      }
      const int dst = HostOf(buffer.get(), static_cast<size_t>(got));
      if (dst < 0 || dst == src) {
        ++dropped_;
        free_.push_back(std::move(buffer));
        continue;
      }
      QueuedPacket p;
      p.flow = FlowOf(buffer.get(), static_cast<size_t>(got));
      p.dst = dst;
      p.length = static_cast<size_t>(got);
      p.data = std::move(buffer);
      uplinks_[src].Push(std::move(p));
    }
  }

  // Sends the next packets of every host whose uplink is free by `until`.
  void SendDue(int64_t until) {
    for (size_t src = 0; src < uplinks_.size(); ++src) {
      FlowQueue& uplink = uplinks_[src];
      while (!uplink.empty() &&
             network_.UplinkFreeNs(static_cast<int>(src)) <= until) {
        QueuedPacket q = uplink.Pop();
        Packet p;
        p.arrival_ns =
            network_.Deliver(static_cast<int>(src), q.dst,
                             static_cast<int64_t>(q.length), NowNs());
        p.length = q.length;
        p.data = std::move(q.data);
        queues_[q.dst].push_back(std::move(p));
      }
    }
  }

  void DeliverDue(int64_t now) {
    for (size_t dst = 0; dst < queues_.size(); ++dst) {
      std::deque<Packet>& q = queues_[dst];
      while (!q.empty() && q.front().arrival_ns <= now) {
        Packet& p = q.front();
        if (write(tun_[dst], p.data.get(), p.length) < 0) {
          ++dropped_;  // The receiver's queue is full: as a NIC would drop.
        } else {
          ++delivered_;
        }
        free_.push_back(std::move(p.data));
        q.pop_front();
      }
    }
  }

  void ArmTimer() {
    int64_t next = -1;
    for (const std::deque<Packet>& q : queues_) {
      if (!q.empty() && (next < 0 || q.front().arrival_ns < next)) {
        next = q.front().arrival_ns;
      }
    }
    for (size_t src = 0; src < uplinks_.size(); ++src) {
      const int64_t send =
          network_.UplinkFreeNs(static_cast<int>(src)) - kSendLeadNs;
      if (!uplinks_[src].empty() && (next < 0 || send < next)) next = send;
    }
    itimerspec spec;
    std::memset(&spec, 0, sizeof(spec));
    armed_ns_ = 0;
    if (next >= 0) {
      // Early by the timer's usual lateness; 0 would disarm it.
      armed_ns_ = std::max<int64_t>(next - lateness_ns_, 1);
      spec.it_value.tv_sec = armed_ns_ / 1'000'000'000;
      spec.it_value.tv_nsec = armed_ns_ % 1'000'000'000;
    }
    timerfd_settime(timer_, TFD_TIMER_ABSTIME, &spec, nullptr);
  }

  StarNetwork network_;
  std::vector<int> tun_;
  std::vector<std::deque<Packet>> queues_;  // Per destination, by arrival.
  // Per host: the packets waiting for its uplink.
  std::vector<FlowQueue> uplinks_;
  std::vector<std::unique_ptr<char[]>> free_;
  unsigned char subnet_[3] = {0, 0, 0};
  int timer_ = -1;
  int64_t armed_ns_ = 0;     // When the timer is set to fire; 0: disarmed.
  int64_t lateness_ns_ = 0;  // Running mean of how late it fires.
  uint64_t delivered_ = 0;
  uint64_t dropped_ = 0;
};

}  // namespace
}  // namespace terse

int main(int argc, char** argv) {
  using namespace terse;
  const Options opt = ParseOptions(argc, argv);
  absl::StatusOr<StarNetwork> network = StarNetwork::Create(
      static_cast<int>(opt.netns.size()), opt.rate_mbit * 1e6,
      static_cast<int64_t>(opt.link_delay_us * 1000));
  if (!network.ok()) Die(network.status().ToString());
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  if (opt.rt_priority > 0) {
    sched_param param;
    param.sched_priority = opt.rt_priority;
    if (sched_setscheduler(0, SCHED_FIFO, &param) != 0) {
      Die(absl::StrCat("SCHED_FIFO ", opt.rt_priority, ": ", strerror(errno)));
    }
  }
  const int home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (home < 0) Die("cannot open /proc/self/ns/net");
  std::vector<int> tun;
  for (const std::string& ns : opt.netns) {
    tun.push_back(OpenTunIn(ns, opt.ifname, home));
  }
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = OnSignal;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  std::printf("ready\n");
  std::fflush(stdout);
  Router router(opt, *std::move(network), std::move(tun));
  router.Run();
  return 0;
}
