#include "engine/compressed_reducer.h"

#include <algorithm>
#include <cstring>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/data_type.h"
#include "common/logging.h"
#include "common/stable_hash.h"
#include "common/status.h"
#include "compressors/kernels/count_sketch.h"
#include "compressors/kernels/randomk.h"
#include "compressors/registry.h"
#include "engine/compressed_reducer_internal.h"
#include "engine/fault_injection.h"
#include "gravac/policy_factory.h"

namespace terse {
using namespace reducer_internal;  // NOLINT: this class's own internals.

namespace {

// A copy of the values `store` (residuals or velocities) holds for the whole
// of tensor `name` (one entry from offset 0 with `count` values), if any.
template <typename Store>
std::optional<std::vector<float>> WholeEntry(Store& store,
                                             const std::string& name,
                                             int64_t count) {
  std::optional<std::vector<float>> found;
  store
      .WithEntries([&](const std::vector<const ResidualStore::Entry*>& all) {
        for (const ResidualStore::Entry* e : all) {
          if (e->name == name && e->tensor_offset == 0 &&
              static_cast<int64_t>(e->values.size()) == count) {
            found = e->values;
          }
        }
        return absl::OkStatus();
      })
      .IgnoreError();
  return found;
}

}  // namespace

CompressedReducer::CompressedReducer(const Config& config, int rank, int size)
    : config_(config),
      rank_(rank),
      size_(size),
      momenta_(config.momentum_correction),
      checkpoint_chunk_bytes_(checkpoint::kDefaultChunkBytes) {}

CompressedReducer::~CompressedReducer() = default;

CompressedReducer::BucketState& CompressedReducer::StateFor(
    const Bucket& bucket, const std::string& policy, double cf) {
  std::unique_ptr<BucketState>& slot = buckets_[bucket.id];
  if (slot != nullptr) return *slot;
  slot = std::make_unique<BucketState>();
  BucketState& s = *slot;
  s.key = KeyOf(bucket);
  s.policy = gravac::CreatePolicy(policy, cf, config_, size_);
  s.adaptive = policy == "gravac" || policy == "accordion";
  s.accumulates = policy == "accordion";
  s.bytes = bucket.bytes;
  s.segments = SegmentsOf(bucket);
  if (s.accumulates) s.accumulator.assign(bucket.count, 0.0f);
  auto restored = restored_.find(s.key);
  if (restored != restored_.end()) {
    const proto::BucketCompressionState& r = restored->second;
    absl::Status st = s.policy->RestoreState(r.policy());
    if (!st.ok()) {
      TERSE_LOG(Warning) << "bucket " << bucket.id
                         << ": policy state not restored: " << st;
    }
    if (s.accumulates && r.accumulator_size() == bucket.count) {
      s.accumulator.assign(r.accumulator().begin(), r.accumulator().end());
    }
    s.has_pending = r.has_pending();
    s.pending.compressor = r.pending_compressor();
    s.pending.send_cf = r.pending_send_cf();
    s.pending.level = r.pending_level();
    for (const proto::PendingProbe& p : r.pending_probes()) {
      s.pending.gain_probes.push_back(
          gravac::Choice{p.compressor(), p.cf(), p.level()});
    }
    s.pending.probe_cf_min = r.pending_probe_cf_min();
    s.pending.probe_cf_candidate = r.pending_probe_cf_candidate();
    s.pending.wants_stats = !r.pending_quiet();
    s.pending_norms.assign(r.pending_norms().begin(), r.pending_norms().end());
    s.pending_norms.resize(std::max<size_t>(s.pending_norms.size(), kNumStats),
                           0.0);
    s.restored_warm.assign(r.warm_states().begin(), r.warm_states().end());
    restored_.erase(restored);
  }
  return s;
}

absl::StatusOr<Compressor*> CompressedReducer::CompressorFor(
    BucketState& state, const std::string& name, double cf, int64_t level,
    bool probe) {
  std::unique_ptr<Compressor>& slot =
      state.compressors[{name, cf, level, probe}];
  if (slot == nullptr) {
    // Error feedback is the reducer's (it decides what counts as sent).
    CompressorOptions options = OptionsFromConfig(config_);
    options.error_feedback = ErrorFeedbackMode::kOff;
    if (level > 0) options.powersgd_rank = level;
    TERSE_ASSIGN_OR_RETURN(slot, CreateCompressor(name, cf, options));
    if (!probe) {
      std::map<std::string, std::vector<float>> warm;
      for (proto::WarmState& w : state.restored_warm) {
        if (w.compressor() == name && w.cf() == cf && w.level() == level) {
          warm[w.key()].assign(w.values().begin(), w.values().end());
        }
      }
      if (!warm.empty()) slot->ImportWarmState(std::move(warm));
    }
  }
  return slot.get();
}

double CompressedReducer::PreviousStepSeconds(BucketState& state,
                                              Clock::time_point now) {
  double seconds = 0;
  if (state.has_last_start) {
    const double period = SecondsBetween(state.last_start, now);
    const double own = own_seconds_total_ - state.own_total_at_last_start;
    const double bytes = own_bytes_total_ - state.bytes_total_at_last_start;
    const double rest = std::max(0.0, period - own);
    const double share = bytes > 0 ? state.bytes / bytes : 1.0;
    seconds = state.last_own + rest * share;
  }
  state.has_last_start = true;
  state.last_start = now;
  state.own_total_at_last_start = own_seconds_total_;
  state.bytes_total_at_last_start = own_bytes_total_;
  return seconds;
}

bool CompressedReducer::Compressible(const BucketReduceContext& ctx,
                                     CompressionChoice* choice) const {
  const Bucket& bucket = *ctx.bucket;
  *choice = ChooseCompressionFor(bucket.members.front().name,
                                 bucket.compression, config_);
  return bucket.dtype == DataType::kFloat32 && ctx.host_addressable &&
         ctx.op == ReduceOp::kSum && choice->name != "none" &&
         ShouldCompress(bucket.bytes, config_);
}

bool CompressedReducer::ReducesPlainDense(const BucketReduceContext& ctx) {
  CompressionChoice choice;
  return !ctx.bucket->members.empty() && !Compressible(ctx, &choice) &&
         !momenta_.enabled();
}

void CompressedReducer::DenseReduced(const BucketReduceContext& ctx,
                                     Clock::time_point start,
                                     Clock::time_point end) {
  const Bucket& bucket = *ctx.bucket;
  BeginStep();
  Publish(BucketReport{bucket.id, static_cast<int>(bucket.members.size()),
                       bucket.bytes, "none", "none", 1, bucket.bytes});
  own_seconds_total_ += SecondsBetween(start, end);
  own_bytes_total_ += static_cast<double>(bucket.bytes);
  EndStep();
}

absl::Status CompressedReducer::Reduce(const BucketReduceContext& ctx) {
  const Bucket& bucket = *ctx.bucket;
  CompressionChoice choice;
  const bool compressible = Compressible(ctx, &choice);
  const Clock::time_point start = Clock::now();
  BeginStep();  // From here to EndStep no lock is held across a collective.
  absl::Status status;
  if (!compressible) {
    absl::Status momentum = ApplyMomentumBeforeDense(ctx);
    if (!momentum.ok()) {
      EndStep();
      return momentum;
    }
    status = dense_.Reduce(ctx);
    Publish(BucketReport{bucket.id, static_cast<int>(bucket.members.size()),
                         bucket.bytes, "none", "none", 1, bucket.bytes});
  } else {
    BucketState& state = StateFor(bucket, choice.name, choice.cf);
    status = ReduceCompressed(ctx, state);
    state.last_own = SecondsBetween(start, Clock::now());
  }
  own_seconds_total_ += SecondsBetween(start, Clock::now());
  own_bytes_total_ += static_cast<double>(bucket.bytes);
  EndStep();
  return status;
}

void CompressedReducer::BeginStep() {
  absl::MutexLock lock(&mu_);  // Waits for a SaveState or LoadState.
  idle_ = false;
}

void CompressedReducer::EndStep() {
  absl::MutexLock lock(&mu_);
  for (; lr_drops_pending_ > 0; --lr_drops_pending_) {
    for (auto& [id, state] : buckets_) state->policy->OnLearningRateDrop();
  }
  idle_ = true;
}

void CompressedReducer::Publish(BucketReport report) {
  bytes_sent_ += report.bytes_sent;
  absl::MutexLock lock(&report_mu_);
  BucketReport& r = reports_[report.bucket];
  report.steps = r.steps + 1;
  r = std::move(report);
  bytes_published_ += r.bytes_sent;
}

absl::Status CompressedReducer::ApplyMomentumBeforeDense(
    const BucketReduceContext& ctx) {
  const Bucket& bucket = *ctx.bucket;
  absl::MutexLock lock(&mu_);
  if (!momenta_.enabled()) return absl::OkStatus();
  const bool fits = bucket.dtype == DataType::kFloat32 &&
                    ctx.host_addressable && ctx.op == ReduceOp::kSum;
  for (const BucketMember& m : bucket.members) {
    if (!fits && MomentumCorrection::Applies(m.name)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "TERSE_MOMENTUM_CORRECTION=", config_.momentum_correction,
          " applies momentum to float32 CPU gradients summed or averaged "
          "over ranks; gradient '",
          m.name, "' is ", DataTypeName(bucket.dtype),
          ctx.host_addressable ? "" : " on CUDA",
          ": set TERSE_MOMENTUM_CORRECTION=0 and let the optimizer apply "
          "momentum"));
    }
  }
  if (!fits) return absl::OkStatus();
  momenta_.Accumulate(
      absl::MakeSpan(static_cast<float*>(ctx.data), bucket.count),
      SegmentsOf(bucket));
  return absl::OkStatus();
}

