#include "common/config.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status.h"

extern char** environ;

namespace terse {
namespace {

// Parses a value into the Config; returns InvalidArgument with a message that
// states what is accepted (the caller prefixes the variable and the value).
using Setter = std::function<absl::Status(absl::string_view, Config*)>;
using Shower = std::function<std::string(const Config&)>;

struct Knob {
  std::string name;
  std::string unit;
  std::string default_value;
  std::string accepted;
  std::string doc;
  Setter set;
  Shower show;
};

std::string FormatDouble(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return absl::StrFormat("%.10g", v);
}

Knob IntKnob(std::string name, std::string unit, std::string def,
             std::string doc, int64_t Config::*field, int64_t lo, int64_t hi) {
  std::string accepted = absl::StrCat("an integer in [", lo, ", ", hi, "]");
  return Knob{name,
              unit,
              def,
              accepted,
              doc,
              [field, lo, hi, accepted](absl::string_view v, Config* c) {
                int64_t x;
                if (!absl::SimpleAtoi(v, &x) || x < lo || x > hi) {
                  return absl::InvalidArgumentError(accepted);
                }
                c->*field = x;
                return absl::OkStatus();
              },
              [field](const Config& c) { return absl::StrCat(c.*field); }};
}

// `lo_open`: the lower bound itself is not accepted.
Knob DoubleKnob(std::string name, std::string unit, std::string def,
                std::string doc, double Config::*field, double lo, double hi,
                bool lo_open = false) {
  std::string accepted =
      absl::StrCat("a number in ", lo_open ? "(" : "[", FormatDouble(lo), ", ",
                   FormatDouble(hi), "]");
  return Knob{name,
              unit,
              def,
              accepted,
              doc,
              [=](absl::string_view v, Config* c) {
                double x;
                if (!absl::SimpleAtod(v, &x) || std::isnan(x) || x > hi ||
                    x < lo || (lo_open && x == lo)) {
                  return absl::InvalidArgumentError(accepted);
                }
                c->*field = x;
                return absl::OkStatus();
              },
              [field](const Config& c) { return FormatDouble(c.*field); }};
}

Knob WordKnob(std::string name, std::string def, std::string doc,
              std::string Config::*field, std::vector<std::string> words) {
  std::string accepted = absl::StrCat("one of: ", absl::StrJoin(words, " "));
  return Knob{name,
              "",
              def,
              accepted,
              doc,
              [=](absl::string_view v, Config* c) {
                if (std::find(words.begin(), words.end(), v) == words.end()) {
                  return absl::InvalidArgumentError(accepted);
                }
                c->*field = std::string(v);
                return absl::OkStatus();
              },
              [field](const Config& c) { return c.*field; }};
}

// On/off switch: accepts on|off|true|false|1|0, shows "on" or "off".
Knob BoolKnob(std::string name, std::string def, std::string doc,
              bool Config::*field) {
  const std::string accepted = "one of: on off true false 1 0";
  return Knob{name,
              "",
              def,
              accepted,
              doc,
              [=](absl::string_view v, Config* c) {
                if (v == "on" || v == "true" || v == "1") {
                  c->*field = true;
                } else if (v == "off" || v == "false" || v == "0") {
                  c->*field = false;
                } else {
                  return absl::InvalidArgumentError(accepted);
                }
                return absl::OkStatus();
              },
              [field](const Config& c) {
                return std::string(c.*field ? "on" : "off");
              }};
}

// The default portfolio of TERSE_GRAVAC_CANDIDATES (its measurement is in
// docs/gravac_portfolio.md: PowerSGD rank 1 and top-k CF 100 were taken out
// after they lost accuracy on both models measured).
constexpr char kDefaultCandidates[] = "none,fp16,powersgd:4,topk:10";

const std::vector<std::string>& CompressionWords() {
  static const auto* words = new std::vector<std::string>{
      "none",      "fp16",    "bf16",      "topk",     "randomk",
      "dgc",       "redsync", "threshold", "powersgd", "qsgd",
      "efsignsgd", "gravac",  "accordion"};
  return *words;
}

}  // namespace

absl::StatusOr<CompressionRule> ParseCompressionSpec(absl::string_view spec) {
  const std::string accepted = absl::StrCat(
      "compression '", spec, "' is not 'policy[:cf]' with policy one of: ",
      absl::StrJoin(CompressionWords(), " "), " and cf a number >= 1");
  std::pair<absl::string_view, absl::string_view> pc =
      absl::StrSplit(spec, absl::MaxSplits(':', 1));
  CompressionRule rule;
  rule.policy = std::string(pc.first);
  const auto& words = CompressionWords();
  if (std::find(words.begin(), words.end(), rule.policy) == words.end()) {
    return absl::InvalidArgumentError(accepted);
  }
  if (spec.find(':') != absl::string_view::npos &&
      (!absl::SimpleAtod(pc.second, &rule.cf) || !(rule.cf >= 1) ||
       !(rule.cf <= 1e12))) {
    return absl::InvalidArgumentError(accepted);
  }
  return rule;
}

std::string CompressionSpecString(const CompressionRule& rule) {
  if (rule.cf > 0) return absl::StrFormat("%s:%g", rule.policy, rule.cf);
  return rule.policy;
}

namespace {

// TERSE_GRAVAC_CANDIDATES: "paper", or family[:level] entries (see the
// knob's doc); levels are checked here so a bad portfolio fails at start-up.
absl::Status ParseCandidates(absl::string_view text, Config* c) {
  static const std::string kForm =
      "'paper' or ','-separated family[:level] with family one of: none fp16 "
      "bf16 powersgd topk dgc redsync randomk qsgd; levels: powersgd rank an "
      "integer in [1, 1024], sparsifier CF a number in (1, 1000000], qsgd "
      "bits an integer in [2, 16], none/fp16/bf16 none";
  std::vector<std::string> out;
  if (absl::StripAsciiWhitespace(text) == "paper") {
    c->gravac_candidates = {"paper"};
    return absl::OkStatus();
  }
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    item = absl::StripAsciiWhitespace(item);
    std::pair<absl::string_view, absl::string_view> fl =
        absl::StrSplit(item, absl::MaxSplits(':', 1));
    const absl::string_view family = fl.first, level = fl.second;
    const bool has_level = item.find(':') != absl::string_view::npos;
    const std::string bad = absl::StrCat(kForm, " (bad entry '", item, "')");
    if (family == "none" || family == "fp16" || family == "bf16") {
      if (has_level) return absl::InvalidArgumentError(bad);
    } else if (family == "powersgd" || family == "qsgd") {
      int64_t x;
      const int64_t hi = family == "powersgd" ? 1024 : 16;
      const int64_t lo = family == "powersgd" ? 1 : 2;
      if (!has_level || !absl::SimpleAtoi(level, &x) || x < lo || x > hi) {
        return absl::InvalidArgumentError(bad);
      }
    } else if (family == "topk" || family == "dgc" || family == "redsync" ||
               family == "randomk") {
      double x;
      if (has_level && (!absl::SimpleAtod(level, &x) || !(x > 1) || x > 1e6)) {
        return absl::InvalidArgumentError(bad);
      }
    } else {
      return absl::InvalidArgumentError(bad);
    }
    out.push_back(std::string(item));
  }
  if (out.empty()) return absl::InvalidArgumentError(kForm);
  c->gravac_candidates = std::move(out);
  return absl::OkStatus();
}

absl::Status ParseRules(absl::string_view text, Config* c) {
  static const std::string kForm =
      "';'-separated rules 'glob=policy[:cf]' with policy one of: ";
  std::vector<CompressionRule> rules;
  for (absl::string_view item : absl::StrSplit(text, ';', absl::SkipEmpty())) {
    item = absl::StripAsciiWhitespace(item);
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(item, absl::MaxSplits('=', 1));
    const std::string accepted =
        absl::StrCat(kForm, absl::StrJoin(CompressionWords(), " "),
                     " and cf a number >= 1 (bad rule '", item, "')");
    if (kv.first.empty() || kv.second.empty()) {
      return absl::InvalidArgumentError(accepted);
    }
    CompressionRule rule;
    rule.glob = std::string(kv.first);
    std::pair<absl::string_view, absl::string_view> pc =
        absl::StrSplit(kv.second, absl::MaxSplits(':', 1));
    rule.policy = std::string(pc.first);
    const auto& words = CompressionWords();
    if (std::find(words.begin(), words.end(), rule.policy) == words.end()) {
      return absl::InvalidArgumentError(accepted);
    }
    if (!pc.second.empty() &&
        (!absl::SimpleAtod(pc.second, &rule.cf) || !(rule.cf >= 1))) {
      return absl::InvalidArgumentError(accepted);
    }
    rules.push_back(rule);
  }
  c->compression_rules = std::move(rules);
  return absl::OkStatus();
}

std::string ShowRules(const Config& c) {
  return absl::StrJoin(c.compression_rules, ";",
                       [](std::string* out, const CompressionRule& r) {
                         absl::StrAppend(out, r.glob, "=", r.policy);
                         if (r.cf > 0) absl::StrAppend(out, ":", r.cf);
                       });
}

const std::vector<Knob>& Knobs() {
  constexpr int64_t kMaxBytes = int64_t{1} << 40;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  static const auto* knobs = new std::vector<Knob>{
      IntKnob("TERSE_FUSION_THRESHOLD", "bytes", "67108864",
              "largest fusion bucket; 0 sends every tensor on its own",
              &Config::fusion_threshold_bytes, 0, kMaxBytes),
      Knob{"TERSE_PIPELINE_CHUNK", "bytes", "auto",
           absl::StrCat("'auto' or an integer in [0, ", kMaxBytes, "]"),
           "a fused dense CPU bucket larger than this is copied in, "
           "allreduced and copied out this many bytes at a time, so each "
           "piece is still in cache between its copies; 0 reduces the whole "
           "bucket in one call; auto: 1 MiB when every rank of the set is on "
           "one host (the collective moves bytes through memory), else 0 "
           "(over a network each piece adds its latency)",
           [kMaxBytes](absl::string_view v, Config* c) {
             int64_t x;
             if (v == "auto") {
               c->pipeline_chunk_bytes = kAutoPipelineChunk;
             } else if (absl::SimpleAtoi(v, &x) && x >= 0 && x <= kMaxBytes) {
               c->pipeline_chunk_bytes = x;
             } else {
               return absl::InvalidArgumentError(absl::StrCat(
                   "'auto' or an integer in [0, ", kMaxBytes, "]"));
             }
             return absl::OkStatus();
           },
           [](const Config& c) {
             return c.pipeline_chunk_bytes == kAutoPipelineChunk
                        ? std::string("auto")
                        : absl::StrCat(c.pipeline_chunk_bytes);
           }},
      DoubleKnob("TERSE_CYCLE_TIME_MS", "ms", "1",
                 "pause of the background thread between negotiation cycles",
                 &Config::cycle_time_ms, 0, 10000),
      IntKnob("TERSE_CACHE_CAPACITY", "entries", "1024",
              "response-cache size; 0 negotiates every tensor every step",
              &Config::cache_capacity, 0, 1 << 20),
      IntKnob("TERSE_FORGET_AFTER_STEPS", "steps", "100",
              "steps an allreduce tensor name may go unseen before its "
              "bucket, fusion buffer and error-feedback residual are "
              "dropped (it starts afresh if it comes back); 0 keeps them "
              "for ever",
              &Config::forget_after_steps, 0, int64_t{1} << 40),
      WordKnob("TERSE_BACKEND", "auto",
               "collective backend: auto picks NCCL for CUDA tensors, MPI "
               "for CPU tensors",
               &Config::backend, {"auto", "mpi", "nccl"}),
      WordKnob("TERSE_GPU_OPERATIONS", "nccl",
               "how device tensors move: nccl through the device's "
               "communicator, mpi staged through pinned host memory over the "
               "control plane (an MPI that is not CUDA-aware, several ranks "
               "on one GPU)",
               &Config::gpu_operations, {"nccl", "mpi"}),
      WordKnob("TERSE_MPI_ALLREDUCE", "auto",
               "how the MPI backend allreduces: auto takes terse's ring "
               "(reduce-scatter + allgather over point-to-point messages) "
               "for buffers of 2 MiB or more when the ranks span more than "
               "one host, and MPI_Allreduce otherwise; mpi always "
               "MPI_Allreduce; ring always the ring",
               &Config::mpi_allreduce, {"auto", "mpi", "ring"}),
      BoolKnob("TERSE_DYNAMIC_PROCESS_SETS", "off",
               "allow add_process_set / remove_process_set after init "
               "(Horovod's HOROVOD_DYNAMIC_PROCESS_SETS); the bindings ask "
               "for it, the engine accepts set changes either way",
               &Config::dynamic_process_sets),
      BoolKnob("TERSE_AUTOTUNE", "off",
               "tune the fusion threshold and cycle time online from the "
               "measured throughput (Horovod's HOROVOD_AUTOTUNE; "
               "engine/autotune.h)",
               &Config::autotune),
      Knob{"TERSE_AUTOTUNE_LOG", "path", "", "a file path (empty: off)",
           "rank 0 writes every autotune sample and the final choice to this "
           "CSV file (needs TERSE_AUTOTUNE)",
           [](absl::string_view v, Config* c) {
             c->autotune_log = std::string(v);
             return absl::OkStatus();
           },
           [](const Config& c) { return c.autotune_log; }},
      IntKnob("TERSE_AUTOTUNE_WARMUP_SAMPLES", "samples", "1",
              "autotune samples dropped after each change of setting",
              &Config::autotune_warmup_samples, 0, 1000),
      IntKnob("TERSE_AUTOTUNE_SAMPLES", "samples", "2",
              "autotune samples scored per setting (their median)",
              &Config::autotune_samples, 1, 1000),
      IntKnob("TERSE_AUTOTUNE_STEPS_PER_SAMPLE", "steps", "10",
              "training steps per autotune sample (Horovod's "
              "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE)",
              &Config::autotune_steps_per_sample, 1, 1000000),
      WordKnob("TERSE_COMPRESSION", "none",
               "compressor or policy for every bucket", &Config::compression,
               CompressionWords()),
      DoubleKnob("TERSE_CF", "x", "100",
                 "compression factor of the static sparsifiers (dense bytes / "
                 "sent bytes)",
                 &Config::cf, 1, 1e6),
      Knob{"TERSE_COMPRESSION_RULES", "", "",
           "';'-separated 'glob=policy[:cf]'",
           "per-tensor overrides of TERSE_COMPRESSION, first match wins",
           ParseRules, ShowRules},
      IntKnob("TERSE_MIN_COMPRESS_BYTES", "bytes", "65536",
              "buckets smaller than this go dense", &Config::min_compress_bytes,
              0, kMaxBytes),
      DoubleKnob("TERSE_MOMENTUM_CORRECTION", "", "0",
                 "momentum m applied by terse before compression (DGC's "
                 "momentum correction and factor masking) to gradients "
                 "(tensors named grad.*, tape.grad.*, keras.grad.*); the "
                 "wrapped optimizer must then use "
                 "momentum 0. 0: off",
                 &Config::momentum_correction, 0, 0.999),
      WordKnob("TERSE_GRAVAC_COMPRESSOR", "topk",
               "sparsifier under the GraVAC controller",
               &Config::gravac_compressor,
               {"topk", "dgc", "redsync", "randomk"}),
      DoubleKnob("TERSE_GRAVAC_CF_MIN", "x", "10",
                 "GraVAC's starting (minimum) compression factor theta_min",
                 &Config::gravac_cf_min, 1, 1e6),
      DoubleKnob("TERSE_GRAVAC_CF_MAX", "x", "1000",
                 "GraVAC's largest compression factor theta_max",
                 &Config::gravac_cf_max, 1, 1e6),
      DoubleKnob("TERSE_GRAVAC_EPSILON", "", "0.9",
                 "compression-gain threshold epsilon", &Config::gravac_epsilon,
                 0, 1, /*lo_open=*/true),
      DoubleKnob("TERSE_GRAVAC_OMEGA", "", "0.01",
                 "relative tolerance omega for gains and throughputs",
                 &Config::gravac_omega, 0, 1),
      IntKnob("TERSE_GRAVAC_WINDOW", "steps", "500",
              "steps between GraVAC scale-up decisions", &Config::gravac_window,
              1, int64_t{1} << 40),
      WordKnob("TERSE_GRAVAC_POLICY", "exponential",
               "how the candidate CF grows at a window boundary",
               &Config::gravac_policy, {"exponential", "geometric"}),
      WordKnob("TERSE_GRAVAC_SCOPE", "bucket",
               "one controller per bucket, or one for the whole model",
               &Config::gravac_scope, {"bucket", "global"}),
      Knob{"TERSE_GRAVAC_EWMA", "", "auto",
           "'auto' (ranks/100) or a number in (0, 1]",
           "EWMA factor smoothing the compression gains",
           [](absl::string_view v, Config* c) {
             double x;
             if (v == "auto") {
               c->gravac_ewma = 0;
             } else if (absl::SimpleAtod(v, &x) && x > 0 && x <= 1) {
               c->gravac_ewma = x;
             } else {
               return absl::InvalidArgumentError(
                   "'auto' (ranks/100) or a number in (0, 1]");
             }
             return absl::OkStatus();
           },
           [](const Config& c) {
             return c.gravac_ewma == 0 ? std::string("auto")
                                       : FormatDouble(c.gravac_ewma);
           }},
      BoolKnob("TERSE_GRAVAC_THROUGHPUT_GUARD", "on",
               "let GraVAC's measured throughput veto compression where "
               "dense is faster (an extension; off: the paper's algorithm)",
               &Config::gravac_throughput_guard),
      Knob{"TERSE_GRAVAC_CANDIDATES", "", kDefaultCandidates,
           "'paper' or ','-separated family[:level], family one of: none "
           "fp16 bf16 powersgd (level: rank 1-1024) topk dgc redsync "
           "randomk (level: CF > 1; none: the CF ladder) qsgd (level: bits "
           "2-16)",
           "GraVAC's portfolio: the (compressor, level) pairs each bucket's "
           "controller chooses from ('paper': TERSE_GRAVAC_COMPRESSOR alone, "
           "the paper's algorithm)",
           ParseCandidates,
           [](const Config& c) {
             return absl::StrJoin(c.gravac_candidates, ",");
           }},
      WordKnob("TERSE_GRAVAC_GAIN", "window",
               "how the portfolio measures a candidate's gain: 'window' "
               "(extension) credits what error feedback delivers late, "
               "1 - ||sum(g - sent)||^2 / ||sum g||^2 over "
               "TERSE_GRAVAC_GAIN_WINDOW steps; 'step' is the paper's "
               "||C(g_ef)||^2 / ||g_ef||^2",
               &Config::gravac_gain, {"window", "step"}),
      IntKnob("TERSE_GRAVAC_GAIN_WINDOW", "steps", "50",
              "steps per window-gain sample (TERSE_GRAVAC_GAIN=window)",
              &Config::gravac_gain_window, 1, 1000000),
      DoubleKnob("TERSE_ACCORDION_LOW_CF", "x", "10",
                 "Accordion's CF in critical regimes",
                 &Config::accordion_low_cf, 1, 1e6),
      DoubleKnob("TERSE_ACCORDION_HIGH_CF", "x", "1000",
                 "Accordion's CF outside critical regimes",
                 &Config::accordion_high_cf, 1, 1e6),
      IntKnob("TERSE_ACCORDION_SWITCH_STEPS", "steps", "500",
              "steps between Accordion's regime checks",
              &Config::accordion_switch_steps, 1, int64_t{1} << 40),
      DoubleKnob("TERSE_ACCORDION_THRESHOLD", "", "0.5",
                 "relative gradient-norm change below which the regime is "
                 "not critical",
                 &Config::accordion_threshold, 0, kInf),
      WordKnob("TERSE_ACCORDION_COMPRESSOR", "powersgd",
               "compressor Accordion switches: PowerSGD ranks (as its paper "
               "runs it) or a sparsifier's CFs",
               &Config::accordion_compressor,
               {"powersgd", "topk", "dgc", "redsync", "randomk"}),
      IntKnob("TERSE_ACCORDION_HIGH_RANK", "", "4",
              "Accordion's PowerSGD rank in critical regimes",
              &Config::accordion_high_rank, 1, 1024),
      IntKnob("TERSE_ACCORDION_LOW_RANK", "", "1",
              "Accordion's PowerSGD rank outside critical regimes",
              &Config::accordion_low_rank, 1, 1024),
      IntKnob("TERSE_POWERSGD_RANK", "", "1", "rank of the PowerSGD factors",
              &Config::powersgd_rank, 1, 1024),
      IntKnob("TERSE_POWERSGD_START_STEP", "steps", "0",
              "dense steps before PowerSGD starts",
              &Config::powersgd_start_step, 0, int64_t{1} << 40),
      DoubleKnob("TERSE_POWERSGD_MIN_COMPRESSION_RATE", "x", "2",
                 "a matrix n x m goes uncompressed when n*m / (rank*(n+m)) "
                 "is below this (DDP's min_compression_rate)",
                 &Config::powersgd_min_compression_rate, 0, 1e6),
      Knob{"TERSE_TIMELINE", "path", "", "a file path (empty: off)",
           "write a Chrome-trace JSON timeline to this file",
           [](absl::string_view v, Config* c) {
             c->timeline_path = std::string(v);
             return absl::OkStatus();
           },
           [](const Config& c) { return c.timeline_path; }},
      DoubleKnob("TERSE_STALL_CHECK_SECONDS", "s", "60",
                 "warn when a tensor waits this long for other ranks (0: off)",
                 &Config::stall_check_seconds, 0, 1e7),
      DoubleKnob("TERSE_STALL_SHUTDOWN_SECONDS", "s", "0",
                 "fail pending operations after this long a stall (0: never)",
                 &Config::stall_shutdown_seconds, 0, 1e7),
      WordKnob("TERSE_LOG_LEVEL", "warning", "least severe level logged",
               &Config::log_level,
               {"trace", "debug", "info", "warning", "error"}),
      Knob{"TERSE_SEED", "", "0", "an integer in [0, 18446744073709551615]",
           "seed shared by all ranks (random-k, QSGD rounding, PowerSGD init)",
           [](absl::string_view v, Config* c) {
             uint64_t x;
             if (!absl::SimpleAtoi(v, &x)) {
               return absl::InvalidArgumentError(
                   "an integer in [0, 18446744073709551615]");
             }
             c->seed = x;
             return absl::OkStatus();
           },
           [](const Config& c) { return absl::StrCat(c.seed); }},
  };
  return *knobs;
}

const Knob* FindKnob(absl::string_view name) {
  for (const Knob& k : Knobs()) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

absl::Status Apply(const Knob& knob, absl::string_view value, Config* c) {
  absl::Status s = knob.set(value, c);
  if (s.ok()) return s;
  std::string unit =
      knob.unit.empty() ? "" : absl::StrCat(" (", knob.unit, ")");
  return absl::InvalidArgumentError(
      absl::StrCat(knob.name, "='", value, "' is invalid: expected ",
                   s.message(), unit, "; default ", knob.default_value));
}

absl::Status CheckConsistency(const Config& c) {
  if (!c.autotune_log.empty() && !c.autotune) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TERSE_AUTOTUNE_LOG='", c.autotune_log,
        "' is set but TERSE_AUTOTUNE is off: set TERSE_AUTOTUNE=1 or unset "
        "TERSE_AUTOTUNE_LOG"));
  }
  if (c.gravac_cf_min > c.gravac_cf_max) {
    return absl::InvalidArgumentError(
        absl::StrCat("TERSE_GRAVAC_CF_MIN='", FormatDouble(c.gravac_cf_min),
                     "' is invalid: expected at most TERSE_GRAVAC_CF_MAX (",
                     FormatDouble(c.gravac_cf_max), ")"));
  }
  if (c.accordion_low_cf > c.accordion_high_cf) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TERSE_ACCORDION_LOW_CF='", FormatDouble(c.accordion_low_cf),
        "' is invalid: expected at most TERSE_ACCORDION_HIGH_CF (",
        FormatDouble(c.accordion_high_cf), ")"));
  }
  return absl::OkStatus();
}

}  // namespace

int EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<int> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      int substitute = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, substitute});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

Config Config::Defaults() {
  Config c{};
  for (const Knob& k : Knobs()) {
    absl::Status s = k.set(k.default_value, &c);
    // The defaults are part of the table; a bad one is a programming error
    // caught by config_test.
    (void)s;
  }
  return c;
}

absl::StatusOr<Config> Config::FromMap(
    const std::map<std::string, std::string>& values) {
  Config c = Defaults();
  for (const auto& [name, value] : values) {
    if (!absl::StartsWith(name, "TERSE_")) continue;
    const Knob* knob = FindKnob(name);
    if (knob != nullptr) {
      TERSE_RETURN_IF_ERROR(Apply(*knob, value, &c));
      continue;
    }
    const Knob* closest = nullptr;
    int best = 3;
    for (const Knob& k : Knobs()) {
      int d = EditDistance(name, k.name);
      if (d < best) best = d, closest = &k;
    }
    if (closest != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown variable ", name, "='", value,
                       "'; did you mean ", closest->name, "?"));
    }
    c.unknown_variables.push_back(name);
  }
  TERSE_RETURN_IF_ERROR(CheckConsistency(c));
  return c;
}

absl::StatusOr<Config> Config::FromEnvironment() {
  std::map<std::string, std::string> values;
  for (char** env = environ; env != nullptr && *env != nullptr; ++env) {
    absl::string_view entry(*env);
    if (!absl::StartsWith(entry, "TERSE_")) continue;
    size_t eq = entry.find('=');
    if (eq == absl::string_view::npos) continue;
    values[std::string(entry.substr(0, eq))] =
        std::string(entry.substr(eq + 1));
  }
  return FromMap(values);
}

std::string Config::Describe() const {
  std::string out;
  for (const Knob& k : Knobs()) {
    std::string value = k.show(*this);
    absl::StrAppend(&out, k.name, " = ", value.empty() ? "(unset)" : value);
    if (value != k.default_value) {
      absl::StrAppend(&out, "  [default ",
                      k.default_value.empty() ? "(unset)" : k.default_value,
                      "]");
    }
    absl::StrAppend(&out, "\n");
  }
  for (const std::string& name : unknown_variables) {
    absl::StrAppend(&out, "ignored unknown variable ", name, "\n");
  }
  return out;
}

std::vector<KnobDoc> ConfigKnobDocs() {
  std::vector<KnobDoc> docs;
  for (const Knob& k : Knobs()) {
    docs.push_back({k.name, k.unit, k.default_value, k.accepted, k.doc});
  }
  return docs;
}

}  // namespace terse
