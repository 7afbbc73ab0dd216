// Fuzz target: the TERSE_* configuration parser (Config::FromMap) with
// fuzzed names and values, and the per-tensor rule lookup
// (ChooseCompression / GlobMatch) on the rules it accepted.
//
// Input: text lines "NAME=VALUE" (split at the first '='; a line without '='
// is a name with an empty value; a later line with the same name wins).
// Lines "@NAME" are tensor names to look up, not variables.
//
// Invariants:
//   - FromMap never crashes; an error is InvalidArgument and names a TERSE_
//     variable;
//   - an accepted Config survives a round trip: writing every field back as
//     its variable (exact decimal) and parsing again gives the same fields;
//   - Describe() lists every knob;
//   - ChooseCompression picks the first rule whose glob matches (checked
//     against a memoised recursive matcher), else TERSE_COMPRESSION at
//     TERSE_CF.
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "common/config.h"
#include "compressors/registry.h"
#include "tests/fuzz/fuzz_target.h"

namespace terse {
namespace fuzz {
namespace {

std::string Exact(double v) { return absl::StrFormat("%.17g", v); }

// Every field of the Config as the variables that set it.
std::map<std::string, std::string> ToVariables(const Config& c) {
  std::string rules;
  for (const CompressionRule& r : c.compression_rules) {
    if (!rules.empty()) rules += ";";
    absl::StrAppend(&rules, r.glob, "=", r.policy);
    if (r.cf > 0) absl::StrAppend(&rules, ":", Exact(r.cf));
  }
  return {
      {"TERSE_FUSION_THRESHOLD", absl::StrCat(c.fusion_threshold_bytes)},
      {"TERSE_CYCLE_TIME_MS", Exact(c.cycle_time_ms)},
      {"TERSE_CACHE_CAPACITY", absl::StrCat(c.cache_capacity)},
      {"TERSE_BACKEND", c.backend},
      {"TERSE_COMPRESSION", c.compression},
      {"TERSE_CF", Exact(c.cf)},
      {"TERSE_COMPRESSION_RULES", rules},
      {"TERSE_MIN_COMPRESS_BYTES", absl::StrCat(c.min_compress_bytes)},
      {"TERSE_GRAVAC_COMPRESSOR", c.gravac_compressor},
      {"TERSE_GRAVAC_CF_MIN", Exact(c.gravac_cf_min)},
      {"TERSE_GRAVAC_CF_MAX", Exact(c.gravac_cf_max)},
      {"TERSE_GRAVAC_EPSILON", Exact(c.gravac_epsilon)},
      {"TERSE_GRAVAC_OMEGA", Exact(c.gravac_omega)},
      {"TERSE_GRAVAC_WINDOW", absl::StrCat(c.gravac_window)},
      {"TERSE_GRAVAC_POLICY", c.gravac_policy},
      {"TERSE_GRAVAC_SCOPE", c.gravac_scope},
      {"TERSE_GRAVAC_EWMA",
       c.gravac_ewma == 0 ? std::string("auto") : Exact(c.gravac_ewma)},
      {"TERSE_ACCORDION_LOW_CF", Exact(c.accordion_low_cf)},
      {"TERSE_ACCORDION_HIGH_CF", Exact(c.accordion_high_cf)},
      {"TERSE_ACCORDION_SWITCH_STEPS", absl::StrCat(c.accordion_switch_steps)},
      {"TERSE_ACCORDION_THRESHOLD", Exact(c.accordion_threshold)},
      {"TERSE_POWERSGD_RANK", absl::StrCat(c.powersgd_rank)},
      {"TERSE_POWERSGD_START_STEP", absl::StrCat(c.powersgd_start_step)},
      {"TERSE_TIMELINE", c.timeline_path},
      {"TERSE_STALL_CHECK_SECONDS", Exact(c.stall_check_seconds)},
      {"TERSE_STALL_SHUTDOWN_SECONDS", Exact(c.stall_shutdown_seconds)},
      {"TERSE_FORGET_AFTER_STEPS", absl::StrCat(c.forget_after_steps)},
      {"TERSE_GPU_OPERATIONS", c.gpu_operations},
      {"TERSE_DYNAMIC_PROCESS_SETS", c.dynamic_process_sets ? "on" : "off"},
      {"TERSE_LOG_LEVEL", c.log_level},
      {"TERSE_SEED", absl::StrCat(c.seed)},
  };
}

bool SameRules(const std::vector<CompressionRule>& a,
               const std::vector<CompressionRule>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].glob != b[i].glob || a[i].policy != b[i].policy ||
        a[i].cf != b[i].cf) {
      return false;
    }
  }
  return true;
}