absl::Status CompressedReducer::Compress(const BucketReduceContext& ctx,
                                         BucketState& state,
                                         const gravac::Decision& decision,
                                         const CompressContext& cctx,
                                         Sent* sent) {
  (void)ctx;
  const size_t n = state.a.size();
  if (decision.probe_cf_min > 0) {
    // GraVAC: level one at theta_min, level two from level one's output.
    TERSE_ASSIGN_OR_RETURN(
        Compressor * first,
        CompressorFor(state, decision.compressor, decision.probe_cf_min,
                      /*level=*/0, /*probe=*/false));
    Payload p1;
    TERSE_RETURN_IF_ERROR(first->Compress(state.a, cctx, &p1));
    state.level1.assign(n, 0.0f);
    TERSE_RETURN_IF_ERROR(
        first->Decompress(p1.bytes, absl::MakeSpan(state.level1)));
    Compressor* second = first;
    Payload p2;
    if (decision.probe_cf_candidate > decision.probe_cf_min) {
      TERSE_ASSIGN_OR_RETURN(
          second, CompressorFor(state, decision.compressor,
                                decision.probe_cf_candidate, /*level=*/0,
                                /*probe=*/false));
      TERSE_RETURN_IF_ERROR(second->Compress(state.level1, cctx, &p2));
      state.level2.assign(n, 0.0f);
      TERSE_RETURN_IF_ERROR(
          second->Decompress(p2.bytes, absl::MakeSpan(state.level2)));
    } else {
      p2 = p1;
      state.level2 = state.level1;
    }
    if (!decision.dense()) {
      const bool candidate = decision.send_cf == decision.probe_cf_candidate;
      sent->dense = false;
      sent->compressor = candidate ? second : first;
      sent->payload = candidate ? std::move(p2) : std::move(p1);
      sent->local = candidate ? &state.level2 : &state.level1;
    }
  } else if (!decision.dense()) {
    TERSE_ASSIGN_OR_RETURN(
        Compressor * c,
        CompressorFor(state, decision.compressor, decision.send_cf,
                      decision.level, /*probe=*/false));
    sent->dense = false;
    sent->compressor = c;
    if (c->num_rounds() > 0) {
      TERSE_ASSIGN_OR_RETURN(sent->rounds, c->BeginRounds(state.a, cctx));
    } else {
      TERSE_RETURN_IF_ERROR(c->Compress(state.a, cctx, &sent->payload));
      state.level1.assign(n, 0.0f);
      TERSE_RETURN_IF_ERROR(
          c->Decompress(sent->payload.bytes, absl::MakeSpan(state.level1)));
      sent->local = &state.level1;
    }
  }
  if (sent->dense) {
    sent->local = &state.a;
  } else {
    sent->compressor_name =
        ReportName(sent->compressor->name(), decision.level);
    sent->cf = decision.send_cf;
  }
  return absl::OkStatus();
}

