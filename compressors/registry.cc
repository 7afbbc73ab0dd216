#include "compressors/registry.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compressors/cast_compressor.h"
#include "compressors/efsignsgd_compressor.h"
#include "compressors/error_feedback.h"
#include "compressors/powersgd_compressor.h"
#include "compressors/qsgd_compressor.h"
#include "compressors/randomk_compressor.h"
#include "compressors/sparsifier.h"

namespace terse {

const std::vector<std::string>& CompressorNames() {
  static const auto* names = [] {
    auto* v = new std::vector<std::string>;
    for (int i = 0; i < kNumCompressorIds; ++i) {
      v->push_back(CompressorName(static_cast<CompressorId>(i)));
    }
    return v;
  }();
  return *names;
}

bool IsPolicyName(absl::string_view name) {
  return name == "gravac" || name == "accordion";
}

absl::StatusOr<CompressorId> CompressorIdFromName(absl::string_view name) {
  const std::vector<std::string>& names = CompressorNames();
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return static_cast<CompressorId>(i);
  }
  if (IsPolicyName(name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " is a policy, not a compressor (the policy picks one of: ",
        absl::StrJoin(names, " "), ")"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown compressor '", name,
                   "'; accepted: ", absl::StrJoin(names, " ")));
}

absl::StatusOr<std::unique_ptr<Compressor>> CreateCompressor(
    absl::string_view name, double cf, const CompressorOptions& options) {
  absl::StatusOr<CompressorId> id = CompressorIdFromName(name);
  if (!id.ok()) return id.status();
  if (!(cf >= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "compression factor ", cf, " for ", name, ": must be a number >= 1"));
  }
  std::unique_ptr<Compressor> c;
  switch (*id) {
    case CompressorId::kNone:
    case CompressorId::kFp16:
    case CompressorId::kBf16:
      c = MakeCastCompressor(*id);
      break;
    case CompressorId::kTopK:
    case CompressorId::kDgc:
    case CompressorId::kRedSync:
    case CompressorId::kThreshold:
      c = MakeSparsifier(*id, cf, options);
      break;
    case CompressorId::kRandomK:
      c = MakeRandomKCompressor(cf, options);
      break;
    case CompressorId::kPowerSgd:
      c = MakePowerSgdCompressor(cf, options);
      break;
    case CompressorId::kQsgd:
      c = MakeQsgdCompressor(cf, options);
      break;
    case CompressorId::kEfSignSgd:
      c = MakeEfSignSgdCompressor(cf, options);
      break;
  }
  const bool feedback =
      options.error_feedback == ErrorFeedbackMode::kOn ||
      (options.error_feedback == ErrorFeedbackMode::kDefault && c->lossy());
  if (feedback) {
    c = std::make_unique<ErrorFeedback>(std::move(c), options.num_threads);
  }
  return c;
}

CompressorOptions OptionsFromConfig(const Config& config) {
  CompressorOptions options;
  options.powersgd_rank = config.powersgd_rank;
  options.powersgd_start_step = config.powersgd_start_step;
  options.powersgd_min_compression_rate =
      config.powersgd_min_compression_rate;
  return options;
}

bool ShouldCompress(int64_t bytes, const Config& config) {
  return bytes >= config.min_compress_bytes;
}

CompressionChoice ChooseCompression(absl::string_view tensor_name,
                                    const Config& config) {
  CompressionChoice choice;
  choice.name = config.compression;
  choice.cf = config.cf;
  for (size_t i = 0; i < config.compression_rules.size(); ++i) {
    const CompressionRule& rule = config.compression_rules[i];
    if (GlobMatch(rule.glob, tensor_name)) {
      choice.name = rule.policy;
      choice.cf = rule.cf > 0 ? rule.cf : config.cf;
      choice.rule = static_cast<int>(i);
      break;
    }
  }
  choice.is_policy = IsPolicyName(choice.name);
  return choice;
}

CompressionChoice ChooseCompressionFor(absl::string_view tensor_name,
                                       absl::string_view spec,
                                       const Config& config) {
  if (spec.empty()) return ChooseCompression(tensor_name, config);
  absl::StatusOr<CompressionRule> rule = ParseCompressionSpec(spec);
  if (!rule.ok()) return ChooseCompression(tensor_name, config);
  CompressionChoice choice;
  choice.name = rule->policy;
  choice.cf = rule->cf > 0 ? rule->cf : config.cf;
  choice.is_policy = IsPolicyName(choice.name);
  return choice;
}

bool GlobMatch(absl::string_view glob, absl::string_view name) {
  // Greedy with one backtrack point (the last '*'): linear in practice.
  size_t g = 0, n = 0;
  size_t star = absl::string_view::npos, star_n = 0;
  while (n < name.size()) {
    // A '*' in the glob is always the wildcard, also where the name has a
    // '*' at that place (a literal match there would drop the wildcard).
    if (g < glob.size() && glob[g] == '*') {
      star = g++;
      star_n = n;
    } else if (g < glob.size() && (glob[g] == '?' || glob[g] == name[n])) {
      ++g;
      ++n;
    } else if (star != absl::string_view::npos) {
      g = star + 1;
      n = ++star_n;
    } else {
      return false;
    }
  }
  while (g < glob.size() && glob[g] == '*') ++g;
  return g == glob.size();
}

}  // namespace terse
