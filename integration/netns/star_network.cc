#include "integration/netns/star_network.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace terse {

absl::StatusOr<StarNetwork> StarNetwork::Create(int hosts,
                                                double rate_bits_per_s,
                                                int64_t link_delay_ns) {
  if (hosts < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("hosts must be at least 1, got ", hosts));
  }
  if (!(rate_bits_per_s >= 0) || std::isinf(rate_bits_per_s)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rate_bits_per_s must be finite and >= 0 (0: unlimited), "
                     "got ", rate_bits_per_s));
  }
  if (link_delay_ns < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("link_delay_ns must be >= 0, got ", link_delay_ns));
  }
  const double ns_per_byte = rate_bits_per_s > 0 ? 8e9 / rate_bits_per_s : 0;
  return StarNetwork(hosts, ns_per_byte, link_delay_ns);
}

StarNetwork::StarNetwork(int hosts, double ns_per_byte, int64_t link_delay_ns)
    : ns_per_byte_(ns_per_byte),
      link_delay_ns_(link_delay_ns),
      uplink_free_(hosts, 0),
      downlink_free_(hosts, 0) {}

int64_t StarNetwork::Deliver(int src, int dst, int64_t bytes, int64_t now_ns) {
  const int64_t serialise = std::llround(bytes * ns_per_byte_);
  int64_t& up = uplink_free_[src];
  up = std::max(now_ns, up) + serialise;
  int64_t& down = downlink_free_[dst];
  down = std::max(up + link_delay_ns_, down) + serialise;
  return down + link_delay_ns_;
}

}  // namespace terse