absl::Status CompressedReducer::ReduceCompressed(const BucketReduceContext& ctx,
                                                 BucketState& state) {
  const Bucket& bucket = *ctx.bucket;
  const int64_t n = bucket.count;
  const Clock::time_point start = Clock::now();
  const double previous_seconds = PreviousStepSeconds(state, start);
  const gravac::Decision decision = state.policy->Decide();

  // Dense with nothing to add or measure: reduce the input where it is.
  const bool in_place = decision.dense() && decision.probe_cf_min <= 0 &&
                        decision.gain_probes.empty() && !state.accumulates &&
                        state.residual_empty && !momenta_.enabled();
  const bool window_gain = decision.window_gain_steps > 0;
  if (window_gain) {
    const gravac::Choice sending{decision.compressor,
                                 decision.dense() ? 1.0 : decision.send_cf,
                                 decision.level};
    if (!(sending == state.window_choice) ||
        state.window_steps >= decision.window_gain_steps) {
      state.window_choice = decision.dense() ? gravac::Choice{} : sending;
      state.window_steps = 0;
    }
    const float* g = static_cast<const float*>(ctx.data);
    if (state.window_steps == 0) {
      state.window_grad.assign(g, g + n);
    } else {
      for (int64_t i = 0; i < n; ++i) state.window_grad[i] += g[i];
    }
    if (momenta_.enabled()) {
      state.g.assign(g, g + n);
    } else {
      state.g.clear();
    }
  } else {
    // A step without sums ends the window: the next one starts afresh (its
    // e_0 then includes this step, which its sum of g would not).
    state.window_choice = gravac::Choice{};
    state.window_steps = 0;
    state.g.clear();
  }
  state.window_active = window_gain && !in_place;
  // Does this step close the window (see kWindowSketch)?
  state.window_sketch_at = kNumStats + decision.gain_probes.size();
  state.window_sketch_k = state.window_active && state.window_steps + 1 >=
                                                     decision.window_gain_steps
                              ? std::min(n, kWindowSketch)
                              : 0;
  state.window_sketch_seed =
      kernels::MixSeed(config_.seed, StableHashOfBytes(state.key),
                       static_cast<uint64_t>(ctx.step));
  if (!in_place) {
    const float* g = static_cast<const float*>(ctx.data);
    state.a.assign(g, g + n);
    momenta_.Accumulate(absl::MakeSpan(state.a), state.segments);
    residuals_.AddTo(absl::MakeSpan(state.a), state.segments);
    if (state.window_active && state.window_steps == 0 && state.g.empty()) {
      // e_0 = a - g; g is the window's sum so far.
      state.window_dev.resize(n);
      for (int64_t i = 0; i < n; ++i) {
        state.window_dev[i] = state.a[i] - state.window_grad[i];
      }
    }
  }

  CompressContext cctx;
  cctx.seed = config_.seed;
  cctx.step = static_cast<uint64_t>(ctx.step);
  cctx.stream = StableHashOfBytes(state.key);
  cctx.rank = rank_;
  cctx.key = absl::StrCat("bucket:", state.key);
  cctx.segments = state.segments;

  Sent sent;
  sent.in_place = in_place;
  // This step's exchange carries the pending decision's time and this
  // decision's norms: skipped when neither wants them, except on a step
  // that closes a window-gain window (the policy's next sample).
  sent.gather_stats = decision.wants_stats ||
                      (state.has_pending && state.pending.wants_stats) ||
                      state.window_sketch_k > 0;
  std::vector<double> stats(state.window_sketch_at + 2 * state.window_sketch_k,
                            0.0);
  // A lossy window candidate's gain is its window gain: no step norms; nor
  // where the policy does not read them.
  sent.step_norms =
      state.adaptive && decision.wants_stats && !state.window_active;
  stats[kNormEf] = in_place || !sent.step_norms ? 0.0 : SquaredNorm(state.a);
  stats[kSeconds] = previous_seconds;
  TERSE_RETURN_IF_ERROR(Compress(ctx, state, decision, cctx, &sent));
  if (decision.probe_cf_min > 0) {
    stats[kNormMin] = SquaredNorm(state.level1);
    stats[kNormCandidate] = SquaredNorm(state.level2);
  }
  for (size_t i = 0; i < decision.gain_probes.size(); ++i) {
    TERSE_ASSIGN_OR_RETURN(stats[kNumStats + i],
                           ProbeGain(state, decision.gain_probes[i], cctx));
  }
  if (sent.step_norms && sent.local != nullptr) {
    stats[kNormSent] = sent.dense ? stats[kNormEf] : SquaredNorm(*sent.local);
  }
  if (state.window_active && sent.rounds == nullptr) {
    AddToWindowGain(state, *sent.local, &stats);
  }
  const Clock::time_point compressed = Clock::now();

  TERSE_RETURN_IF_ERROR(Communicate(ctx, state, &sent, &stats));
  const Clock::time_point communicated = Clock::now();

  // Error feedback: what this rank did not send stays for the next step.
  if (sent.dense || !sent.compressor->lossy()) {
    residuals_.Erase(state.segments);
    state.residual_empty = true;
  } else if (momenta_.enabled() &&
             MomentumCorrection::IsSparsifier(sent.compressor_name)) {
    // DGC: sent entries leave both the residual and the velocity (their
    // rounding error on the wire is dropped with them).
    residuals_.Store(state.segments, state.a, *sent.local);
    residuals_.ClearSent(state.segments, *sent.local);
    momenta_.MaskSent(*sent.local, state.segments);
    state.residual_empty = false;
  } else {
    residuals_.Store(state.segments, state.a, *sent.local);
    state.residual_empty = false;
  }

  // Statistics: the averages over ranks, fed one step late with the time.
  double accumulated_norm2 = 0;
  if (state.accumulates) {
    const float* reduced = static_cast<const float*>(ctx.data);
    for (int64_t i = 0; i < n; ++i) state.accumulator[i] += reduced[i];
    accumulated_norm2 = SquaredNorm(state.accumulator);
  }
  if (state.adaptive) {
    FoldStatistics(size_, state.window_sketch_at, state.window_sketch_k,
                   &stats);
    if (state.has_pending) {
      gravac::StepStats step;
      const std::vector<double>& p = state.pending_norms;
      step.norm2_ef = p[kNormEf];
      step.norm2_min = p[kNormMin];
      step.norm2_candidate = p[kNormCandidate];
      step.accumulated_norm2 = p[kAccumulatedSlot];
      step.norm2_sent = p[kNormSent];
      step.window_dev_norm2 = p[kWindowDev];
      step.window_grad_norm2 = p[kWindowGrad];
      step.window_steps = p[kWindowSteps];
      step.bytes_sent = p[kSentBytes];
      step.probe_norm2.assign(p.begin() + kNumStats, p.end());
      step.seconds = stats[kSeconds];
      state.policy->Observe(state.pending, step);
    }
    state.pending = decision;
    state.pending_norms = stats;
    state.pending_norms[kAccumulatedSlot] = accumulated_norm2;
    state.has_pending = true;
  } else {
    state.policy->Observe(decision, gravac::StepStats{});
  }
  if (decision.reset_accumulator) {
    std::fill(state.accumulator.begin(), state.accumulator.end(), 0.0f);
  }

  // Payloads were moved into the message by Communicate: count what it sent.
  const int64_t bytes = sent.bytes;
  // PowerSGD's strength is its rank: report the CF its factors achieved.
  if (decision.level > 0 && !sent.dense && bytes > 0) {
    sent.cf = static_cast<double>(bucket.bytes) / static_cast<double>(bytes);
  }
  const BucketReport r{bucket.id,
                       static_cast<int>(bucket.members.size()),
                       bucket.bytes,
                       state.policy->Describe(),
                       sent.compressor_name,
                       sent.cf,
                       bytes};
  Publish(r);
  TERSE_LOG(Debug) << "bucket " << bucket.id << " step " << ctx.step << ": "
                   << r.policy << " sent " << r.compressor << " cf " << r.cf;
  if (ctx.timeline != nullptr) {
    const TimelineArgs args = {{"compressor", sent.compressor_name},
                               {"cf", absl::StrCat(sent.cf)},
                               {"policy", r.policy}};
    ctx.timeline->Record(ctx.track, "COMPRESS", start, compressed, args);
    ctx.timeline->Record(ctx.track, "COMMUNICATE", compressed, communicated,
                         {{"bytes", absl::StrCat(bytes)}});
    ctx.timeline->Record(ctx.track, "DECOMPRESS", communicated, Clock::now(),
                         args);
  }
  return absl::OkStatus();
}

