// FlowQueue: one host's packets waiting for its uplink in delay_router, in
// the order a Linux fq_codel qdisc (the default qdisc of systemd-based
// distributions) sends them. This machine's kernel has no fq_codel, so the
// router plays that part for the hosts it joins.
//
// The two rules of fq_codel kept here, at a quantum of one packet:
//  - a packet of a flow with nothing queued (a "new" flow: a TCP ACK coming
//    back, a small request) goes ahead of the flows that have a backlog;
//  - flows with a backlog take turns, one packet each.
// Packets of one flow always leave in the order they came. CoDel's dropping
// is not modelled: nothing is ever dropped here.
//
// Why it matters: without it, a host that sends at line rate holds the ACKs
// of the flow it receives behind its whole send backlog (milliseconds), and
// a link loaded both ways carried 600-780 Mbit/s one way instead of 1,000.
//
// Not thread-safe: one thread owns an instance.
#ifndef TERSE_INTEGRATION_NETNS_FLOW_QUEUE_H_
#define TERSE_INTEGRATION_NETNS_FLOW_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>

#include "absl/container/flat_hash_map.h"

namespace terse {

struct QueuedPacket {
  uint64_t flow = 0;  // Same value for every packet of one flow.
  int dst = -1;       // Destination host.
  size_t length = 0;
  std::unique_ptr<char[]> data;
};

// A flow's key from an IPv4 packet: protocol, addresses and, for TCP and
// UDP, ports (a hash; 0 for anything too short to hold them).
uint64_t FlowOf(const char* packet, size_t length);

class FlowQueue {
 public:
  void Push(QueuedPacket packet);
  // The next packet to send. Requires !empty().
  QueuedPacket Pop();
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }

 private:
  absl::flat_hash_map<uint64_t, std::deque<QueuedPacket>> flows_;
  std::deque<uint64_t> new_flows_;  // Served first.
  std::deque<uint64_t> old_flows_;  // Round robin.
  size_t size_ = 0;
};

}  // namespace terse

#endif  // TERSE_INTEGRATION_NETNS_FLOW_QUEUE_H_
