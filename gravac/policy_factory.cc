#include "gravac/policy_factory.h"

#include <algorithm>

#include "gravac/accordion_policy.h"
#include "gravac/gravac_policy.h"
#include "gravac/portfolio_policy.h"
#include "gravac/static_policy.h"

namespace terse {
namespace gravac {

std::unique_ptr<Policy> CreatePolicy(const std::string& policy, double cf,
                                     const Config& config, int world_size) {
  if (policy == "gravac") {
    const double ewma = config.gravac_ewma > 0
                            ? config.gravac_ewma
                            : std::min(1.0, std::max(1, world_size) / 100.0);
    std::string family = config.gravac_compressor;
    if (!IsSingleFamily(config.gravac_candidates, &family)) {
      // The config parser validated the entries: expansion cannot fail.
      absl::StatusOr<std::vector<Choice>> candidates = ExpandCandidates(
          config.gravac_candidates, config.gravac_cf_min, config.gravac_cf_max,
          config.gravac_policy == "exponential");
      PortfolioOptions o;
      if (candidates.ok()) o.candidates = *std::move(candidates);
      o.epsilon = config.gravac_epsilon;
      o.omega = config.gravac_omega;
      o.window = config.gravac_window;
      o.ewma = ewma;
      o.gain_window =
          config.gravac_gain == "window" ? config.gravac_gain_window : 0;
      o.throughput_bound = config.gravac_throughput_guard;
      o.world_size = world_size;
      return std::make_unique<PortfolioPolicy>(o);
    }
    GravacOptions o;
    o.compressor = family;
    o.cf_min = config.gravac_cf_min;
    o.cf_max = config.gravac_cf_max;
    o.epsilon = config.gravac_epsilon;
    o.omega = config.gravac_omega;
    o.window = config.gravac_window;
    o.exponential = config.gravac_policy == "exponential";
    o.ewma = ewma;
    o.throughput_guard = config.gravac_throughput_guard;
    return std::make_unique<GravacPolicy>(o);
  }
  if (policy == "accordion") {
    AccordionOptions o;
    o.compressor = config.accordion_compressor;
    o.low_cf = config.accordion_low_cf;
    o.high_cf = config.accordion_high_cf;
    o.high_rank = config.accordion_high_rank;
    o.low_rank = config.accordion_low_rank;
    o.switch_steps = config.accordion_switch_steps;
    o.threshold = config.accordion_threshold;
    return std::make_unique<AccordionPolicy>(o);
  }
  return std::make_unique<StaticPolicy>(policy, cf);
}

}  // namespace gravac
}  // namespace terse