void CompressedReducer::Forget(int bucket_id) {
  {
    absl::MutexLock lock(&mu_);  // Between steps: idle_.
    buckets_.erase(bucket_id);
  }
  absl::MutexLock lock(&report_mu_);
  reports_.erase(bucket_id);
}

void CompressedReducer::ForgetTensors(const std::vector<std::string>& names) {
  residuals_.EraseNames(names);
  momenta_.EraseNames(names);
  absl::MutexLock lock(&mu_);
  if (external_ != nullptr) external_->ForgetTensors(names);
}

void CompressedReducer::set_external_state(ExternalCompressionState* external) {
  absl::MutexLock lock(&mu_);
  external_ = external;
}

absl::Status CompressedReducer::RunExternalStep(
    const std::function<absl::StatusOr<BucketReport>()>& step) {
  BeginStep();
  absl::StatusOr<BucketReport> report = step();
  if (report.ok()) Publish(*std::move(report));
  EndStep();
  return report.status();
}

std::optional<proto::BucketCompressionState>
CompressedReducer::TakeRestoredBucket(const std::string& key) {
  auto it = restored_.find(key);
  if (it == restored_.end()) return std::nullopt;
  proto::BucketCompressionState out = std::move(it->second);
  restored_.erase(it);
  return out;
}

