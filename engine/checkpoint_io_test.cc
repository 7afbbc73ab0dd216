#include "engine/checkpoint_io.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace terse {
namespace checkpoint {
namespace {

using ::testing::HasSubstr;

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::string Contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(CheckpointIoTest, FileAppearsOnlyOnCommit) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/io_commit");
  absl::StatusOr<std::unique_ptr<FileSink>> sink = FileSink::Create(path);
  ASSERT_TRUE(sink.ok()) << sink.status();
  ASSERT_TRUE((*sink)->Write("hello ").ok());
  ASSERT_TRUE((*sink)->Write("world").ok());
  EXPECT_FALSE(Exists(path));
  EXPECT_TRUE(Exists(path + ".tmp"));
  ASSERT_TRUE((*sink)->Commit().ok());
  EXPECT_FALSE(Exists(path + ".tmp"));
  EXPECT_EQ(Contents(path), "hello world");
  EXPECT_FALSE((*sink)->Write("more").ok());
}

TEST(CheckpointIoTest, AbandonedSaveLeavesTheOldFile) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/io_abandon");
  {
    auto sink = FileSink::Create(path);
    ASSERT_TRUE(sink.ok());
    ASSERT_TRUE((*sink)->Write("old").ok());
    ASSERT_TRUE((*sink)->Commit().ok());
  }
  {
    auto sink = FileSink::Create(path);
    ASSERT_TRUE(sink.ok());
    ASSERT_TRUE((*sink)->Write("new, half written").ok());
  }  // Destroyed without Commit.
  EXPECT_EQ(Contents(path), "old");
  EXPECT_FALSE(Exists(path + ".tmp"));
}

TEST(CheckpointIoTest, SourcesReadWhatIsThere) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/io_source");
  std::ofstream(path, std::ios::binary) << "abcdef";
  auto file = FileSource::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  StringSource string("abcdef");
  for (ByteSource* source : {static_cast<ByteSource*>(file->get()),
                             static_cast<ByteSource*>(&string)}) {
    EXPECT_EQ(source->size(), 6);
    char buf[8];
    EXPECT_EQ(*source->Read(buf, 4), 4u);
    EXPECT_EQ(std::string(buf, 4), "abcd");
    EXPECT_EQ(*source->Read(buf, 4), 2u);
    EXPECT_EQ(std::string(buf, 2), "ef");
    EXPECT_EQ(*source->Read(buf, 4), 0u);
  }
}

TEST(CheckpointIoTest, ErrorsNameThePath) {
  const std::string missing =
      absl::StrCat(::testing::TempDir(), "/no/such/dir/file");
  auto source = FileSource::Open(missing);
  EXPECT_EQ(source.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(source.status().message(), HasSubstr(missing));
  auto sink = FileSink::Create(missing);
  EXPECT_THAT(sink.status().message(), HasSubstr(missing + ".tmp"));
  EXPECT_FALSE(FileSource::Open(::testing::TempDir()).ok());
}

}  // namespace
}  // namespace checkpoint
}  // namespace terse