bool SameFields(const Config& a, const Config& b) {
  return a.fusion_threshold_bytes == b.fusion_threshold_bytes &&
         a.cycle_time_ms == b.cycle_time_ms &&
         a.cache_capacity == b.cache_capacity && a.backend == b.backend &&
         a.compression == b.compression && a.cf == b.cf &&
         SameRules(a.compression_rules, b.compression_rules) &&
         a.min_compress_bytes == b.min_compress_bytes &&
         a.gravac_compressor == b.gravac_compressor &&
         a.gravac_cf_min == b.gravac_cf_min &&
         a.gravac_cf_max == b.gravac_cf_max &&
         a.gravac_epsilon == b.gravac_epsilon &&
         a.forget_after_steps == b.forget_after_steps &&
         a.gpu_operations == b.gpu_operations &&
         a.dynamic_process_sets == b.dynamic_process_sets &&
         a.gravac_omega == b.gravac_omega &&
         a.gravac_window == b.gravac_window &&
         a.gravac_policy == b.gravac_policy &&
         a.gravac_scope == b.gravac_scope && a.gravac_ewma == b.gravac_ewma &&
         a.accordion_low_cf == b.accordion_low_cf &&
         a.accordion_high_cf == b.accordion_high_cf &&
         a.accordion_switch_steps == b.accordion_switch_steps &&
         a.accordion_threshold == b.accordion_threshold &&
         a.powersgd_rank == b.powersgd_rank &&
         a.powersgd_start_step == b.powersgd_start_step &&
         a.timeline_path == b.timeline_path &&
         a.stall_check_seconds == b.stall_check_seconds &&
         a.stall_shutdown_seconds == b.stall_shutdown_seconds &&
         a.log_level == b.log_level && a.seed == b.seed;
}

// Reference glob matcher: the textbook recursion, memoised over
// (glob position, name position). 0 unknown, 1 no, 2 yes.
class OracleGlob {
 public:
  OracleGlob(absl::string_view glob, absl::string_view name)
      : glob_(glob),
        name_(name),
        memo_((glob.size() + 1) * (name.size() + 1)) {}
  bool Match() { return At(0, 0); }

 private:
  bool At(size_t g, size_t n) {
    char& m = memo_[g * (name_.size() + 1) + n];
    if (m != 0) return m == 2;
    bool r;
    if (g == glob_.size()) {
      r = n == name_.size();
    } else if (glob_[g] == '*') {
      r = At(g + 1, n) || (n < name_.size() && At(g, n + 1));
    } else {
      r = n < name_.size() && (glob_[g] == '?' || glob_[g] == name_[n]) &&
          At(g + 1, n + 1);
    }
    m = r ? 2 : 1;
    return r;
  }

  absl::string_view glob_, name_;
  std::vector<char> memo_;
};

void CheckChoice(const Config& c, const std::string& tensor) {
  const CompressionChoice got = ChooseCompression(tensor, c);
  CompressionChoice want;
  want.name = c.compression;
  want.cf = c.cf;
  for (size_t i = 0; i < c.compression_rules.size(); ++i) {
    const CompressionRule& r = c.compression_rules[i];
    // The recursion depth is |glob| + |name|; longer inputs only exercise
    // GlobMatch (no oracle).
    if (r.glob.size() + tensor.size() > 1000) return;
    if (OracleGlob(r.glob, tensor).Match()) {
      want.name = r.policy;
      want.cf = r.cf > 0 ? r.cf : c.cf;
      want.rule = static_cast<int>(i);
      break;
    }
  }
  if (got.name != want.name || got.cf != want.cf || got.rule != want.rule ||
      got.is_policy != IsPolicyName(want.name)) {
    FuzzFail(absl::StrCat("ChooseCompression('", tensor, "') gave rule ",
                          got.rule, " ", got.name, ", expected rule ",
                          want.rule, " ", want.name));
  }
}

}  // namespace
}  // namespace fuzz
}  // namespace terse

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace terse;        // NOLINT(build/namespaces)
  using namespace terse::fuzz;  // NOLINT(build/namespaces)
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  std::map<std::string, std::string> variables;
  std::vector<std::string> tensors;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == absl::string_view::npos) end = text.size();
    const absl::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (absl::StartsWith(line, "@")) {
      tensors.emplace_back(line.substr(1));
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos) {
      variables[std::string(line)] = "";
    } else {
      variables[std::string(line.substr(0, eq))] =
          std::string(line.substr(eq + 1));
    }
  }

  absl::StatusOr<Config> config = Config::FromMap(variables);
  if (!config.ok()) {
    if (config.status().code() != absl::StatusCode::kInvalidArgument ||
        !absl::StrContains(config.status().message(), "TERSE_")) {
      FuzzFail(absl::StrCat("error does not name the variable: ",
                            config.status().ToString()));
    }
    return 0;
  }
  absl::StatusOr<Config> again = Config::FromMap(ToVariables(*config));
  if (!again.ok()) {
    FuzzFail(absl::StrCat("an accepted config does not parse back: ",
                          again.status().ToString()));
  }
  if (!SameFields(*config, *again)) {
    FuzzFail("an accepted config changes on a round trip");
  }
  const std::string described = config->Describe();
  for (const KnobDoc& knob : ConfigKnobDocs()) {
    if (!absl::StrContains(described, knob.name)) {
      FuzzFail(absl::StrCat("Describe() lacks ", knob.name));
    }
  }
  for (const std::string& tensor : tensors) CheckChoice(*config, tensor);
  return 0;
}
