// CompressedReducer's exchange of a bucket (compressed_reducer.h): the gain
// probes, the window-gain sums and the collectives that move what each rank
// sends together with the statistics.
#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/data_type.h"
#include "common/status.h"
#include "compressors/kernels/count_sketch.h"
#include "engine/compressed_reducer.h"
#include "engine/compressed_reducer_internal.h"
#include "engine/fault_injection.h"

namespace terse {
using namespace reducer_internal;  // NOLINT: this class's own internals.

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
    if (sent->step_norms) (*stats)[kNormSent] = SquaredNorm(state.level1);
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

}  // namespace terse
