#include <cstdio>
#include <fstream>
#include <sstream>

#include "engine/timeline.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

TEST(TimelineTest, EscapesJsonStrings) {
  EXPECT_EQ(Timeline::JsonEscape("a\"b\\c\nd\x01"), "a\\\"b\\\\c\\nd\\u0001");
}

TEST(TimelineTest, ClosedFileIsACompleteArray) {
  const std::string path =
      std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR")
                                             : "/tmp") +
      "/timeline_unit.json";
  auto timeline = Timeline::Open(path, 3);
  ASSERT_TRUE(timeline.ok()) << timeline.status();
  const auto t = Clock::now();
  (*timeline)->Record("bucket 0", "FUSE", t, t + std::chrono::microseconds(5),
                      {{"bytes", "40"}});
  ASSERT_TRUE((*timeline)->Close().ok());
  (*timeline)->Record("bucket 0", "LATE", t, t);  // Ignored after Close.
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  EXPECT_EQ(s.front(), '[');
  EXPECT_EQ(s.substr(s.size() - 3), "\n]\n");
  EXPECT_NE(s.find("\"name\":\"FUSE\""), std::string::npos);
  EXPECT_NE(s.find("\"pid\":3"), std::string::npos);
  EXPECT_NE(s.find("\"bytes\":\"40\""), std::string::npos);
  EXPECT_EQ(s.find("LATE"), std::string::npos);
}

TEST(TimelineTest, UnwritablePathIsAnError) {
  EXPECT_FALSE(Timeline::Open("/nonexistent/dir/t.json", 0).ok());
}

}  // namespace
}  // namespace terse
