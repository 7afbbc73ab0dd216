#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

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

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(TimelineTest, StartsAndStopsAtRuntime) {
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR")
                                                     : "/tmp";
  std::unique_ptr<Timeline> timeline = Timeline::Stopped(1);
  EXPECT_FALSE(timeline->active());
  const auto t = Clock::now();
  timeline->Record("bucket 0", "BEFORE", t, t);  // Dropped: stopped.
  EXPECT_TRUE(timeline->Stop().ok());             // Nothing to stop.
  ASSERT_TRUE(timeline->Start(dir + "/first.json").ok());
  EXPECT_TRUE(timeline->active());
  EXPECT_EQ(timeline->Start(dir + "/other.json").code(),
            absl::StatusCode::kFailedPrecondition);
  timeline->Record("bucket 0", "FIRST", t, t);
  ASSERT_TRUE(timeline->Stop().ok());
  EXPECT_FALSE(timeline->active());
  timeline->Record("bucket 0", "BETWEEN", t, t);  // Dropped: stopped.
  ASSERT_TRUE(timeline->Start(dir + "/second.json").ok());
  timeline->Record("bucket 7", "SECOND", t, t);
  ASSERT_TRUE(timeline->Close().ok());
  EXPECT_EQ(timeline->Start(dir + "/late.json").code(),
            absl::StatusCode::kFailedPrecondition);
  const std::string first = ReadAll(dir + "/first.json");
  const std::string second = ReadAll(dir + "/second.json");
  for (const std::string* s : {&first, &second}) {
    EXPECT_EQ(s->front(), '[');
    EXPECT_EQ(s->substr(s->size() - 3), "\n]\n");
    EXPECT_EQ(s->find("BEFORE"), std::string::npos);
    EXPECT_EQ(s->find("BETWEEN"), std::string::npos);
  }
  EXPECT_NE(first.find("FIRST"), std::string::npos);
  EXPECT_EQ(first.find("SECOND"), std::string::npos);
  EXPECT_NE(second.find("SECOND"), std::string::npos);
  EXPECT_NE(second.find("\"name\":\"bucket 7\""), std::string::npos);
  EXPECT_EQ(second.find("FIRST"), std::string::npos);
}

TEST(TimelineTest, UnwritablePathIsAnError) {
  EXPECT_FALSE(Timeline::Open("/nonexistent/dir/t.json", 0).ok());
}

}  // namespace
}  // namespace terse
