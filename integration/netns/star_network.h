// StarNetwork: the timing of a switched network of N hosts, each joined to
// one switch by a full-duplex link of a fixed rate and a fixed propagation
// delay per traversal, store and forward at the switch. delay_router.cc uses
// it to decide when each packet it carries reaches its destination.
//
// A packet of B bytes from host s to host d sent at time t:
//   leaves s:       u = max(t, uplink_free[s]) + B / rate
//   at the switch:  u + delay
//   leaves switch:  v = max(u + delay, downlink_free[d]) + B / rate
//   arrives at d:   v + delay
// so an idle network delivers it after 2 x (delay + B / rate), and packets
// queue behind earlier ones on the sender's uplink and on the receiver's
// downlink. Arrival times at one destination never decrease, so a FIFO per
// destination holds them in delivery order.
//
// Not thread-safe: one thread owns an instance.
#ifndef TERSE_INTEGRATION_NETNS_STAR_NETWORK_H_
#define TERSE_INTEGRATION_NETNS_STAR_NETWORK_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace terse {

class StarNetwork {
 public:
  // hosts >= 1; rate_bits_per_s > 0, or 0 for links of unlimited rate;
  // link_delay_ns >= 0 per traversal of one link (two per packet).
  // InvalidArgument names the bad value otherwise.
  static absl::StatusOr<StarNetwork> Create(int hosts, double rate_bits_per_s,
                                            int64_t link_delay_ns);

  // The time (ns, same clock as now_ns) at which a packet of `bytes` that
  // host `src` sends to host `dst` at now_ns arrives there; books the links'
  // time. src and dst must be in [0, hosts) and differ (checked by the
  // caller, which knows where the packet came from).
  int64_t Deliver(int src, int dst, int64_t bytes, int64_t now_ns);

  // When host `src`'s uplink has finished sending every packet booked so
  // far (ns, same clock as Deliver's now_ns); in the past once it is idle.
  int64_t UplinkFreeNs(int src) const { return uplink_free_[src]; }

  int hosts() const { return static_cast<int>(uplink_free_.size()); }

 private:
  StarNetwork(int hosts, double ns_per_byte, int64_t link_delay_ns);

  double ns_per_byte_;
  int64_t link_delay_ns_;
  std::vector<int64_t> uplink_free_;    // When each host's uplink is idle.
  std::vector<int64_t> downlink_free_;  // When each host's downlink is idle.
};

}  // namespace terse

#endif  // TERSE_INTEGRATION_NETNS_STAR_NETWORK_H_
