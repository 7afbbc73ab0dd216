#include "engine/bucket_reducer.h"

#include "absl/strings/str_cat.h"

namespace terse {

absl::Status DenseAllreduceReducer::Reduce(const BucketReduceContext& ctx) {
  const Clock::time_point start = Clock::now();
  absl::Status status = ctx.comm->Allreduce(ctx.data, ctx.bucket->count,
                                            ctx.bucket->dtype, ctx.op);
  if (ctx.timeline != nullptr) {
    ctx.timeline->Record(ctx.track, "COMMUNICATE", start, Clock::now(),
                         {{"algorithm", "allreduce"},
                          {"bytes", absl::StrCat(ctx.bucket->bytes)}});
  }
  return status;
}

}  // namespace terse
