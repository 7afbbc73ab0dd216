#include <string>

#include "common/control.pb.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

TEST(ControlProtoTest, RequestListRoundTrip) {
  proto::RequestList list;
  list.set_rank(3);
  proto::Request* r = list.add_requests();
  r->set_rank(3);
  r->set_name("layer1.weight");
  r->set_op(proto::ALLREDUCE);
  r->set_reduce_op(proto::AVERAGE);
  r->set_dtype(2);
  r->add_shape(64);
  r->add_shape(3);
  r->set_device(-1);
  std::string wire;
  ASSERT_TRUE(list.SerializeToString(&wire));

  proto::RequestList back;
  ASSERT_TRUE(back.ParseFromString(wire));
  ASSERT_EQ(back.requests_size(), 1);
  EXPECT_EQ(back.rank(), 3);
  EXPECT_EQ(back.requests(0).name(), "layer1.weight");
  EXPECT_EQ(back.requests(0).reduce_op(), proto::AVERAGE);
  EXPECT_EQ(back.requests(0).shape_size(), 2);
  EXPECT_EQ(back.requests(0).shape(1), 3);
  EXPECT_EQ(back.requests(0).device(), -1);
}

TEST(ControlProtoTest, ResponseListRoundTripAndGarbageIsRejected) {
  proto::ResponseList list;
  proto::Response* r = list.add_responses();
  r->set_kind(proto::Response::ERROR);
  r->add_names("w");
  r->set_error("mismatched shapes: ranks 0,2 [4] vs rank 1 [5]");
  list.set_shutdown(true);
  std::string wire = list.SerializeAsString();
  proto::ResponseList back;
  ASSERT_TRUE(back.ParseFromString(wire));
  EXPECT_TRUE(back.shutdown());
  EXPECT_EQ(back.responses(0).error(), r->error());

  // A truncated message from a peer fails to parse instead of crashing.
  proto::ResponseList truncated;
  EXPECT_FALSE(truncated.ParseFromString(wire.substr(0, wire.size() / 2)));
}

}  // namespace
}  // namespace terse