std::optional<std::vector<float>> CompressedReducer::TakeResidual(
    const std::string& name, int64_t count) {
  std::optional<std::vector<float>> found = WholeEntry(residuals_, name, count);
  if (found.has_value()) {
    Segment seg;
    seg.name = name;
    seg.count = count;
    residuals_.Erase({seg});
  }
  return found;
}

std::optional<std::vector<float>> CompressedReducer::TakeVelocity(
    const std::string& name, int64_t count) {
  std::optional<std::vector<float>> found = WholeEntry(momenta_, name, count);
  if (found.has_value()) momenta_.EraseNames({name});
  return found;
}

std::vector<BucketReport> CompressedReducer::Reports() const {
  absl::MutexLock lock(&report_mu_);
  std::vector<BucketReport> out;
  for (const auto& [id, report] : reports_) out.push_back(report);
  return out;
}

int64_t CompressedReducer::bytes_sent() const {
  absl::MutexLock lock(&report_mu_);
  return bytes_published_;
}

void CompressedReducer::OnLearningRateDrop() {
  absl::MutexLock lock(&mu_);
  if (!idle_) {
    ++lr_drops_pending_;  // The step in flight applies it (EndStep).
    return;
  }
  for (auto& [id, state] : buckets_) state->policy->OnLearningRateDrop();
}

