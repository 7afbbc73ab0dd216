// CompressedReducer's cast fast path (BucketReducer::CastWireType and
// CastReduced): fp16/bf16 under a static policy, once the bucket's residual
// is known to be empty, skips the general path's copies (a, the decoded
// "what was sent" for error feedback, the squared norm): the executor casts
// while it fuses and runs the allreduce (whole and staged, or in pieces);
// this file decides the wire type and keeps the step's bookkeeping (policy
// step, report, bytes sent; the executor records the timeline).
#include "compressors/registry.h"
#include "engine/compressed_reducer.h"
#include "engine/compressed_reducer_internal.h"

namespace terse {
using namespace reducer_internal;  // NOLINT: this class's own internals.

DataType CompressedReducer::CastWireType(const BucketReduceContext& ctx) {
  const Bucket& bucket = *ctx.bucket;
  if (bucket.dtype != DataType::kFloat32 || !ctx.host_addressable ||
      ctx.op != ReduceOp::kSum || momenta_.enabled() ||
      bucket.members.empty()) {
    return DataType::kFloat32;
  }
  const CompressionChoice choice = ChooseCompressionFor(
      bucket.members.front().name, bucket.compression, config_);
  if ((choice.name != "fp16" && choice.name != "bf16") ||
      !ShouldCompress(bucket.bytes, config_)) {
    return DataType::kFloat32;
  }
  BeginStep();  // StateFor may add a bucket: not while a save reads them.
  const BucketState& state = StateFor(bucket, choice.name, choice.cf);
  // The first step after a start or a load takes the general path, which
  // adds (and erases) any restored residual.
  const bool fast =
      state.residual_empty && !state.adaptive && !state.accumulates;
  EndStep();
  if (!fast) return DataType::kFloat32;
  return choice.name == "fp16" ? DataType::kFloat16 : DataType::kBFloat16;
}

void CompressedReducer::CastReduced(const BucketReduceContext& ctx,
                                    DataType wire, Clock::time_point start,
                                    Clock::time_point end,
                                    const absl::Status& status) {
  const Bucket& bucket = *ctx.bucket;
  BeginStep();
  auto it = buckets_.find(bucket.id);
  if (it == buckets_.end()) {  // CastWireType made it; Forget runs between.
    EndStep();
    return;
  }
  BucketState& state = *it->second;
  (void)PreviousStepSeconds(state, start);
  // A static policy: the decision does not depend on this step's data, so
  // it is taken and observed together once the step's bytes have moved.
  const gravac::Decision decision = state.policy->Decide();
  const int64_t bytes = bucket.count * static_cast<int64_t>(DataTypeSize(wire));
  if (status.ok()) {
    state.policy->Observe(decision, gravac::StepStats{});
    const std::string sent = ReportName(decision.compressor, decision.level);
    Publish(BucketReport{bucket.id, static_cast<int>(bucket.members.size()),
                         bucket.bytes, state.policy->Describe(), sent,
                         decision.send_cf, bytes});
  }
  state.last_own = SecondsBetween(start, end);
  own_seconds_total_ += state.last_own;
  own_bytes_total_ += static_cast<double>(bucket.bytes);
  EndStep();
}

}  // namespace terse
