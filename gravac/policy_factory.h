// Builds the policy a bucket or tensor gets from the configuration:
// TERSE_COMPRESSION (or the first matching TERSE_COMPRESSION_RULES entry)
// = gravac | accordion | <compressor>, with the TERSE_GRAVAC_* and
// TERSE_ACCORDION_* knobs. The sparsifier under Accordion is
// TERSE_GRAVAC_COMPRESSOR as well (one knob for "the sparsifier the adaptive
// policies use").
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
