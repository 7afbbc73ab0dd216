// A compression state over protobuf's 2 GiB limit (one residual of 600 M
// floats, 2.4 GB) round-trips through CompressedReducer's file API. The
// file API streams, so the peak is the one copy of the values the test
// builds: measured 2.3 GB resident at most, about 4.8 GB of disk under
// TEST_TMPDIR (two files at once), 27-30 s on a shared 2-core machine
// (docs/reliability.md). Tagged size = "large" and kept out of the
// sanitizer suites.
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/checkpoint_format.h"
#include "engine/compressed_reducer.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

constexpr int64_t kCount = 600'000'000;

// The residual's values: exact in float32, no two neighbours alike.
float ValueAt(int64_t i) {
  return static_cast<float>(i % 1000003) * 0.5f - static_cast<float>(i & 7);
}

int64_t FileSize(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? st.st_size : -1;
}

// Compares two files block by block (no full copy in memory).
bool SameFiles(const std::string& a, const std::string& b) {
  std::unique_ptr<FILE, int (*)(FILE*)> fa(std::fopen(a.c_str(), "rb"),
                                           &std::fclose);
  std::unique_ptr<FILE, int (*)(FILE*)> fb(std::fopen(b.c_str(), "rb"),
                                           &std::fclose);
  if (!fa || !fb) return false;
  std::vector<char> x(64 << 20), y(64 << 20);
  for (;;) {
    const size_t nx = std::fread(x.data(), 1, x.size(), fa.get());
    const size_t ny = std::fread(y.data(), 1, y.size(), fb.get());
    if (nx != ny || std::memcmp(x.data(), y.data(), nx) != 0) return false;
    if (nx == 0) return true;
  }
}

TEST(CheckpointLargeTest, StateOverTwoGibRoundTripsThroughFiles) {
  absl::StatusOr<Config> config =
      Config::FromMap({{"TERSE_COMPRESSION", "topk"}});
  ASSERT_TRUE(config.ok()) << config.status();
  const std::string written = absl::StrCat(::testing::TempDir(), "/big.ckpt");
  const std::string saved = absl::StrCat(::testing::TempDir(), "/big2.ckpt");
  {
    // Written by the format directly (the oracle's file).
    std::vector<float> values(kCount);
    for (int64_t i = 0; i < kCount; ++i) values[i] = ValueAt(i);
    proto::CheckpointHeader meta;
    meta.set_bytes_sent(int64_t{5} << 32);
    proto::BucketCompressionState* b = meta.add_buckets();
    b->set_key("huge");
    b->mutable_policy()->set_kind("gravac");
    b->set_pending_level(3);
    auto sink = checkpoint::FileSink::Create(written);
    ASSERT_TRUE(sink.ok()) << sink.status();
    ASSERT_TRUE(checkpoint::WriteCheckpoint(
                    meta,
                    {{"huge", 0, proto::CheckpointTensor::RESIDUAL, values}},
                    sink->get())
                    .ok());
    ASSERT_TRUE((*sink)->Commit().ok());
  }
  ASSERT_GT(FileSize(written), int64_t{4} * kCount);
  {
    CompressedReducer reducer(*config, 0, 1);
    absl::Status status = reducer.LoadStateFromFile(written);
    ASSERT_TRUE(status.ok()) << status;
    EXPECT_EQ(reducer.bytes_sent(), int64_t{5} << 32);
    status = reducer.SaveStateToFile(saved);
    ASSERT_TRUE(status.ok()) << status;
  }
  EXPECT_EQ(FileSize(saved + ".tmp"), -1);
  EXPECT_TRUE(SameFiles(written, saved));
  std::remove(written.c_str());
  // And the values, read back by the format.
  auto source = checkpoint::FileSource::Open(saved);
  ASSERT_TRUE(source.ok()) << source.status();
  absl::StatusOr<checkpoint::Checkpoint> read =
      checkpoint::ReadCheckpoint(source->get());
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->values.size(), 1u);
  ASSERT_EQ(static_cast<int64_t>(read->values[0].size()), kCount);
  int64_t wrong = 0;
  for (int64_t i = 0; i < kCount; ++i) {
    const float want = ValueAt(i);
    wrong += std::memcmp(&read->values[0][i], &want, 4) != 0;
  }
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(read->header.buckets(0).pending_level(), 3);
  EXPECT_EQ(read->header.tensors(0).chunk_crc32_size(),
            (4 * kCount + checkpoint::kDefaultChunkBytes - 1) /
                checkpoint::kDefaultChunkBytes);
  std::remove(saved.c_str());
}

}  // namespace
}  // namespace terse
