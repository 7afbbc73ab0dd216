// Every engine scenario (engine_testing.h) on loopback ranks: 3 and 4
// threads of this process, each with its own engine.
#include <string>
#include <vector>

#include "engine/engine_testing.h"
#include "gtest/gtest.h"

namespace terse {
namespace testing {
namespace {

struct Case {
  Scenario scenario;
  int size;
};

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  std::vector<Scenario> all = CorrectnessScenarios();
  for (Scenario& s : ErrorScenarios()) all.push_back(std::move(s));
  for (Scenario& s : GroupScenarios()) all.push_back(std::move(s));
  for (Scenario& s : CompressionScenarios()) all.push_back(std::move(s));
  for (int size : {3, 4}) {
    for (const Scenario& s : all) cases.push_back({s, size});
  }
  return cases;
}

class EngineLoopbackTest : public ::testing::TestWithParam<Case> {};

TEST_P(EngineLoopbackTest, Runs) {
  absl::Status status = RunOnLoopback(GetParam().size, GetParam().scenario);
  EXPECT_TRUE(status.ok()) << status;
}

INSTANTIATE_TEST_SUITE_P(Scenarios, EngineLoopbackTest,
                         ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.scenario.name + "_" +
                                  std::to_string(info.param.size) + "ranks";
                         });

}  // namespace
}  // namespace testing
}  // namespace terse
