// Alltoall and reducescatter: the split rule, the enqueue checks and the
// coordinator's response (unit), then ExchangeScenarios (engine_testing.h)
// on 2, 3 and 4 loopback ranks.
#include "engine/exchange.h"

#include <string>
#include <vector>

#include "engine/agreement.h"
#include "engine/engine_testing.h"
#include "gtest/gtest.h"

namespace terse {
namespace testing {
namespace {

TEST(ReducescatterRowsTest, HorovodSplit) {
  EXPECT_EQ(ReducescatterRows(10, 4), (std::vector<int64_t>{3, 3, 2, 2}));
  EXPECT_EQ(ReducescatterRows(8, 4), (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(ReducescatterRows(2, 3), (std::vector<int64_t>{1, 1, 0}));
  EXPECT_EQ(ReducescatterRows(0, 2), (std::vector<int64_t>{0, 0}));
  EXPECT_TRUE(ReducescatterRows(5, 0).empty());
}

TEST(CheckExchangeTest, FillsEqualSplits) {
  std::vector<float> data(12);
  TensorEntry e;
  e.name = "t";
  e.op = proto::ALLTOALL;
  e.input = TensorView(data.data(), 12, DataType::kFloat32);
  e.shape = {6, 2};
  ASSERT_TRUE(CheckExchange(e, 3).ok());
  EXPECT_EQ(e.splits, (std::vector<int64_t>{2, 2, 2}));
  EXPECT_TRUE(e.refused.empty());
  // 6 rows over 4 ranks: not an error here, a refusal for negotiation to
  // fail on every rank.
  e.splits.clear();
  ASSERT_TRUE(CheckExchange(e, 4).ok());
  EXPECT_EQ(e.refused,
            "the first dimension 6 is not divisible by the number of ranks 4; "
            "pass splits");
  EXPECT_TRUE(e.splits.empty());
}

proto::Request AlltoallRequest(int rank, std::vector<int64_t> splits,
                               int64_t cols) {
  proto::Request r;
  r.set_rank(rank);
  r.set_name("x");
  r.set_op(proto::ALLTOALL);
  r.set_dtype(static_cast<int32_t>(DataType::kFloat32));
  int64_t rows = 0;
  for (int64_t s : splits) {
    r.add_splits(s);
    rows += s;
  }
  r.add_shape(rows);
  r.add_shape(cols);
  return r;
}

TEST(AgreementTest, AlltoallResponseCarriesTheSplitMatrix) {
  const proto::Request a = AlltoallRequest(0, {1, 2}, 4);
  const proto::Request b = AlltoallRequest(1, {0, 5}, 4);
  ASSERT_TRUE(ValidateRequest(a, 2).ok());
  ASSERT_TRUE(ValidateRequest(b, 2).ok());
  const proto::Response r = BuildResponse("x", {&a, &b});
  ASSERT_EQ(r.kind(), proto::Response::EXECUTE) << r.error();
  EXPECT_EQ(
      std::vector<int64_t>(r.tensor_sizes().begin(), r.tensor_sizes().end()),
      (std::vector<int64_t>{1, 2, 0, 5}));
}

TEST(AgreementTest, AlltoallRequestsAreValidated) {
  proto::Request bad = AlltoallRequest(0, {1, 2}, 4);
  EXPECT_FALSE(ValidateRequest(bad, 3).ok());  // 2 splits for 3 ranks.
  bad.set_shape(0, 4);                         // Splits sum to 3.
  EXPECT_FALSE(ValidateRequest(bad, 2).ok());
  const proto::Request a = AlltoallRequest(0, {1, 1}, 4);
  const proto::Request b = AlltoallRequest(1, {1, 1}, 5);
  const proto::Response r = BuildResponse("x", {&a, &b});
  EXPECT_EQ(r.kind(), proto::Response::ERROR);
  EXPECT_NE(r.error().find("dimensions after the first [4] on rank 0 but [5] "
                           "on rank 1"),
            std::string::npos)
      << r.error();
}

struct Case {
  Scenario scenario;
  int size;
};

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (int size : {2, 3, 4}) {
    for (const Scenario& s : ExchangeScenarios()) cases.push_back({s, size});
  }
  return cases;
}

class ExchangeLoopbackTest : public ::testing::TestWithParam<Case> {};

TEST_P(ExchangeLoopbackTest, Runs) {
  absl::Status status = RunOnLoopback(GetParam().size, GetParam().scenario);
  EXPECT_TRUE(status.ok()) << status;
}

INSTANTIATE_TEST_SUITE_P(Scenarios, ExchangeLoopbackTest,
                         ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.scenario.name + "_" +
                                  std::to_string(info.param.size) + "ranks";
                         });

}  // namespace
}  // namespace testing
}  // namespace terse
