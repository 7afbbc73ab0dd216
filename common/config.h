// The TERSE_* configuration: one table of knobs, parsed once into an
// immutable Config.
//
// Every knob is declared exactly once in config.cc (name, unit, default,
// accepted range, one-line doc). Config::FromEnvironment() reads the process
// environment; Config::FromMap() takes the same names from a map (tests,
// bindings). A bad value is an InvalidArgument error whose message names the
// variable, the value and what is accepted; an unknown TERSE_* variable that is
// within two edits of a known one is an error with the suggestion ("did you
// mean"); other unknown TERSE_* variables are reported by UnknownVariables()
// and otherwise ignored.
//
// A Config is a plain value: copy it freely, share it read-only across threads.
#ifndef TERSE_COMMON_CONFIG_H_
#define TERSE_COMMON_CONFIG_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace terse {

// One entry of TERSE_COMPRESSION_RULES ("glob=policy[:cf]").
struct CompressionRule {
  std::string glob;    // Matched against tensor names; '*' and '?' wildcards.
  std::string policy;  // One of the TERSE_COMPRESSION words.
  double cf = 0;       // 0: use TERSE_CF.
};

// Config::pipeline_chunk_bytes for "auto" (TERSE_PIPELINE_CHUNK=auto).
inline constexpr int64_t kAutoPipelineChunk = -1;
// The pipeline piece "auto" resolves to when every rank of a set shares one
// host.
inline constexpr int64_t kSharedMemoryPipelineChunk = int64_t{1} << 20;

struct Config {
  // Engine.
  int64_t fusion_threshold_bytes;
  // Piece size of a fused dense CPU bucket's copy-reduce-copy pipeline
  // (engine/bucket_executor.h); 0: the whole bucket in one allreduce;
  // kAutoPipelineChunk: chosen per process set (engine/bucket_executor.h,
  // PipelineChunkFor).
  int64_t pipeline_chunk_bytes = kAutoPipelineChunk;
  double cycle_time_ms;
  int64_t cache_capacity;
  // Steps a tensor name may go unreduced before its bucket and per-name
  // state are dropped (engine/bucket_assigner.h); 0: never.
  int64_t forget_after_steps;
  std::string backend;  // auto | mpi | nccl
  // How device (CUDA, simulated) buckets move: "nccl" through the device's
  // communicator from the registry (NCCL for CUDA), "mpi" staged through
  // (pinned) host memory over the control communicator, for an MPI that is
  // not CUDA-aware or several ranks on one GPU (Horovod's
  // HOROVOD_GPU_OPERATIONS).
  std::string gpu_operations = "nccl";
  // How the MPI backend allreduces (collectives/mpi/mpi_communicator.h,
  // MpiAllreduceAlgorithm): "auto", "mpi" (MPI_Allreduce always) or "ring"
  // (terse's ring allreduce always).
  std::string mpi_allreduce = "auto";
  bool dynamic_process_sets = false;  // TERSE_DYNAMIC_PROCESS_SETS.
  // Online tuning of the fusion threshold and cycle time (engine/autotune.h).
  bool autotune = false;
  std::string autotune_log;  // CSV of the samples (rank 0); empty: none.
  int64_t autotune_warmup_samples;
  int64_t autotune_samples;
  int64_t autotune_steps_per_sample;

  // Compression.
  std::string compression;  // none | fp16 | ... | gravac | accordion
  double cf;
  std::vector<CompressionRule> compression_rules;
  int64_t min_compress_bytes;
  // DGC's momentum correction (engine/momentum_correction.h); 0: off.
  double momentum_correction;

  // GraVAC (DESIGN §5).
  std::string gravac_compressor;  // topk | dgc | redsync | randomk
  double gravac_cf_min;
  double gravac_cf_max;
  double gravac_epsilon;
  double gravac_omega;
  int64_t gravac_window;
  std::string gravac_policy;  // exponential | geometric
  std::string gravac_scope;   // bucket | global
  double gravac_ewma;         // 0 means "auto": ranks / 100.
  bool gravac_throughput_guard;  // gravac/gravac_policy.h, extension
  // The portfolio (gravac/portfolio.h): "family[:level]" entries, e.g.
  // {"none", "fp16", "powersgd:4", "topk"}; validated when parsed.
  std::vector<std::string> gravac_candidates;
  // How the portfolio measures a candidate's gain: "window" (extension,
  // default) or "step" (the paper's per-step ||C(g_ef)||^2 / ||g_ef||^2).
  std::string gravac_gain;
  int64_t gravac_gain_window;  // steps per window-gain sample

  // Accordion.
  double accordion_low_cf;
  double accordion_high_cf;
  int64_t accordion_switch_steps;
  double accordion_threshold;
  std::string accordion_compressor;  // powersgd | topk | dgc | redsync | randomk
  int64_t accordion_low_rank;   // PowerSGD rank outside critical regimes
  int64_t accordion_high_rank;  // PowerSGD rank in critical regimes

  // PowerSGD.
  int64_t powersgd_rank;
  int64_t powersgd_start_step;
  double powersgd_min_compression_rate;

  // Diagnostics.
  std::string timeline_path;  // empty: no timeline
  double stall_check_seconds;
  double stall_shutdown_seconds;  // 0: never shut down on a stall
  std::string log_level;          // trace | debug | info | warning | error
  uint64_t seed;

  // Unknown TERSE_* variables that were ignored (not close to any known one).
  std::vector<std::string> unknown_variables;

  // The defaults of the table, as if no variable were set.
  static Config Defaults();
  static absl::StatusOr<Config> FromEnvironment();
  static absl::StatusOr<Config> FromMap(
      const std::map<std::string, std::string>& values);

  // The effective configuration as "NAME = value  [default ...]" lines.
  std::string Describe() const;
};

// Documentation of one knob, for `terse_info --help-config` and docs.
struct KnobDoc {
  std::string name;
  std::string unit;
  std::string default_value;
  std::string accepted;
  std::string doc;
};
std::vector<KnobDoc> ConfigKnobDocs();

// A per-operation compression spec, "policy[:cf]" with policy one of the
// TERSE_COMPRESSION words and cf a number >= 1 (e.g. "fp16", "topk:100",
// "gravac"), as allreduce(compression=...) passes it. Returns the rule's
// policy and cf (0: none given, i.e. TERSE_CF) with an empty glob;
// InvalidArgument listing the accepted words otherwise (also for "").
absl::StatusOr<CompressionRule> ParseCompressionSpec(absl::string_view spec);

// The canonical text of a spec: "policy" or "policy:<cf %g>", so that
// "topk:100" and "topk:100.0" compare equal.
std::string CompressionSpecString(const CompressionRule& rule);

// Levenshtein distance, used for "did you mean" suggestions.
int EditDistance(absl::string_view a, absl::string_view b);

}  // namespace terse

#endif  // TERSE_COMMON_CONFIG_H_
