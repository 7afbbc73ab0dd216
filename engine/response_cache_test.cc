#include "engine/response_cache.h"

#include "gtest/gtest.h"

namespace terse {
namespace {

proto::Response Allreduce(const std::string& name, int64_t n) {
  proto::Response r;
  r.set_kind(proto::Response::EXECUTE);
  r.set_op(proto::ALLREDUCE);
  r.add_names(name);
  r.set_dtype(0);
  r.set_device(-1);
  r.set_reduce_op(proto::SUM);
  r.add_shape(n);
  r.set_prescale(1);
  r.set_postscale(1);
  return r;
}

proto::Request RequestFor(const proto::Response& r) {
  proto::Request q;
  q.set_name(r.names(0));
  q.set_op(r.op());
  q.set_dtype(r.dtype());
  q.set_device(r.device());
  q.set_reduce_op(r.reduce_op());
  *q.mutable_shape() = r.shape();
  q.set_prescale(r.prescale());
  q.set_postscale(r.postscale());
  return q;
}

TEST(ResponseCacheTest, PutFindMatch) {
  ResponseCache cache(4);
  int64_t evicted;
  const int64_t a = cache.Put(Allreduce("a", 3), &evicted);
  EXPECT_EQ(a, 0);
  EXPECT_EQ(evicted, -1);
  EXPECT_EQ(cache.Find("a"), 0);
  EXPECT_EQ(cache.Find("b"), -1);
  proto::Request q = RequestFor(Allreduce("a", 3));
  EXPECT_TRUE(cache.Matches(a, q));
  q.set_shape(0, 4);
  EXPECT_FALSE(cache.Matches(a, q));
  q = RequestFor(Allreduce("a", 3));
  q.set_reduce_op(proto::MAX);
  EXPECT_FALSE(cache.Matches(a, q));
  q = RequestFor(Allreduce("a", 3));
  q.set_postscale(0.5);
  EXPECT_FALSE(cache.Matches(a, q));
  q = RequestFor(Allreduce("a", 3));
  q.set_device(0);  // CUDA instead of CPU.
  EXPECT_FALSE(cache.Matches(a, q));
  // A different per-call compression is a cache miss (to the coordinator).
  q = RequestFor(Allreduce("a", 3));
  q.set_compression("fp16");
  EXPECT_FALSE(cache.Matches(a, q));
  proto::Response fp16 = Allreduce("f", 3);
  fp16.set_compression("fp16");
  const int64_t f = cache.Put(fp16, &evicted);
  q = RequestFor(fp16);
  q.set_compression("fp16");
  EXPECT_TRUE(cache.Matches(f, q));
  q.clear_compression();
  EXPECT_FALSE(cache.Matches(f, q));
}

TEST(ResponseCacheTest, OnlyExecutedUngroupedAllreduceBroadcastAllgather) {
  proto::Response r = Allreduce("a", 1);
  EXPECT_TRUE(ResponseCache::Cacheable(r));
  r.set_op(proto::BROADCAST);
  EXPECT_TRUE(ResponseCache::Cacheable(r));
  r.set_op(proto::ALLGATHER);
  EXPECT_FALSE(ResponseCache::Cacheable(r));  // Without every rank's rows.
  r.add_tensor_sizes(1);
  EXPECT_TRUE(ResponseCache::Cacheable(r));
  for (proto::OpType op :
       {proto::ALLTOALL, proto::REDUCESCATTER, proto::BARRIER, proto::JOIN}) {
    r.set_op(op);
    EXPECT_FALSE(ResponseCache::Cacheable(r)) << op;
  }
  r.set_op(proto::ALLREDUCE);
  r.set_group("g");
  EXPECT_FALSE(ResponseCache::Cacheable(r));
  r.clear_group();
  r.set_kind(proto::Response::ERROR);
  EXPECT_FALSE(ResponseCache::Cacheable(r));
}

// An allgather of [2, 3] on rank 0, [1, 3] on rank 1 and [4, 3] on rank 2:
// the response holds the gathered [7, 3] and every rank's first dimension.
TEST(ResponseCacheTest, AnAllgatherMatchesEachRankByItsOwnFirstDimension) {
  proto::Response r;
  r.set_kind(proto::Response::EXECUTE);
  r.set_op(proto::ALLGATHER);
  r.add_names("g");
  r.set_dtype(0);
  r.set_device(-1);
  r.add_shape(7);
  r.add_shape(3);
  for (int64_t d : {2, 1, 4}) r.add_tensor_sizes(d);
  r.set_prescale(1);
  r.set_postscale(1);
  ResponseCache cache(2);
  int64_t evicted;
  const int64_t slot = cache.Put(r, &evicted);
  const int64_t rows[] = {2, 1, 4};
  for (int rank = 0; rank < 3; ++rank) {
    proto::Request q = RequestFor(r);
    q.set_rank(rank);
    q.set_shape(0, rows[rank]);
    EXPECT_TRUE(cache.Matches(slot, q)) << rank;
    q.set_shape(0, rows[rank] + 1);  // A different first dimension.
    EXPECT_FALSE(cache.Matches(slot, q)) << rank;
    q.set_shape(0, rows[rank]);
    q.set_shape(1, 4);  // Different trailing dimensions.
    EXPECT_FALSE(cache.Matches(slot, q)) << rank;
  }
  proto::Request outside = RequestFor(r);
  outside.set_rank(3);  // No such rank in the response.
  outside.set_shape(0, 2);
  EXPECT_FALSE(cache.Matches(slot, outside));
}

TEST(ResponseCacheTest, EvictsLeastRecentlyUsedAndReusesTheLowestSlot) {
  ResponseCache cache(3);
  int64_t evicted;
  cache.Put(Allreduce("a", 1), &evicted);
  cache.Put(Allreduce("b", 1), &evicted);
  cache.Put(Allreduce("c", 1), &evicted);
  cache.Touch(cache.Find("a"));  // LRU order now b, c, a.
  const int64_t d = cache.Put(Allreduce("d", 1), &evicted);
  EXPECT_EQ(evicted, 1);  // b's slot.
  EXPECT_EQ(d, 1);
  EXPECT_EQ(cache.Find("b"), -1);
  EXPECT_EQ(cache.size(), 3);
  cache.Erase(cache.Find("a"));
  EXPECT_EQ(cache.Put(Allreduce("e", 1), &evicted), 0);
  EXPECT_EQ(evicted, -1);
}

TEST(ResponseCacheTest, TwoCachesFedTheSameHistoryAgree) {
  ResponseCache x(5), y(5);
  int64_t ex, ey;
  for (int i = 0; i < 40; ++i) {
    const std::string name = "t" + std::to_string((i * 7) % 11);
    ASSERT_EQ(x.Put(Allreduce(name, i), &ex), y.Put(Allreduce(name, i), &ey));
    ASSERT_EQ(ex, ey);
    if (i % 3 == 0) {
      x.Touch(i % 5);
      y.Touch(i % 5);
    }
  }
}

TEST(ResponseCacheTest, ZeroCapacityCachesNothing) {
  ResponseCache cache(0);
  int64_t evicted;
  EXPECT_EQ(cache.Put(Allreduce("a", 1), &evicted), -1);
  EXPECT_EQ(cache.Find("a"), -1);
}

}  // namespace
}  // namespace terse
