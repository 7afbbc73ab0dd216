#include "integration/cpp/idx_reader.h"

#include <zlib.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "integration/cpp/fashion_mnist.h"

namespace terse {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

void WriteGz(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  gzclose(f);
}

// An IDX header for unsigned bytes with `dims`.
std::vector<uint8_t> Header(const std::vector<uint32_t>& dims) {
  std::vector<uint8_t> h = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    h.push_back(d >> 24);
    h.push_back(d >> 16);
    h.push_back(d >> 8);
    h.push_back(d);
  }
  return h;
}

TEST(IdxReaderTest, ReadsItemsAndStopsAtTheLimit) {
  std::vector<uint8_t> file = Header({3, 2, 2});
  for (int i = 0; i < 12; ++i) file.push_back(i);
  const std::string path = TempPath("ok.idx.gz");
  WriteGz(path, file);
  auto all = ReadIdx(path, 0);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->dims, (std::vector<int64_t>{3, 2, 2}));
  EXPECT_EQ(all->data[11], 11);
  auto two = ReadIdx(path, 2);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->dims[0], 2);
  EXPECT_EQ(two->data.size(), 8u);
}

TEST(IdxReaderTest, MalformedFilesAreErrorsNotCrashes) {
  EXPECT_EQ(ReadIdx(TempPath("missing.gz"), 0).status().code(),
            absl::StatusCode::kNotFound);
  const std::string path = TempPath("bad.idx.gz");
  WriteGz(path, {1, 2});
  EXPECT_EQ(ReadIdx(path, 0).status().code(), absl::StatusCode::kDataLoss);
  WriteGz(path, {0, 0, 0x0D, 1, 0, 0, 0, 1, 0, 0, 0, 0});  // float type.
  EXPECT_THAT(std::string(ReadIdx(path, 0).status().message()),
              HasSubstr("element type"));
  std::vector<uint8_t> truncated = Header({4, 3});
  truncated.push_back(7);
  WriteGz(path, truncated);
  EXPECT_THAT(std::string(ReadIdx(path, 0).status().message()),
              HasSubstr("truncated"));
}

TEST(FashionMnistTest, MissingDatasetIsACleanNotFound) {
  auto data = LoadFashionMnist(TempPath("no-such-dir"), "train", 10);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(data.status().message()),
              HasSubstr("dataset-fashion-mnist"));
  EXPECT_EQ(LoadFashionMnist(kFashionMnistDir, "valid", 10).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(FashionMnistTest, LabelsMustMatchImages) {
  const std::string dir = TempPath("");
  std::vector<uint8_t> images = Header({2, 28, 28});
  images.resize(images.size() + 2 * 784, 255);
  WriteGz(dir + "/t10k-images-idx3-ubyte.gz", images);
  std::vector<uint8_t> labels = Header({2});
  labels.push_back(3);
  labels.push_back(12);  // Not a class.
  WriteGz(dir + "/t10k-labels-idx1-ubyte.gz", labels);
  auto data = LoadFashionMnist(dir, "t10k", 0);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kDataLoss);
  labels.back() = 9;
  WriteGz(dir + "/t10k-labels-idx1-ubyte.gz", labels);
  data = LoadFashionMnist(dir, "t10k", 0);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->size, 2);
  EXPECT_EQ(data->images[0], 1.0f);
  EXPECT_EQ(data->labels[1], 9);
}

TEST(FashionMnistTest, RealDatasetWhenInstalled) {
  auto data = LoadFashionMnist(kFashionMnistDir, "t10k", 100);
  if (absl::IsNotFound(data.status())) GTEST_SKIP() << data.status();
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->size, 100);
  EXPECT_EQ(data->images.size(), 100u * 784);
  for (int32_t label : data->labels) {
    EXPECT_GE(label, 0);
    EXPECT_LT(label, 10);
  }
}

}  // namespace
}  // namespace terse
