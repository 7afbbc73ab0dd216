#include "common/stable_hash.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace terse {
namespace {

// The published FNV-1a 64 test vectors: "" and "a".
TEST(StableHashTest, MatchesFnv1aTestVectors) {
  EXPECT_EQ(StableHash().value(), 0xcbf29ce484222325ull);
  StableHash a;
  a.AddByte('a');
  EXPECT_EQ(a.value(), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(StableHashOfBytes("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(StableHashOfBytes("foobar"), 0x85944171f73967e8ull);
}

TEST(StableHashTest, IntegersAreFedLittleEndianAndOrderCounts) {
  StableHash bytes;
  for (uint8_t b : {0x04, 0x03, 0x02, 0x01, 0, 0, 0, 0}) bytes.AddByte(b);
  StableHash word;
  word.AddInt64(0x01020304);
  EXPECT_EQ(word.value(), bytes.value());
  EXPECT_EQ(StableHashOf(std::vector<int>{1, 2}),
            StableHashOf(std::vector<int64_t>{1, 2}));
  EXPECT_NE(StableHashOf(std::vector<int64_t>{1, 2}),
            StableHashOf(std::vector<int64_t>{2, 1}));
  EXPECT_NE(StableHashOf(std::vector<int64_t>{}),
            StableHashOf(std::vector<int64_t>{0}));
}

}  // namespace
}  // namespace terse
