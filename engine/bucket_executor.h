// BucketExecutor: runs one complete allreduce bucket,
//   fuse (+ prescale) -> reduce (BucketReducer) -> scale -> unfuse,
// with a persistent fusion buffer per bucket and the bucket's timeline phases
// (NEGOTIATE, QUEUE, FUSE, the reducer's phases, UNFUSE).
//
// A float32 bucket the reducer sends as a plain 16-bit cast
// (BucketReducer::CastWireType: fp16/bf16) is fused straight into 16-bit
// wire values and widened back out: one pass in, one pass out, with the
// reducer's accounting (BucketReducer::CastReduced) after the allreduce.
//
// A plain dense bucket that is not pipelined (below) and not fused in its
// outputs, and a cast bucket that is not pipelined, are reduced whole
// through Communicator::AllreduceStaged: the backend calls back to fuse
// (cast) and unfuse (widen) it range by range, so MPI's ring across hosts
// overlaps those copies with its messages (other backends fuse all,
// allreduce, unfuse all, as before). On the data-centre network
// of integration/netns this took the 1,000-tensor bucket of bench/engine
// from 457-460 ms to 436-440 ms, level with its tensors adjacent in memory
// (docs/results/engine_speed.md, session 16).
//
// A bucket the reducer sends as one plain dense allreduce
// (BucketReducer::ReducesPlainDense) that is larger than `pipeline_chunk_bytes`
// and not fused in its outputs is pipelined: copied in, allreduced and copied
// out one piece of that many bytes at a time, so each piece is still in cache
// when it is reduced and copied out (a whole 32 MB bucket is not: its two
// copies then run at memory speed, competing with the collective for the same
// cores). Every piece is staged in the same piece-sized buffer
// (FusionBuffer::Prepare with a piece), not in a slice of a bucket-sized
// one: the staging bytes stay in cache from one piece to the next, which
// made the 1,000-tensor bucket of bench/engine 1.4-1.7x faster here
// (docs/results/engine_speed.md, session 14). Results are those of the
// whole-bucket path: every element is reduced by the same allreduce of the
// same values, in pieces.
//
// A cast bucket (above) larger than `pipeline_chunk_bytes` is pipelined the
// same way, in 16-bit pieces: cast, allreduce, widen, piece by piece, with
// the reducer's accounting (BucketReducer::CastReduced) once at the end.
//
// Average is reduced as Sum and divided by the number of ranks in the unfuse
// step, together with the postscale; Min/Max are passed through.
//
// Not thread-safe; used by the engine's background thread only. Every rank
// runs the same buckets in the same order (the reducer is collective).
#ifndef TERSE_ENGINE_BUCKET_EXECUTOR_H_
#define TERSE_ENGINE_BUCKET_EXECUTOR_H_

#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "collectives/communicator.h"
#include "engine/bucket_assigner.h"
#include "engine/bucket_reducer.h"
#include "engine/fusion_buffer.h"
#include "engine/tensor_entry.h"
#include "engine/timeline.h"

namespace terse {

// The pipeline piece (bytes) for a process set whose collectives run on
// `comm`: `configured` (Config::pipeline_chunk_bytes) itself, or for
// kAutoPipelineChunk, kSharedMemoryPipelineChunk when every rank of `comm` is
// on this host and 0 (whole buckets) otherwise. Through shared memory the
// collective is bound by memory traffic, which cache-resident pieces cut;
// over a network each piece adds a collective's latency instead (the
// 1,000-tensor bucket of bench/engine on the data-centre network of
// integration/netns: 744 ms whole, 1,042 ms in 1 MiB pieces).
int64_t PipelineChunkFor(int64_t configured, const Communicator& comm);

class BucketExecutor {
 public:
  // None owned; `timeline` may be null. `pipeline_chunk_bytes` <= 0: never
  // pipeline (TERSE_PIPELINE_CHUNK).
  BucketExecutor(Communicator* comm, BucketReducer* reducer, Timeline* timeline,
                 int64_t pipeline_chunk_bytes = 0);

  // Runs `bucket`. entries[i] is this rank's op for member i, or null when
  // this rank has none (it joined): it contributes zeros and the result is
  // dropped. `ready_at`: when the bucket became ready on every rank. Does not
  // complete the entries; the caller does, with the returned status (an
  // error is from the reducer and fatal).
  absl::Status Run(const Bucket& bucket,
                   const std::vector<const TensorEntry*>& entries,
                   Clock::time_point ready_at);

  // Bytes of the buckets run so far (every rank runs the same buckets, so
  // the same on every rank).
  int64_t bytes_run() const { return bytes_run_; }
  // Training steps seen, counted as Horovod's autotune does: a step ends
  // when a tensor name is reduced a second time since the last step ended
  // (also the same on every rank).
  int64_t steps_run() const { return steps_run_; }

  // The bucket was dropped or changed: release its buffer and state.
  void Forget(int bucket_id);
  // Tensor names no longer tracked: forwarded to the reducer.
  void ForgetTensors(const std::vector<std::string>& names) {
    if (!names.empty()) reducer_->ForgetTensors(names);
  }

 private:
  struct PerBucket {
    FusionBuffer buffer;
    int64_t runs = 0;
  };

  // A bucket reduced whole by one plain allreduce: dense and not fused in
  // its outputs (`wire` is the bucket's dtype; its region was Prepare()d
  // whole in `state`'s buffer, ctx.data), or a 16-bit cast (`wire` is the
  // cast's type; PrepareCast()d whole). Communicator::AllreduceStaged fuses
  // and unfuses it range by range.
  absl::Status RunStaged(const Bucket& bucket,
                         const std::vector<FusionMember>& members,
                         const BucketReduceContext& ctx, PerBucket& state,
                         DataType wire, Clock::time_point first_enqueued,
                         Clock::time_point ready_at, Clock::time_point start);
  // The factor the unfuse step applies: the postscale, divided by the
  // number of ranks for Average (reduced as Sum).
  double UnfuseScale(const Bucket& bucket) const;
  // Elements of `dtype` in one pipeline piece (at least 1).
  int64_t PieceElements(DataType dtype) const;
  // The pipelined path (see the class comment): the bucket's region was
  // Prepare()d (PrepareCast()d when `wire` is not the bucket's dtype: a
  // 16-bit cast the reducer chose) in `state`'s buffer and ctx.data points
  // at it.
  absl::Status RunPipelined(const Bucket& bucket,
                            const std::vector<FusionMember>& members,
                            const BucketReduceContext& ctx, PerBucket& state,
                            DataType wire);

  Communicator* const comm_;
  BucketReducer* const reducer_;
  Timeline* const timeline_;
  const int64_t pipeline_chunk_bytes_;
  absl::flat_hash_map<int, PerBucket> state_;
  int64_t bytes_run_ = 0;
  int64_t steps_run_ = 0;
  // Hashes of the names reduced in the current step (steps_run()).
  absl::flat_hash_set<size_t> step_names_;
};

}  // namespace terse

#endif  // TERSE_ENGINE_BUCKET_EXECUTOR_H_
