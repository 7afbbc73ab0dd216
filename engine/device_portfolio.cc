// gravac's portfolio on device buckets (see device_compression.h): the
// pieces of the CompressedReducer's protocol that only the portfolio uses
// (compressed_reducer.cc, compressed_reducer_exchange.cc), on device
// buffers: the window gain's sums and their count sketches, and the gain
// probes of every candidate. PolicyStep (device_policy_step.cc) calls them.
// Only scalars (norms) and the sketches of the window sums reach the host.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "compressors/kernels/randomk.h"
#include "compressors/qsgd_compressor.h"
#include "engine/device_compression.h"
#include "engine/device_compression_internal.h"
#include "engine/momentum_correction.h"
#include "gravac/portfolio_policy.h"

namespace terse {
using namespace device_compression_internal;  // NOLINT: own internals.

bool DeviceCompression::PortfolioOnDevice(const Config& config) {
  absl::StatusOr<std::vector<gravac::Choice>> candidates =
      gravac::ExpandCandidates(config.gravac_candidates, config.gravac_cf_min,
                               config.gravac_cf_max,
                               config.gravac_policy == "exponential");
  if (!candidates.ok()) return false;
  for (const gravac::Choice& c : *candidates) {
    const std::string& f = c.compressor;
    // randomk's probes and sends decode float32 values on the device
    // (SparseLevel).
    const bool native =
        f == "none" || f == "fp16" || f == "bf16" || f == "powersgd" ||
        f == "topk" || f == "dgc" || f == "redsync" || f == "qsgd" ||
        (f == "randomk" &&
         OptionsFromConfig(config).randomk_value_type == ValueType::kFloat32);
    if (!native) return false;
  }
  return true;
}

absl::Status DeviceCompression::FormA(BucketState& s, float* g) {
  const Target& t = s.target;
  // u = m u + g, g = u (TERSE_MOMENTUM_CORRECTION), before the residual.
  if (config_.momentum_correction > 0) {
    TERSE_RETURN_IF_ERROR(ApplyMomentum(s.ops, t, s.segments, g));
  }
  for (const Segment& seg : s.segments) {
    TERSE_ASSIGN_OR_RETURN(Residual * r, ResidualFor(seg.name, seg.count, t));
    if (r->valid) {
      TERSE_RETURN_IF_ERROR(s.ops->Add(t.stream, r->buffer.as<float>(),
                                       g + seg.offset, seg.count));
    }
  }
  return absl::OkStatus();
}

absl::Status DeviceCompression::BeginPolicyStep(
    BucketState& s, const gravac::Decision& decision, float* g, bool in_place,
    int64_t step) {
  const Target& t = s.target;
  DeviceOps* ops = s.ops;
  const int64_t n = s.count;
  const bool window_gain = decision.window_gain_steps > 0;
  const bool momentum = config_.momentum_correction > 0;
  if (window_gain) {
    const gravac::Choice sending{decision.compressor,
                                 decision.dense() ? 1.0 : decision.send_cf,
                                 decision.level};
    if (!(sending == s.window_choice) ||
        s.window_steps >= decision.window_gain_steps) {
      s.window_choice = decision.dense() ? gravac::Choice{} : sending;
      s.window_steps = 0;
    }
    TERSE_RETURN_IF_ERROR(Ensure(t, n * 4, &s.window_grad));
    float* sum = s.window_grad.as<float>();
    if (s.window_steps == 0) {
      TERSE_RETURN_IF_ERROR(t.stream->Memcpy(sum, g, n * 4));
    } else {
      TERSE_RETURN_IF_ERROR(ops->Add(t.stream, g, sum, n));
    }
    // Under momentum correction the residual is not a - sent: the window
    // sums g - sent step by step, so g is kept before momentum replaces it.
    s.window_keeps_g = momentum;
    if (momentum) {
      TERSE_RETURN_IF_ERROR(Ensure(t, n * 4, &s.raw_g));
      TERSE_RETURN_IF_ERROR(t.stream->Memcpy(s.raw_g.data(), g, n * 4));
    }
  } else {
    // A step without sums ends the window: the next one starts afresh.
    s.window_choice = gravac::Choice{};
    s.window_steps = 0;
    s.window_keeps_g = false;
  }
  s.window_active = window_gain && !in_place;
  s.window_sketch_at = kStatsTrailer + decision.gain_probes.size();
  s.window_sketch_k =
      s.window_active && s.window_steps + 1 >= decision.window_gain_steps
          ? std::min(n, kWindowSketch)
          : 0;
  // The reducer's seed: its StableHash of the key is the bucket's stream.
  s.window_sketch_seed = kernels::MixSeed(config_.seed, s.stream_hash,
                                          static_cast<uint64_t>(step));
  TERSE_RETURN_IF_ERROR(FormA(s, g));
  if (s.window_active && s.window_steps == 0 && !s.window_keeps_g) {
    // e_0 = a - g; g is the window's sum so far.
    TERSE_RETURN_IF_ERROR(Ensure(t, n * 4, &s.window_dev));
    TERSE_RETURN_IF_ERROR(ops->Subtract(t.stream, g, s.window_grad.as<float>(),
                                        s.window_dev.as<float>(), n));
  }
  return absl::OkStatus();
}

absl::Status DeviceCompression::AddToWindowGain(BucketState& s, const float* a,
                                                const float* local,
                                                std::vector<double>* stats) {
  const Target& t = s.target;
  DeviceOps* ops = s.ops;
  const int64_t n = s.count;
  TERSE_RETURN_IF_ERROR(Ensure(t, n * 4, &s.deviation));
  float* deviation = s.deviation.as<float>();
  if (s.window_keeps_g) {  // Momentum correction: sum g - sent.
    TERSE_RETURN_IF_ERROR(Ensure(t, n * 4, &s.window_dev));
    if (s.window_steps == 0) {
      TERSE_RETURN_IF_ERROR(t.stream->Memset(s.window_dev.data(), 0, n * 4));
    }
    TERSE_RETURN_IF_ERROR(
        ops->Subtract(t.stream, s.raw_g.as<float>(), local, deviation, n));
    TERSE_RETURN_IF_ERROR(
        ops->Add(t.stream, deviation, s.window_dev.as<float>(), n));
  }
  ++s.window_steps;
  (*stats)[kStatWindowSteps] = static_cast<double>(s.window_steps);
  // The policy reads the window's norms only when it closes, taken of the
  // sums over ranks: nothing more before.
  const int64_t k = s.window_sketch_k;
  if (k == 0) return absl::OkStatus();
  // The deviation: e_T - e_0 with e_T = a - local (what error feedback
  // keeps), rounded as the reducer's (a - local) - e_0; window_dev itself
  // stays, because a window closed here may go on.
  const float* dev = s.window_dev.as<float>();
  if (!s.window_keeps_g) {
    TERSE_RETURN_IF_ERROR(ops->Subtract(t.stream, a, local, deviation, n));
    TERSE_RETURN_IF_ERROR(
        ops->Subtract(t.stream, deviation, dev, deviation, n));
    dev = deviation;
  }
  const size_t at = s.window_sketch_at;
  if (n <= kWindowSketch) {
    // Whole: as small as the sketch would be.
    s.host_window.resize(2 * n);
    TERSE_RETURN_IF_ERROR(t.stream->Memcpy(s.host_window.data(), dev, n * 4));
    TERSE_RETURN_IF_ERROR(t.stream->Memcpy(s.host_window.data() + n,
                                           s.window_grad.data(), n * 4));
    TERSE_RETURN_IF_ERROR(t.stream->Synchronize());
    for (int64_t i = 0; i < n; ++i) {
      (*stats)[at + i] = s.host_window[i];
      (*stats)[at + k + i] = s.host_window[n + i];
    }
    return absl::OkStatus();
  }
  // The two sketches, then the scratch both calls use in turn (stream
  // order).
  TERSE_RETURN_IF_ERROR(
      Ensure(t, 2 * k * 8 + DeviceOps::CountSketchScratchBytes(k), &s.sketch));
  double* sketch = s.sketch.as<double>();
  void* scratch = sketch + 2 * k;
  TERSE_RETURN_IF_ERROR(t.stream->Memset(sketch, 0, 2 * k * 8));
  TERSE_RETURN_IF_ERROR(ops->CountSketch(t.stream, dev, n, s.window_sketch_seed,
                                         sketch, k, scratch));
  TERSE_RETURN_IF_ERROR(ops->CountSketch(t.stream, s.window_grad.as<float>(), n,
                                         s.window_sketch_seed, sketch + k, k,
                                         scratch));
  s.host_sketch.resize(2 * k);
  TERSE_RETURN_IF_ERROR(
      t.stream->Memcpy(s.host_sketch.data(), sketch, 2 * k * 8));
  TERSE_RETURN_IF_ERROR(t.stream->Synchronize());
  std::copy(s.host_sketch.begin(), s.host_sketch.end(),
            stats->begin() + static_cast<std::ptrdiff_t>(at));
  return absl::OkStatus();
}

absl::Status DeviceCompression::ProbeGains(BucketState& s,
                                           const gravac::Decision& decision,
                                           const float* a, int64_t step,
                                           std::vector<double>* stats) {
  const size_t m = decision.gain_probes.size();
  if (m == 0) return absl::OkStatus();
  const Target& t = s.target;
  DeviceOps* ops = s.ops;
  const int64_t n = s.count;
  TERSE_RETURN_IF_ERROR(Ensure(t, n * 4, &s.probe_out));
  TERSE_RETURN_IF_ERROR(Ensure(t, static_cast<int64_t>(m) * 8, &s.probe_norms));
  float* out = s.probe_out.as<float>();
  double* norms = s.probe_norms.as<double>();
  for (size_t i = 0; i < m; ++i) {
    const gravac::Choice& c = decision.gain_probes[i];
    if (c.compressor == "fp16" || c.compressor == "bf16") {
      const DataType half =
          c.compressor == "fp16" ? DataType::kFloat16 : DataType::kBFloat16;
      TERSE_RETURN_IF_ERROR(Ensure(t, n * 2, &s.probe_half));
      uint16_t* h = s.probe_half.as<uint16_t>();
      TERSE_RETURN_IF_ERROR(ops->CastToHalf(t.stream, a, h, n, half));
      TERSE_RETURN_IF_ERROR(t.stream->Memset(out, 0, n * 4));
      TERSE_RETURN_IF_ERROR(ops->AccumulateHalf(t.stream, h, out, n, half));
    } else if (c.compressor == "powersgd") {
      // A rank alone (each round's buffer is its own sum), on a copy of a
      // (the step replaces its input by the sum); the probe's warm starts
      // stay its own and never reach a sending instance, as the reducer's.
      std::unique_ptr<DevicePowerSgd>& probe =
          s.powersgd_probes[{c.cf, c.level}];
      if (probe == nullptr) {
        CompressorOptions options = s.options;
        if (c.level > 0) options.powersgd_rank = c.level;
        probe = std::make_unique<DevicePowerSgd>(options, config_.seed,
                                                 absl::StrCat("bucket:", s.key),
                                                 s.segments, n);
      }
      TERSE_RETURN_IF_ERROR(Ensure(t, n * 4, &s.probe_a));
      TERSE_RETURN_IF_ERROR(t.stream->Memcpy(s.probe_a.data(), a, n * 4));
      TERSE_RETURN_IF_ERROR(
          probe
              ->Step(
                  ops, t.runtime, t.ordinal, t.stream, s.probe_a.as<float>(),
                  out, step, [](float*, int64_t) { return absl::OkStatus(); },
                  [] { return absl::OkStatus(); })
              .status());
    } else if (c.compressor == "topk" || c.compressor == "dgc" ||
               c.compressor == "redsync" || c.compressor == "randomk") {
      TERSE_ASSIGN_OR_RETURN(const CompressorId kind,
                             CompressorIdFromName(c.compressor));
      // Slot 1: slot 0 holds what this step sends. Decoded as the wire
      // rounds the values, on the device.
      TERSE_RETURN_IF_ERROR(
          SparseLevel(s, kind, a, c.cf, step, /*which=*/1, out, nullptr));
    } else if (c.compressor == "qsgd") {
      // Quantised with the step's draws (the reducer's probe compresses
      // with the step's context, as its send) and decoded; the probe's
      // own buffers, the sent encoding waiting in `values` / `sign_bits`.
      TERSE_RETURN_IF_ERROR(QsgdEncodeLevel(s, a, QsgdLevels(c.cf, s.options),
                                            step, &s.probe_scales,
                                            &s.probe_codes, out));
    } else {
      return absl::UnimplementedError(
          absl::StrCat("bucket ", s.id, ": a gain probe of ",
                       gravac::ChoiceName(c), " on a device bucket"));
    }
    // In stream order: the next probe reuses the scratch after this norm
    // read it (RandomK's host positions are each selection's own).
    TERSE_RETURN_IF_ERROR(ops->SquaredNorm(t.stream, out, n, norms + i));
  }
  // The one wait: the norms' copy to the host.
  s.host_probe_norms.resize(m);
  TERSE_RETURN_IF_ERROR(
      t.stream->Memcpy(s.host_probe_norms.data(), norms, m * 8));
  TERSE_RETURN_IF_ERROR(t.stream->Synchronize());
  for (size_t i = 0; i < m; ++i) {
    (*stats)[kStatsTrailer + i] = s.host_probe_norms[i];
  }
  return absl::OkStatus();
}

}  // namespace terse
