#include "efcp/state_blob.h"

#include <vector>

#include "gtest/gtest.h"

namespace terse {
namespace efcp {
namespace {

TEST(StateBlobTest, RoundTrip) {
  BlobWriter writer("thing");
  writer.PutU32(7);
  writer.PutI64(-5);
  writer.PutF64(2.5);
  writer.PutBytes("nested");
  const float values[3] = {1.5f, -2.0f, 3.25f};
  writer.PutArray(values, 3);
  const std::string blob = writer.Release();

  absl::StatusOr<BlobReader> reader = BlobReader::Open(blob, "thing");
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ(*reader->GetU32(), 7u);
  EXPECT_EQ(*reader->GetI64(), -5);
  EXPECT_EQ(*reader->GetF64(), 2.5);
  EXPECT_EQ(*reader->GetBytes(), "nested");
  absl::StatusOr<const char*> array = reader->GetArray<float>(3);
  ASSERT_TRUE(array.ok());
  float back[3];
  BlobReader::CopyArray(*array, 3, back);
  EXPECT_EQ(back[2], 3.25f);
  EXPECT_EQ(BlobReader::Element<float>(*array, 1), -2.0f);
  EXPECT_TRUE(reader->ExpectEnd().ok());
}

TEST(StateBlobTest, RejectsBadHeaders) {
  const std::string blob = BlobWriter("a").Release();
  EXPECT_EQ(BlobReader::Open(blob, "b").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(BlobReader::Open("", "a").ok());
  EXPECT_FALSE(BlobReader::Open("XEFC", "a").ok());
  std::string wrong_version = blob;
  wrong_version[4] = 9;
  EXPECT_FALSE(BlobReader::Open(wrong_version, "a").ok());
  EXPECT_TRUE(BlobReader::Open(blob, "a").ok());
}

TEST(StateBlobTest, EveryTruncationIsAnError) {
  BlobWriter writer("k");
  writer.PutI64(3);
  writer.PutBytes("abc");
  const double values[2] = {1, 2};
  writer.PutArray(values, 2);
  const std::string blob = writer.Release();
  for (size_t cut = 0; cut < blob.size(); ++cut) {
    const std::string prefix = blob.substr(0, cut);
    absl::StatusOr<BlobReader> reader = BlobReader::Open(prefix, "k");
    if (!reader.ok()) continue;
    bool failed = !reader->GetI64().ok() || !reader->GetBytes().ok() ||
                  !reader->GetArray<double>(2).ok();
    EXPECT_TRUE(failed) << "cut at " << cut;
  }
}

TEST(StateBlobTest, CorruptLengthsAreErrors) {
  BlobWriter writer("k");
  writer.PutI64(-1);  // read back as a byte-string length
  std::string blob = writer.Release();
  absl::StatusOr<BlobReader> reader = BlobReader::Open(blob, "k");
  ASSERT_TRUE(reader.ok());
  EXPECT_FALSE(reader->GetBytes().ok());
  reader = BlobReader::Open(blob, "k");
  EXPECT_FALSE(reader->GetArray<float>(int64_t{1} << 62).ok());
  EXPECT_FALSE(reader->GetArray<float>(-3).ok());
  EXPECT_FALSE(reader->ExpectEnd().ok());
}

}  // namespace
}  // namespace efcp
}  // namespace terse
