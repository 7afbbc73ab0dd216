// Builds the policy a bucket or tensor gets from the configuration:
// TERSE_COMPRESSION (or the first matching TERSE_COMPRESSION_RULES entry)
// = gravac | accordion | <compressor>, with the TERSE_GRAVAC_* and
// TERSE_ACCORDION_* knobs. Accordion switches what
// TERSE_ACCORDION_COMPRESSOR names: PowerSGD ranks (TERSE_ACCORDION_HIGH_RANK
// in critical regimes, TERSE_ACCORDION_LOW_RANK otherwise; the default, as
// Accordion's paper runs it) or a sparsifier's CFs (TERSE_ACCORDION_LOW_CF /
// TERSE_ACCORDION_HIGH_CF).
#ifndef TERSE_GRAVAC_POLICY_FACTORY_H_
#define TERSE_GRAVAC_POLICY_FACTORY_H_

#include <memory>
#include <string>

#include "common/config.h"
#include "gravac/policy.h"

namespace terse {
namespace gravac {

// `policy` is a TERSE_COMPRESSION word; `cf` the static CF (TERSE_CF or a
// rule's). `world_size` sets the default EWMA factor (world_size / 100,
// capped at 1).
std::unique_ptr<Policy> CreatePolicy(const std::string& policy, double cf,
                                     const Config& config, int world_size);

// Which word applies to a tensor (TERSE_COMPRESSION_RULES, then
// TERSE_COMPRESSION) is compressors/registry.h's ChooseCompression.

}  // namespace gravac
}  // namespace terse

#endif  // TERSE_GRAVAC_POLICY_FACTORY_H_
