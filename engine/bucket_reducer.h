// BucketReducer: the reduction step of a fused bucket, and the seam where
// compression plugs in.
//
// The engine runs every allreduce bucket through one code path:
//   fuse (+ prescale) -> BucketReducer::Reduce -> scale -> unfuse -> callbacks
// A reducer replaces the fused region by its reduction over every rank. The
// first implementation is a dense allreduce; a compressing reducer (issues
// 5/7) compresses with error feedback, communicates the payload (allreduce or
// allgather), decompresses and sums, recording COMPRESS / COMMUNICATE /
// DECOMPRESS on the timeline, and keeps its state per bucket id.
//
// A reducer is used by the engine's background thread only; Reduce is
// collective (every rank calls it for the same bucket in the same order).
#ifndef TERSE_ENGINE_BUCKET_REDUCER_H_
#define TERSE_ENGINE_BUCKET_REDUCER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "collectives/communicator.h"
#include "engine/bucket_assigner.h"
#include "engine/timeline.h"

namespace terse {

struct BucketReduceContext {
  const Bucket* bucket = nullptr;  // Membership, dtype, key.
  // The fused region: bucket->count elements of bucket->dtype holding this
  // rank's (prescaled) contribution; replaced by the reduction.
  void* data = nullptr;
  // Sum, Min or Max. An Average bucket arrives as Sum: the engine divides.
  ReduceOp op = ReduceOp::kSum;
  Communicator* comm = nullptr;
  Timeline* timeline = nullptr;  // Null: no timeline.
  std::string track;             // The bucket's timeline track.
  int64_t step = 0;              // Times this bucket ran before.
  // Whether the host may read and write `data` now: true for CPU buckets
  // and for simulated-device buckets after the engine stream was
  // synchronised; false for CUDA memory (a compressing reducer then sends
  // the bucket dense).
  bool host_addressable = true;
};

class BucketReducer {
 public:
  virtual ~BucketReducer() = default;

  // Reduces ctx.data in place across ranks. An error is fatal for the engine.
  virtual absl::Status Reduce(const BucketReduceContext& ctx) = 0;

  // The cast fast path. When this reducer would send the bucket of `ctx`
  // (whose ctx.data is not yet filled) as its float32 values cast to 16 bits
  // and summed by one allreduce, with no other state to update (fp16/bf16
  // under a static policy): the wire type, kFloat16 or kBFloat16. The caller
  // then fuses the bucket straight into wire values, allreduces them (Sum)
  // itself and calls CastReduced instead of Reduce. Otherwise (the default)
  // kFloat32: call Reduce.
  virtual DataType CastWireType(const BucketReduceContext& ctx) {
    (void)ctx;
    return DataType::kFloat32;
  }

  // The pipelined dense path. True when this reducer would reduce the
  // bucket of `ctx` (whose ctx.data is not yet filled) by one plain
  // allreduce of the region with ctx.op, with no state to read or update
  // besides its accounting (no compression, no momentum). The caller may
  // then reduce the region itself, in pieces (BucketExecutor pipelines the
  // copies and allreduces of a large bucket), and must call DenseReduced
  // once the whole region is reduced. Default: false (call Reduce).
  virtual bool ReducesPlainDense(const BucketReduceContext& ctx) {
    (void)ctx;
    return false;
  }

  // Accounting of a bucket the caller reduced by plain allreduces after
  // ReducesPlainDense said true: `start`..`end` spans its reduction.
  virtual void DenseReduced(const BucketReduceContext& ctx,
                            Clock::time_point start, Clock::time_point end) {
    (void)ctx;
    (void)start;
    (void)end;
  }

  // Accounting of a bucket the caller reduced itself as `wire` values (the
  // type CastWireType returned for it just before), whole or in pieces, by
  // allreduces spanning `start`..`end`, with `status` their outcome. An
  // error status is fatal for the engine. The caller records the timeline.
  // Default: nothing.
  virtual void CastReduced(const BucketReduceContext& ctx, DataType wire,
                           Clock::time_point start, Clock::time_point end,
                           const absl::Status& status) {
    (void)ctx;
    (void)wire;
    (void)start;
    (void)end;
    (void)status;
  }

  // The bucket was dropped or changed membership: forget its state.
  virtual void Forget(int bucket_id) { (void)bucket_id; }

  // The engine stopped tracking these tensor names (BucketAssigner's
  // TakeForgotten): drop per-name state (residuals, velocities).
  virtual void ForgetTensors(const std::vector<std::string>& names) {
    (void)names;
  }
};

// Dense allreduce of the whole region (records COMMUNICATE).
class DenseAllreduceReducer : public BucketReducer {
 public:
  absl::Status Reduce(const BucketReduceContext& ctx) override;
  bool ReducesPlainDense(const BucketReduceContext& ctx) override {
    (void)ctx;
    return true;
  }
};

}  // namespace terse

#endif  // TERSE_ENGINE_BUCKET_REDUCER_H_
