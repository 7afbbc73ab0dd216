#include "integration/netns/flow_queue.h"

#include <cstring>
#include <utility>

#include "absl/hash/hash.h"

namespace terse {

uint64_t FlowOf(const char* packet, size_t length) {
  const auto* p = reinterpret_cast<const unsigned char*>(packet);
  if (length < 20) return 0;
  const size_t header = static_cast<size_t>(p[0] & 0x0f) * 4;
  const unsigned char protocol = p[9];
  uint32_t src = 0;
  uint32_t dst = 0;
  std::memcpy(&src, p + 12, 4);
  std::memcpy(&dst, p + 16, 4);
  uint32_t ports = 0;
  constexpr unsigned char kTcp = 6;
  constexpr unsigned char kUdp = 17;
  if ((protocol == kTcp || protocol == kUdp) && length >= header + 4) {
    std::memcpy(&ports, p + header, 4);
  }
  return absl::HashOf(protocol, src, dst, ports);
}

void FlowQueue::Push(QueuedPacket packet) {
  const uint64_t flow = packet.flow;
  std::deque<QueuedPacket>& queue = flows_[flow];
  // A flow with nothing queued is in neither list (Pop drops a flow from its
  // list when it empties), so it starts again as a new flow.
  if (queue.empty()) new_flows_.push_back(flow);
  queue.push_back(std::move(packet));
  ++size_;
}

QueuedPacket FlowQueue::Pop() {
  std::deque<uint64_t>& list = new_flows_.empty() ? old_flows_ : new_flows_;
  const uint64_t flow = list.front();
  list.pop_front();
  auto it = flows_.find(flow);
  QueuedPacket packet = std::move(it->second.front());
  it->second.pop_front();
  --size_;
  if (it->second.empty()) {
    flows_.erase(it);
  } else {
    old_flows_.push_back(flow);  // Its turn comes again after the others'.
  }
  return packet;
}

}  // namespace terse
