#include "engine/bucket_executor.h"

#include <algorithm>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config.h"

namespace terse {
namespace {

constexpr size_t kMaxNamesInTimeline = 8;

// The timeline's NEGOTIATE arguments of a bucket run whole: its size, type,
// op and first few member names.
TimelineArgs NegotiateArgs(const Bucket& bucket) {
  std::vector<std::string> names;
  for (size_t i = 0; i < bucket.members.size() && i < kMaxNamesInTimeline;
       ++i) {
    names.push_back(bucket.members[i].name);
  }
  if (bucket.members.size() > kMaxNamesInTimeline) names.push_back("...");
  return {{"bucket", absl::StrCat(bucket.id)},
          {"tensors", absl::StrCat(bucket.members.size())},
          {"bytes", absl::StrCat(bucket.bytes)},
          {"dtype", std::string(DataTypeName(bucket.dtype))},
          {"op", std::string(ReduceOpName(bucket.reduce_op))},
          {"names", absl::StrJoin(names, ",")}};
}

}  // namespace

int64_t PipelineChunkFor(int64_t configured, const Communicator& comm) {
  if (configured != kAutoPipelineChunk) return configured;
  return comm.local_size() == comm.size() ? kSharedMemoryPipelineChunk : 0;
}

BucketExecutor::BucketExecutor(Communicator* comm, BucketReducer* reducer,
                               Timeline* timeline, int64_t pipeline_chunk_bytes)
    : comm_(comm),
      reducer_(reducer),
      timeline_(timeline),
      pipeline_chunk_bytes_(pipeline_chunk_bytes) {}

double BucketExecutor::UnfuseScale(const Bucket& bucket) const {
  // Average is reduced as Sum: the division by the ranks comes here.
  return bucket.reduce_op == ReduceOp::kAverage
             ? bucket.postscale / comm_->size()
             : bucket.postscale;
}

int64_t BucketExecutor::PieceElements(DataType dtype) const {
  // Pieces of pipeline_chunk_bytes_ of the bucket's own (input) values.
  return std::max<int64_t>(
      1, pipeline_chunk_bytes_ / static_cast<int64_t>(DataTypeSize(dtype)));
}

void BucketExecutor::Forget(int bucket_id) {
  state_.erase(bucket_id);
  reducer_->Forget(bucket_id);
}

absl::Status BucketExecutor::Run(const Bucket& bucket,
                                 const std::vector<const TensorEntry*>& entries,
                                 Clock::time_point ready_at) {
  const Clock::time_point start = Clock::now();
  bytes_run_ += bucket.bytes;
  for (const BucketMember& m : bucket.members) {
    if (!step_names_.insert(absl::HashOf(m.name)).second) {
      ++steps_run_;
      step_names_.clear();
      step_names_.insert(absl::HashOf(m.name));
    }
  }
  PerBucket& state = state_[bucket.id];
  std::vector<FusionMember> members(bucket.members.size());
  Clock::time_point first_enqueued = ready_at;
  for (size_t i = 0; i < members.size(); ++i) {
    members[i].count = bucket.members[i].count;
    if (const TensorEntry* e = entries[i]) {
      members[i].in = e->input.data;
      members[i].out = e->output.data;
      first_enqueued = std::min(first_enqueued, e->enqueued);
    }
  }

  BucketReduceContext ctx;
  ctx.bucket = &bucket;
  ctx.op = bucket.reduce_op == ReduceOp::kAverage ? ReduceOp::kSum
                                                  : bucket.reduce_op;
  ctx.comm = comm_;
  ctx.timeline = timeline_;
  ctx.track = absl::StrCat("bucket ", bucket.id);
  ctx.step = state.runs++;
  // fp16/bf16 casts: prescale and cast in one pass into the wire buffer,
  // widen and scale in one pass out.
  const DataType wire = bucket.dtype == DataType::kFloat32
                            ? reducer_->CastWireType(ctx)
                            : DataType::kFloat32;
  const bool cast = wire != DataType::kFloat32;
  // One plain dense allreduce of the region (no compression state): the
  // executor may fuse and reduce it in pieces or staged ranges itself.
  const bool plain_dense = !cast && reducer_->ReducesPlainDense(ctx);
  // Large buckets the reducer sends as one plain allreduce (dense, or a
  // 16-bit cast) go piece by piece; a dense one fused in its outputs has no
  // copies to keep in cache.
  bool pipelined = false;
  if (pipeline_chunk_bytes_ > 0 && bucket.bytes > pipeline_chunk_bytes_) {
    const int64_t piece = PieceElements(bucket.dtype);
    if (cast) {
      ctx.data = state.buffer.PrepareCast(members, wire, piece);
      pipelined = true;
    } else if (plain_dense) {
      ctx.data = state.buffer.Prepare(members, bucket.dtype, piece);
      pipelined = !state.buffer.fused_in_outputs();
    }
  }
  if (pipelined) {
    absl::Status status =
        RunPipelined(bucket, members, ctx, state, cast ? wire : bucket.dtype);
    if (status.ok() && timeline_ != nullptr) {
      timeline_->Record(
          ctx.track, "NEGOTIATE", first_enqueued, ready_at,
          {{"bucket", absl::StrCat(bucket.id)},
           {"tensors", absl::StrCat(bucket.members.size())},
           {"bytes", absl::StrCat(bucket.bytes)},
           {"pipelined", "true"},
           {"cast", cast ? std::string(DataTypeName(wire)) : "none"}});
      timeline_->Record(ctx.track, "QUEUE", ready_at, start);
    }
    return status;
  }
  // A bucket reduced whole by one plain allreduce (dense, or a 16-bit cast)
  // is staged range by range, so a backend that can overlaps the copies
  // with its messages (MPI's ring across hosts,
  // Communicator::AllreduceStaged).
  if (cast) {
    ctx.data = state.buffer.PrepareCast(members, wire, /*piece=*/0);
    return RunStaged(bucket, members, ctx, state, wire, first_enqueued,
                     ready_at, start);
  }
  if (plain_dense) {
    ctx.data = state.buffer.Prepare(members, bucket.dtype, /*piece=*/0);
    if (!state.buffer.fused_in_outputs()) {
      return RunStaged(bucket, members, ctx, state, bucket.dtype,
                       first_enqueued, ready_at, start);
    }
  }
  ctx.data = state.buffer.Fuse(members, bucket.dtype, bucket.prescale);
  const Clock::time_point fused = Clock::now();

  absl::Status status = reducer_->Reduce(ctx);
  if (!status.ok()) return status;

  const Clock::time_point unfuse_start = Clock::now();
  state.buffer.Unfuse(members, bucket.dtype, UnfuseScale(bucket));

  if (timeline_ != nullptr) {
    const Clock::time_point end = Clock::now();
    timeline_->Record(ctx.track, "NEGOTIATE", first_enqueued, ready_at,
                      NegotiateArgs(bucket));
    timeline_->Record(ctx.track, "QUEUE", ready_at, start);
    timeline_->Record(
        ctx.track, "FUSE", start, fused,
        {{"in_place", state.buffer.fused_in_outputs() ? "true" : "false"},
         {"cast", "none"}});
    timeline_->Record(ctx.track, "UNFUSE", unfuse_start, end);
  }
  return absl::OkStatus();
}

absl::Status BucketExecutor::RunStaged(const Bucket& bucket,
                                       const std::vector<FusionMember>& members,
                                       const BucketReduceContext& ctx,
                                       PerBucket& state, DataType wire,
                                       Clock::time_point first_enqueued,
                                       Clock::time_point ready_at,
                                       Clock::time_point start) {
  const bool cast = wire != bucket.dtype;
  const double scale = UnfuseScale(bucket);
  const Clock::time_point reduce_start = Clock::now();
  // For the timeline: the copies before the first message (the first fill)
  // and after the last (the last drain); the rest overlaps the messages.
  Clock::time_point first_fill_end{};
  Clock::time_point last_drain_start{};
  auto fill = [&](int64_t begin, int64_t end) {
    if (cast) {
      state.buffer.FuseCastRange(members, wire, bucket.prescale, begin, end);
    } else {
      state.buffer.FuseRange(members, bucket.dtype, bucket.prescale, begin,
                             end);
    }
    if (first_fill_end == Clock::time_point{}) first_fill_end = Clock::now();
  };
  auto drain = [&](int64_t begin, int64_t end) {
    last_drain_start = Clock::now();
    if (cast) {
      state.buffer.UnfuseCastRange(members, wire, scale, begin, end);
    } else {
      state.buffer.UnfuseRange(members, bucket.dtype, scale, begin, end);
    }
  };
  const absl::Status status =
      comm_->AllreduceStaged(ctx.data, bucket.count, wire,
                             cast ? ReduceOp::kSum : ctx.op, {fill, drain});
  const Clock::time_point end = Clock::now();
  if (cast) reducer_->CastReduced(ctx, wire, reduce_start, end, status);
  if (!status.ok()) return status;
  if (!cast) reducer_->DenseReduced(ctx, reduce_start, end);
  if (timeline_ != nullptr) {
    if (first_fill_end == Clock::time_point{}) first_fill_end = reduce_start;
    if (last_drain_start == Clock::time_point{}) last_drain_start = end;
    timeline_->Record(ctx.track, "NEGOTIATE", first_enqueued, ready_at,
                      NegotiateArgs(bucket));
    timeline_->Record(ctx.track, "QUEUE", ready_at, start);
    timeline_->Record(
        ctx.track, "FUSE", reduce_start, first_fill_end,
        {{"in_place", "false"},
         {"staged", "true"},
         {"cast", cast ? std::string(DataTypeName(wire)) : "none"}});
    timeline_->Record(
        ctx.track, "COMMUNICATE", first_fill_end, last_drain_start,
        {{"algorithm", "allreduce"},
         {"bytes", absl::StrCat(bucket.count *
                                static_cast<int64_t>(DataTypeSize(wire)))},
         {"staged", "true"},
         {"wire", std::string(DataTypeName(wire))}});
    timeline_->Record(ctx.track, "UNFUSE", last_drain_start, end);
  }
  return absl::OkStatus();
}

absl::Status BucketExecutor::RunPipelined(
    const Bucket& bucket, const std::vector<FusionMember>& members,
    const BucketReduceContext& ctx, PerBucket& state, DataType wire) {
  const bool cast = wire != bucket.dtype;
  const int64_t wire_elem = static_cast<int64_t>(DataTypeSize(wire));
  const int64_t piece = PieceElements(bucket.dtype);
  const double scale = UnfuseScale(bucket);
  const ReduceOp op = cast ? ReduceOp::kSum : ctx.op;
  uint8_t* region = static_cast<uint8_t*>(ctx.data);
  // Staged a piece at a time, every piece is reduced at the region's start.
  const bool staged = state.buffer.staged_in_pieces();
  const Clock::time_point start = Clock::now();
  absl::Status status;
  for (int64_t begin = 0; begin < bucket.count && status.ok(); begin += piece) {
    const int64_t end = std::min(bucket.count, begin + piece);
    const Clock::time_point t0 = Clock::now();
    if (cast) {
      state.buffer.FuseCastRange(members, wire, bucket.prescale, begin, end);
    } else {
      state.buffer.FuseRange(members, bucket.dtype, bucket.prescale, begin,
                             end);
    }
    const Clock::time_point t1 = Clock::now();
    status = comm_->Allreduce(region + (staged ? 0 : begin * wire_elem),
                              end - begin, wire, op);
    if (!status.ok()) break;
    const Clock::time_point t2 = Clock::now();
    if (cast) {
      state.buffer.UnfuseCastRange(members, wire, scale, begin, end);
    } else {
      state.buffer.UnfuseRange(members, bucket.dtype, scale, begin, end);
    }
    if (timeline_ != nullptr) {
      const TimelineArgs piece_args = {
          {"elements", absl::StrCat(begin, "..", end)}};
      timeline_->Record(ctx.track, "FUSE", t0, t1, piece_args);
      timeline_->Record(ctx.track, "COMMUNICATE", t1, t2,
                        {{"algorithm", "allreduce"},
                         {"bytes", absl::StrCat((end - begin) * wire_elem)},
                         {"wire", std::string(DataTypeName(wire))}});
      timeline_->Record(ctx.track, "UNFUSE", t2, Clock::now(), piece_args);
    }
  }
  if (cast) {
    reducer_->CastReduced(ctx, wire, start, Clock::now(), status);
  } else if (status.ok()) {
    reducer_->DenseReduced(ctx, start, Clock::now());
  }
  return status;
}

}  // namespace terse