void CompressedReducer::SaveBuckets(
    proto::CheckpointHeader* meta,
    std::vector<checkpoint::TensorToWrite>* tensors) const {
  using proto::CheckpointTensor;
  for (const auto& [id, s] : buckets_) {
    proto::BucketCompressionState* b = meta->add_buckets();
    b->set_key(s->key);
    s->policy->SaveState(b->mutable_policy());
    b->set_has_pending(s->has_pending);
    b->set_pending_compressor(s->pending.compressor);
    b->set_pending_quiet(!s->pending.wants_stats);
    b->set_pending_send_cf(s->pending.send_cf);
    b->set_pending_level(s->pending.level);
    for (const gravac::Choice& c : s->pending.gain_probes) {
      proto::PendingProbe* p = b->add_pending_probes();
      p->set_compressor(c.compressor);
      p->set_cf(c.cf);
      p->set_level(c.level);
    }
    b->set_pending_probe_cf_min(s->pending.probe_cf_min);
    b->set_pending_probe_cf_candidate(s->pending.probe_cf_candidate);
    for (double v : s->pending_norms) b->add_pending_norms(v);
    if (!s->accumulator.empty()) {
      tensors->push_back(
          {s->key, 0, CheckpointTensor::ACCUMULATOR, s->accumulator});
    }
    // Warm states (PowerSGD's Q's) of the compressors that send; the
    // copies live in s->exported_warm until the checkpoint is written.
    s->exported_warm.clear();
    for (const auto& [id, compressor] : s->compressors) {
      if (std::get<3>(id)) continue;  // A gain probe's own state.
      for (auto& [key, values] : compressor->ExportWarmState()) {
        proto::WarmState* w = b->add_warm_states();
        w->set_compressor(std::get<0>(id));
        w->set_cf(std::get<1>(id));
        w->set_level(std::get<2>(id));
        w->set_key(key);
        s->exported_warm.push_back(std::move(values));
      }
    }
    for (size_t i = 0; i < s->exported_warm.size(); ++i) {
      tensors->push_back({s->key, static_cast<int64_t>(i),
                          CheckpointTensor::WARM_STATE, s->exported_warm[i]});
    }
  }
}

void CompressedReducer::InstallState(LoadedState loaded) {
  absl::MutexLock lock(&mu_, absl::Condition(&idle_));  // Step boundary.
  residuals_.Import(std::move(loaded.residuals));
  momenta_.Import(std::move(loaded.velocities));
  buckets_.clear();  // Rebuilt from the restored states on their next step.
  restored_ = std::move(loaded.restored);
  if (external_ != nullptr) external_->OnStateLoaded();
  bytes_sent_ = loaded.bytes_sent;
  absl::MutexLock published(&report_mu_);
  bytes_published_ = bytes_sent_;
}

}  // namespace terse
