#include "common/logging.h"

#include "gtest/gtest.h"

namespace terse {
namespace {

TEST(LoggingTest, LevelsParseAndFilter) {
  EXPECT_EQ(*ParseLogLevel("debug"), LogLevel::kDebug);
  EXPECT_FALSE(ParseLogLevel("verbose").ok());
  SetLogLevel(LogLevel::kWarning);
  EXPECT_FALSE(LogEnabled(LogLevel::kInfo));
  EXPECT_TRUE(LogEnabled(LogLevel::kError));
  int evaluated = 0;
  TERSE_LOG(Debug) << (++evaluated);
  EXPECT_EQ(evaluated, 0) << "a filtered line must not evaluate its arguments";
}

TEST(LoggingTest, LineCarriesRankAndSeverity) {
  SetLogRank(3);
  SetLogLevel(LogLevel::kInfo);
  ::testing::internal::CaptureStderr();
  TERSE_LOG(Info) << "hello " << 42;
  std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(out.rfind("[terse 3 I ", 0), 0u) << out;
  EXPECT_NE(out.find("logging_test.cc:"), std::string::npos) << out;
  EXPECT_NE(out.find("] hello 42\n"), std::string::npos) << out;
  SetLogRank(-1);
  SetLogLevel(LogLevel::kWarning);
}

}  // namespace
}  // namespace terse
