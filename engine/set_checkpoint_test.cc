#include "engine/set_checkpoint.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace terse {
namespace set_checkpoint {
namespace {

std::vector<Part> TwoSets() {
  Part global;
  global.id = 0;
  global.ranks = {0, 1, 2, 3};
  global.state = std::string("global\0state", 12);
  Part set;
  set.id = 3;
  set.ranks = {1, 3};
  set.state = "TERSECKP-like bytes of set 3";
  return {global, set};
}

std::string Encode(const std::vector<Part>& parts) {
  std::string out;
  checkpoint::StringSink sink(&out);
  EXPECT_TRUE(Write(parts, &sink).ok());
  return out;
}

TEST(SetCheckpointTest, RoundTripsIdsRanksAndStates) {
  const std::vector<Part> parts = TwoSets();
  const std::string bytes = Encode(parts);
  EXPECT_TRUE(HasMagic(bytes));
  // magic + version + count, then per part id, count, ranks, length, state.
  EXPECT_EQ(bytes.size(), 16 + (4 + 4 + 16 + 8 + 12) + (4 + 4 + 8 + 8 + 28));
  checkpoint::StringSource source(bytes);
  absl::StatusOr<std::vector<Part>> read = Read(&source);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 2u);
  for (size_t i = 0; i < parts.size(); ++i) {
    EXPECT_EQ((*read)[i].id, parts[i].id);
    EXPECT_EQ((*read)[i].ranks, parts[i].ranks);
    EXPECT_EQ((*read)[i].state, parts[i].state);
  }
  EXPECT_EQ(DescribeLayout(*read), "set 0 [0,1,2,3], set 3 [1,3]");
}

TEST(SetCheckpointTest, EveryTruncationNamesWhere) {
  const std::string bytes = Encode(TwoSets());
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    checkpoint::StringSource source(absl::string_view(bytes).substr(0, cut));
    absl::StatusOr<std::vector<Part>> read = Read(&source);
    ASSERT_FALSE(read.ok()) << "cut at " << cut;
    EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(read.status().message().find("checkpoint"), std::string::npos)
        << read.status();
  }
}

TEST(SetCheckpointTest, RefusesTrailingBytesVersionAndDuplicates) {
  std::string bytes = Encode(TwoSets()) + "x";
  checkpoint::StringSource trailing(bytes);
  absl::StatusOr<std::vector<Part>> read = Read(&trailing);
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("1 trailing bytes"),
            std::string::npos)
      << read.status();

  bytes = Encode(TwoSets());
  bytes[8] = 9;  // Version 9.
  checkpoint::StringSource version(bytes);
  read = Read(&version);
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("version 9"), std::string::npos)
      << read.status();

  std::vector<Part> twice = TwoSets();
  twice[1].id = 0;
  bytes = Encode(twice);
  checkpoint::StringSource duplicate(bytes);
  read = Read(&duplicate);
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("set 0 twice"), std::string::npos)
      << read.status();
}

TEST(SetCheckpointTest, ImplausibleLengthsFailBeforeAllocating) {
  std::string bytes = Encode(TwoSets());
  // Part 0's rank count (offset 20) claims 2^31 ranks.
  bytes[23] = static_cast<char>(0x80);
  checkpoint::StringSource ranks(bytes);
  absl::StatusOr<std::vector<Part>> read = Read(&ranks);
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("ranks"), std::string::npos)
      << read.status();

  bytes = Encode(TwoSets());
  // Part 0's state length (offset 40) claims 2^56 bytes.
  bytes[47] = 1;
  checkpoint::StringSource length(bytes);
  read = Read(&length);
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("set 0's state"), std::string::npos)
      << read.status();
}

TEST(SetCheckpointTest, OtherFormatsHaveNoMagic) {
  EXPECT_FALSE(HasMagic("TERSECKP...."));
  EXPECT_FALSE(HasMagic("TERSEPS"));
  EXPECT_FALSE(HasMagic(""));
}

}  // namespace
}  // namespace set_checkpoint
}  // namespace terse
