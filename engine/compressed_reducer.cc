#include "engine/compressed_reducer.h"

#include <algorithm>
#include <cstring>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/data_type.h"
#include "common/logging.h"
#include "common/status.h"
#include "compressors/kernels/count_sketch.h"
#include "compressors/kernels/randomk.h"
#include "compressors/registry.h"
#include "engine/fault_injection.h"
#include "gravac/policy_factory.h"

namespace terse {
namespace {

// Statistics exchanged per step: ||a||^2, ||g_min||^2, ||g_c||^2, the
// bucket's previous step time and ||what was sent||^2, then ||C(a)||^2 of
// each of the decision's gain probes (the same number on every rank: every
// rank takes the same decision).
constexpr int kNumStats = 9;
enum StatIndex {
  kNormEf = 0,
  kNormMin,
  kNormCandidate,
  kSeconds,
  kNormSent,
  kWindowDev,    // ||sum over the window of (g - sent)||^2, see below
  kWindowGrad,   // ||sum over the window of g||^2
  kWindowSteps,  // steps in the window so far
  kSentBytes,    // bytes this rank put on the wire for the bucket
};

// The window gain compares sums over ALL ranks: ||sum_r dev_r||^2 and
// ||sum_r grad_r||^2 of the ranks' window sums, not the mean of each rank's
// own norms. They differ where the ranks' deviations cancel: PowerSGD sends
// every rank's projection on a subspace found from the SUM of the ranks'
// matrices, so each rank's residual holds its own noise outside that
// subspace, which the sum over ranks averages out (on the slow-network MLP,
// integration/portfolio_gains.py: rank 4's window gain 0.81-0.84 per rank
// against 0.95-0.97 over the sum at steps 100-150, while top-k's two agree
// within 0.01). A rank cannot compute a norm of the sum alone, so on the
// step that closes a window each rank appends to the exchanged statistics
// its window sums (buckets of up to kWindowSketch floats) or their count
// sketch (kernels/count_sketch.h, kWindowSketch buckets, the same hashes on
// every rank); the exchange sums them over ranks, and the norms of those
// sums replace the slots kWindowDev and kWindowGrad.
constexpr int64_t kWindowSketch = 1024;

// Slots of the pending norms kept for Observe: the stats above with the
// time slot holding Accordion's accumulated norm instead.
constexpr int kAccumulatedSlot = kSeconds;

// A compressor's name as reports show it: PowerSGD with its rank.
std::string ReportName(const std::string& compressor, int64_t level) {
  return level > 0 ? absl::StrCat(compressor, ":", level) : compressor;
}

double SquaredNorm(const std::vector<float>& v) {
  double sum = 0;
  for (float x : v) sum += static_cast<double>(x) * x;
  return sum;
}

// FNV-1a: a bucket identity that is the same on every rank and every run.
uint64_t StableHash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::vector<Segment> SegmentsOf(const Bucket& bucket) {
  std::vector<Segment> segments;
  int64_t offset = 0;
  for (const BucketMember& m : bucket.members) {
    Segment seg;
    seg.name = m.name;
    seg.offset = offset;
    seg.count = m.count;
    seg.shape = m.shape;
    segments.push_back(seg);
    offset += m.count;
  }
  return segments;
}

std::string KeyOf(const Bucket& bucket) {
  return absl::StrJoin(bucket.members, ",",
                       [](std::string* out, const BucketMember& m) {
                         absl::StrAppend(out, m.name);
                       });
}

// The statistics as the policy reads them, from their sum over ranks: the
// mean over ranks, and the window slots from the window sums' sketches
// (see kWindowSketch), which are then dropped.
void FoldStatistics(int size, size_t sketch_at, int64_t sketch_k,
                    std::vector<double>* stats) {
  for (double& s : *stats) s /= size;
  if (sketch_k == 0) return;
  double dev = 0, grad = 0;
  for (int64_t i = 0; i < sketch_k; ++i) {
    dev += (*stats)[sketch_at + i] * (*stats)[sketch_at + i];
    grad +=
        (*stats)[sketch_at + sketch_k + i] * (*stats)[sketch_at + sketch_k + i];
  }
  (*stats)[kWindowDev] = dev;
  (*stats)[kWindowGrad] = grad;
  stats->resize(sketch_at);
}

}  // namespace

struct CompressedReducer::BucketState {
  std::string key;
  std::unique_ptr<gravac::Policy> policy;
  bool adaptive = false;  // Needs statistics averaged over ranks.
  bool accumulates = false;
  // By (name, cf, level, probe): probe instances keep state (PowerSGD's warm
  // start) apart from the ones that send.
  std::map<std::tuple<std::string, double, int64_t, bool>,
           std::unique_ptr<Compressor>>
      compressors;
  std::vector<Segment> segments;
  std::vector<float> a, level1, level2, accumulator, scratch;
  // Copies of the compressors' warm states while a checkpoint is written
  // (SaveBuckets; the reducer's lock is held until the write ends).
  std::vector<std::vector<float>> exported_warm;
  // Restored warm states, handed to each compressor when it is created.
  std::vector<proto::WarmState> restored_warm;
  // Window gain (Decision::window_gain_steps), over the window of
  // `window_choice`: window_grad = sum of g. With error feedback the sum of
  // g - sent telescopes to the residual's change e_T - e_0, so window_dev
  // holds e_0 (the residual at the window's start) and becomes e_T - e_0
  // on the step that closes it: one pass over g per step, not five. Under
  // TERSE_MOMENTUM_CORRECTION the residual is not a - sent, so g (this
  // step's gradient) is kept and window_dev sums g - sent step by step.
  bool window_active = false;  // This step sends a lossy window candidate.
  std::vector<float> g, window_grad, window_dev;
  int64_t window_steps = 0;
  // Set for the step that closes a window: where in the statistics its
  // window sums (or their sketches, window_sketch_k floats each) go, and
  // the sketch's seed.
  size_t window_sketch_at = 0;
  int64_t window_sketch_k = 0;
  uint64_t window_sketch_seed = 0;
  gravac::Choice window_choice;
  bool has_pending = false;
  gravac::Decision pending;
  // ef, min, candidate, accumulated, sent, then the gain probes'.
  std::vector<double> pending_norms = std::vector<double>(kNumStats, 0.0);
  bool has_last_start = false;
  Clock::time_point last_start;
  double last_own = 0;
  double own_total_at_last_start = 0;
  double bytes_total_at_last_start = 0;
  int64_t bytes = 0;
  // This reducer erased the bucket's residual and stored none since (false
  // after a restore: the checkpoint may hold one).
  bool residual_empty = false;
};

// What this rank sends for a bucket this step.
struct CompressedReducer::Sent {
  bool dense = true;
  Compressor* compressor = nullptr;
  Payload payload;
  std::unique_ptr<RoundState> rounds;   // Protocol B.
  std::vector<float>* local = nullptr;  // Decoded own contribution.
  std::string compressor_name = "none";
  double cf = 1;
  // Bytes this rank put on the wire for the bucket (filled by Communicate).
  int64_t bytes = 0;
  // Dense without residual or probes: reduced in place, `a` left unfilled.
  bool in_place = false;
  // Exchange the statistics (adaptive policies, see Decision::wants_stats).
  bool gather_stats = false;
};

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

absl::Status CompressedReducer::Reduce(const BucketReduceContext& ctx) {
  const Bucket& bucket = *ctx.bucket;
  const CompressionChoice choice = ChooseCompressionFor(
      bucket.members.front().name, bucket.compression, config_);
  const bool compressible = bucket.dtype == DataType::kFloat32 &&
                            ctx.host_addressable && ctx.op == ReduceOp::kSum &&
                            choice.name != "none" &&
                            ShouldCompress(bucket.bytes, config_);
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

absl::StatusOr<double> CompressedReducer::ProbeGain(
    BucketState& state, const gravac::Choice& choice,
    const CompressContext& cctx) {
  TERSE_ASSIGN_OR_RETURN(Compressor * c,
                         CompressorFor(state, choice.compressor, choice.cf,
                                       choice.level, /*probe=*/true));
  state.scratch.assign(state.a.size(), 0.0f);
  if (c->num_rounds() > 0) {
    // A rank alone: each round's buffer is its own "sum". The probe
    // instance's warm start stays local and never reaches a sending one.
    TERSE_ASSIGN_OR_RETURN(std::unique_ptr<RoundState> rounds,
                           c->BeginRounds(state.a, cctx));
    for (int r = 0; r < rounds->num_rounds(); ++r) {
      TERSE_RETURN_IF_ERROR(rounds->EndRound(r));
    }
    TERSE_RETURN_IF_ERROR(
        rounds->AccumulateLocal(absl::MakeSpan(state.scratch)));
  } else {
    Payload payload;
    TERSE_RETURN_IF_ERROR(c->Compress(state.a, cctx, &payload));
    TERSE_RETURN_IF_ERROR(
        c->Decompress(payload.bytes, absl::MakeSpan(state.scratch)));
  }
  return SquaredNorm(state.scratch);
}

void CompressedReducer::AddToWindowGain(BucketState& state,
                                        const std::vector<float>& local,
                                        std::vector<double>* stats) {
  const size_t n = state.window_grad.size();
  if (!state.g.empty()) {  // Momentum correction: sum g - sent.
    if (state.window_steps == 0) state.window_dev.assign(n, 0.0f);
    for (size_t i = 0; i < n; ++i) state.window_dev[i] += state.g[i] - local[i];
  }
  ++state.window_steps;
  (*stats)[kWindowSteps] = static_cast<double>(state.window_steps);
  // The policy reads the window's norms only when it closes, and they are
  // taken of the sums over ranks (FoldStatistics), so nothing more before.
  const int64_t k = state.window_sketch_k;
  if (k == 0) return;
  // The deviation; window_dev itself stays as it is, because a window
  // closed here may go on (a warm-up window the next decision lengthens).
  std::vector<float> deviation;
  if (state.g.empty()) {
    // e_T - e_0, e_T = a - local being what error feedback stores.
    deviation.resize(n);
    for (size_t i = 0; i < n; ++i) {
      deviation[i] = state.a[i] - local[i] - state.window_dev[i];
    }
  }
  const std::vector<float>& window_dev =
      state.g.empty() ? deviation : state.window_dev;
  absl::Span<double> dev =
      absl::MakeSpan(*stats).subspan(state.window_sketch_at, k);
  absl::Span<double> grad =
      absl::MakeSpan(*stats).subspan(state.window_sketch_at + k, k);
  if (static_cast<int64_t>(n) <= kWindowSketch) {
    std::copy(window_dev.begin(), window_dev.end(), dev.begin());
    std::copy(state.window_grad.begin(), state.window_grad.end(), grad.begin());
  } else {
    kernels::AddCountSketch(state.window_sketch_seed, 0, window_dev, dev);
    kernels::AddCountSketch(state.window_sketch_seed, 0, state.window_grad,
                            grad);
  }
}

absl::Status CompressedReducer::Communicate(const BucketReduceContext& ctx,
                                            BucketState& state, Sent* sent,
                                            std::vector<double>* stats) {
  Communicator* comm = ctx.comm;
  const int64_t n = ctx.bucket->count;
  const size_t num_stats = stats->size();
  const int64_t stats_bytes = static_cast<int64_t>(num_stats * sizeof(double));
  float* out = static_cast<float*>(ctx.data);
  bool stats_gathered = false;

  if (sent->dense) {
    sent->bytes = n * static_cast<int64_t>(sizeof(float));
    if (!sent->in_place) std::memcpy(out, state.a.data(), n * sizeof(float));
    TERSE_RETURN_IF_ERROR(
        comm->Allreduce(out, n, DataType::kFloat32, ReduceOp::kSum));
  } else if (sent->rounds != nullptr) {
    for (int r = 0; r < sent->rounds->num_rounds(); ++r) {
      absl::Span<float> buf = sent->rounds->RoundBuffer(r);
      sent->bytes += static_cast<int64_t>(buf.size() * sizeof(float));
      TERSE_RETURN_IF_ERROR(
          comm->Allreduce(buf.data(), static_cast<int64_t>(buf.size()),
                          DataType::kFloat32, ReduceOp::kSum));
      TERSE_RETURN_IF_ERROR(sent->rounds->EndRound(r));
    }
    std::fill(out, out + n, 0.0f);
    TERSE_RETURN_IF_ERROR(sent->rounds->AccumulateInto(absl::MakeSpan(out, n)));
    state.level1.assign(n, 0.0f);
    TERSE_RETURN_IF_ERROR(
        sent->rounds->AccumulateLocal(absl::MakeSpan(state.level1)));
    sent->local = &state.level1;
    if (state.adaptive && !state.window_active) {
      (*stats)[kNormSent] = SquaredNorm(state.level1);
    }
    if (state.window_active) AddToWindowGain(state, state.level1, stats);
  } else if (sent->compressor->summable()) {
    TERSE_ASSIGN_OR_RETURN(SummableRegion region,
                           sent->compressor->SummableBody(&sent->payload));
    sent->bytes = region.count * DataTypeSize(region.dtype);
    TERSE_RETURN_IF_ERROR(comm->Allreduce(region.data, region.count,
                                          region.dtype, ReduceOp::kSum));
    std::fill(out, out + n, 0.0f);
    TERSE_RETURN_IF_ERROR(sent->compressor->AccumulateInto(
        sent->payload.bytes, absl::MakeSpan(out, n)));
  } else {
    // Allgather the payloads with the statistics as a trailer.
    std::vector<uint8_t> message = std::move(sent->payload.bytes);
    const size_t payload_bytes = message.size();
    sent->bytes = static_cast<int64_t>(payload_bytes);
    (*stats)[kSentBytes] = static_cast<double>(sent->bytes);
    message.resize(payload_bytes + stats_bytes);
    std::memcpy(message.data() + payload_bytes, stats->data(), stats_bytes);
    MaybeCorruptPayloadForTest(rank_, message.data(), payload_bytes);
    std::vector<uint8_t> gathered;
    std::vector<int64_t> sizes;
    if (sent->compressor->fixed_size()) {
      const int64_t each = static_cast<int64_t>(message.size());
      gathered.resize(each * comm->size());
      TERSE_RETURN_IF_ERROR(
          comm->Allgather(message.data(), gathered.data(), each));
      sizes.assign(comm->size(), each);
    } else {
      TERSE_RETURN_IF_ERROR(comm->AllgathervUnknownSizes(
          message.data(), static_cast<int64_t>(message.size()), &gathered,
          &sizes));
    }
    std::fill(out, out + n, 0.0f);
    std::vector<double> total(num_stats, 0.0);
    size_t at = 0;
    for (int r = 0; r < comm->size(); ++r) {
      const int64_t size = sizes[r];
      if (size < stats_bytes) {
        return absl::InvalidArgumentError(
            absl::StrCat("bucket ", ctx.bucket->id, ": rank ", r, " sent ",
                         size, " bytes, too short for a payload"));
      }
      absl::Span<const uint8_t> payload(gathered.data() + at,
                                        size - stats_bytes);
      absl::Status decoded =
          sent->compressor->AccumulateInto(payload, absl::MakeSpan(out, n));
      if (!decoded.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "bucket ", ctx.bucket->id, ": the ", sent->compressor_name,
            " payload from rank ", r, " does not decode: ", decoded.message()));
      }
      std::vector<double> theirs(num_stats);
      std::memcpy(theirs.data(), gathered.data() + at + size - stats_bytes,
                  stats_bytes);
      for (size_t i = 0; i < num_stats; ++i) total[i] += theirs[i];
      at += size;
    }
    *stats = total;
    stats_gathered = true;
  }
  if (!stats_gathered) (*stats)[kSentBytes] = static_cast<double>(sent->bytes);
  if (!stats_gathered && state.adaptive && !sent->gather_stats) {
    std::fill(stats->begin(), stats->end(), 0.0);  // The same on every rank.
  } else if (!stats_gathered && state.adaptive) {
    std::vector<double> all(num_stats * comm->size());
    TERSE_RETURN_IF_ERROR(
        comm->Allgather(stats->data(), all.data(), stats_bytes));
    std::vector<double> total(num_stats, 0.0);
    for (int r = 0; r < comm->size(); ++r) {  // Rank order: same everywhere.
      for (size_t i = 0; i < num_stats; ++i) {
        total[i] += all[r * num_stats + i];
      }
    }
    *stats = total;
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
    state.g.clear();
  }
  state.window_active = window_gain && !in_place;
  // Does this step close the window (see kWindowSketch)?
  state.window_sketch_at = kNumStats + decision.gain_probes.size();
  state.window_sketch_k = state.window_active && state.window_steps + 1 >=
                                                     decision.window_gain_steps
                              ? std::min(n, kWindowSketch)
                              : 0;
  state.window_sketch_seed = kernels::MixSeed(
      config_.seed, StableHash(state.key), static_cast<uint64_t>(ctx.step));
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
  cctx.stream = StableHash(state.key);
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
  // A lossy window candidate's gain is its window gain: no step norms.
  stats[kNormEf] = in_place || state.window_active ? 0.0 : SquaredNorm(state.a);
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
  if (state.adaptive && sent.local != nullptr && !state.window_active) {
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
  bytes_sent_ = loaded.bytes_sent;
  absl::MutexLock published(&report_mu_);
  bytes_published_ = bytes_sent_;
}

}  // namespace terse
