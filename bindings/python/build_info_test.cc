#include "bindings/python/build_info.h"

#include <string>

#include "common/config.h"
#include "common/version.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

TEST(BuildInfoTest, NamesVersionBackendsAndConfig) {
  std::string text = BuildInfo(Config::Defaults());
  EXPECT_EQ(text.rfind(std::string("terse ") + kVersion + "\n", 0), 0u) << text;
  EXPECT_NE(text.find("backend mpi:  built (Open MPI"), std::string::npos);
  EXPECT_NE(text.find("backend nccl: built (NCCL "), std::string::npos);
  EXPECT_NE(text.find("gpu:          "), std::string::npos);
  // The configuration part is Describe()'s text, verbatim.
  EXPECT_NE(text.find(Config::Defaults().Describe()), std::string::npos);
}

TEST(BuildInfoTest, ShowsNonDefaultValues) {
  absl::StatusOr<Config> config =
      Config::FromMap({{"TERSE_COMPRESSION", "fp16"}});
  ASSERT_TRUE(config.ok()) << config.status();
  std::string text = BuildInfo(*config);
  EXPECT_NE(text.find("TERSE_COMPRESSION = fp16  [default none]"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace terse
