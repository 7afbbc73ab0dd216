#include "engine/agreement.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

using ::testing::HasSubstr;

proto::Request Req(int rank, std::vector<int64_t> shape, int dtype = 0) {
  proto::Request r;
  r.set_rank(rank);
  r.set_name("w");
  r.set_op(proto::ALLREDUCE);
  r.set_reduce_op(proto::SUM);
  r.set_dtype(dtype);
  for (int64_t d : shape) r.add_shape(d);
  r.set_device(-1);
  r.set_prescale(1);
  r.set_postscale(1);
  return r;
}

std::vector<const proto::Request*> Ptrs(const std::vector<proto::Request>& v) {
  std::vector<const proto::Request*> p;
  for (const auto& r : v) p.push_back(&r);
  return p;
}

TEST(AgreementTest, AgreeingRequestsExecute) {
  std::vector<proto::Request> reqs = {Req(0, {4, 2}), Req(1, {4, 2})};
  proto::Response r = BuildResponse("w", Ptrs(reqs));
  EXPECT_EQ(r.kind(), proto::Response::EXECUTE);
  EXPECT_EQ(r.shape_size(), 2);
  EXPECT_EQ(r.names(0), "w");
}

TEST(AgreementTest, ShapeMismatchNamesTheRanksOnEachSide) {
  std::vector<proto::Request> reqs = {Req(0, {4}), Req(1, {5}), Req(2, {4}),
                                      Req(3, {6})};
  proto::Response r = BuildResponse("w", Ptrs(reqs));
  EXPECT_EQ(r.kind(), proto::Response::ERROR);
  EXPECT_EQ(r.error(),
            "tensor 'w': shape [4] on ranks 0,2 but [5] on rank 1 and [6] on "
            "rank 3");
}

TEST(AgreementTest, SeveralFieldsAreAllReported) {
  std::vector<proto::Request> reqs = {Req(0, {4}), Req(1, {5}, 3)};
  proto::Response r = BuildResponse("w", Ptrs(reqs));
  EXPECT_THAT(r.error(), HasSubstr("dtype f32 on rank 0 but f64 on rank 1"));
  EXPECT_THAT(r.error(), HasSubstr("shape [4] on rank 0 but [5] on rank 1"));
}

TEST(AgreementTest, JoinedRanksAreSkipped) {
  std::vector<proto::Request> reqs = {Req(0, {4}), Req(2, {4})};
  proto::Response r = BuildResponse("w", {&reqs[0], nullptr, &reqs[1]});
  EXPECT_EQ(r.kind(), proto::Response::EXECUTE);
}

TEST(AgreementTest, AllgatherCollectsFirstDimsAndChecksTheRest) {
  std::vector<proto::Request> reqs = {Req(0, {2, 3}), Req(1, {5, 3})};
  for (auto& q : reqs) q.set_op(proto::ALLGATHER);
  proto::Response r = BuildResponse("g", Ptrs(reqs));
  ASSERT_EQ(r.kind(), proto::Response::EXECUTE);
  EXPECT_EQ(r.tensor_sizes(0), 2);
  EXPECT_EQ(r.tensor_sizes(1), 5);
  EXPECT_EQ(r.shape(0), 7);
  reqs[1].set_shape(1, 4);
  EXPECT_THAT(BuildResponse("g", Ptrs(reqs)).error(),
              HasSubstr("dimensions after the first [3] on rank 0 but [4]"));
}

TEST(AgreementTest, ValidateRejectsMalformedPeerRequests) {
  EXPECT_TRUE(ValidateRequest(Req(0, {4}), 2).ok());
  proto::Request r = Req(5, {4});
  EXPECT_FALSE(ValidateRequest(r, 2).ok());  // Rank out of range.
  r = Req(0, {-1});
  EXPECT_FALSE(ValidateRequest(r, 2).ok());
  r = Req(0, {4}, 99);
  EXPECT_FALSE(ValidateRequest(r, 2).ok());
  r = Req(0, {4});
  r.set_reduce_op(static_cast<proto::ReduceOp>(42));
  EXPECT_FALSE(ValidateRequest(r, 2).ok());
  r = Req(0, {4}, 4);  // i32 average.
  r.set_reduce_op(proto::AVERAGE);
  EXPECT_FALSE(ValidateRequest(r, 2).ok());
  r = Req(0, {4});
  r.set_op(proto::BROADCAST);
  r.set_root_rank(2);
  EXPECT_FALSE(ValidateRequest(r, 2).ok());
}

TEST(AgreementTest, CompressionMismatchNamesTheTensorAndTheRanks) {
  std::vector<proto::Request> reqs = {Req(0, {4}), Req(1, {4}), Req(2, {4})};
  reqs[0].set_compression("fp16");
  reqs[2].set_compression("fp16");
  proto::Response r = BuildResponse("w", Ptrs(reqs));
  EXPECT_EQ(r.kind(), proto::Response::ERROR);
  EXPECT_EQ(r.error(),
            "tensor 'w': compression fp16 on ranks 0,2 but default (engine "
            "policy) on rank 1");
  reqs[1].set_compression("topk:100");
  r = BuildResponse("w", Ptrs(reqs));
  EXPECT_THAT(r.error(), HasSubstr("fp16 on ranks 0,2 but topk:100 on rank 1"));
}

TEST(AgreementTest, AgreedCompressionTravelsInTheResponse) {
  std::vector<proto::Request> reqs = {Req(0, {4}), Req(1, {4})};
  for (auto& q : reqs) q.set_compression("topk:100");
  proto::Response r = BuildResponse("w", Ptrs(reqs));
  EXPECT_EQ(r.kind(), proto::Response::EXECUTE);
  EXPECT_EQ(r.compression(), "topk:100");
  for (auto& q : reqs) q.clear_compression();
  EXPECT_EQ(BuildResponse("w", Ptrs(reqs)).compression(), "");
}

TEST(AgreementTest, ValidateRejectsBadCompressionSpecs) {
  proto::Request r = Req(0, {4});
  for (const char* good : {"fp16", "topk:100", "gravac", "none"}) {
    r.set_compression(good);
    EXPECT_TRUE(ValidateRequest(r, 2).ok()) << good;
  }
  for (const char* bad : {"zip", "topk:0.5", "topk:abc", "topk:100.0", ":"}) {
    r.set_compression(bad);
    EXPECT_THAT(ValidateRequest(r, 2).message(),
                HasSubstr("bad compression spec"))
        << bad;
  }
  r = Req(0, {4});
  r.set_op(proto::BROADCAST);
  r.set_compression("fp16");
  EXPECT_FALSE(ValidateRequest(r, 2).ok());
}

}  // namespace
}  // namespace terse
