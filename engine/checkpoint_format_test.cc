#include "engine/checkpoint_format.h"

#include <zlib.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace terse {
namespace checkpoint {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int64_t kChunk = 16;  // 4 floats per chunk.

// Values whose bit patterns a lossy path would change.
std::vector<float> Values(int n, float base) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = base + 0.1f * i;
  if (n > 2) {
    v[1] = -0.0f;
    v[2] = std::numeric_limits<float>::quiet_NaN();
  }
  if (n > 3) v[3] = std::numeric_limits<float>::denorm_min();
  return v;
}

struct Fixture {
  std::vector<float> a = Values(10, 1.0f);  // 3 chunks: 16 + 16 + 8 bytes.
  std::vector<float> b = Values(8, 2.0f);   // 2 chunks.
  std::vector<float> c;                     // 0 chunks.
  std::vector<float> d = Values(3, 3.0f);   // 1 chunk of 12 bytes.
  proto::CheckpointHeader meta;

  std::vector<TensorToWrite> Tensors() const {
    return {{"layer.a", 0, proto::CheckpointTensor::RESIDUAL, a},
            {"layer.b", 8, proto::CheckpointTensor::VELOCITY, b},
            {"empty", 0, proto::CheckpointTensor::RESIDUAL, c},
            {"x,y", 0, proto::CheckpointTensor::ACCUMULATOR, d}};
  }
  std::string Bytes() {
    meta.set_bytes_sent(12345);
    proto::BucketCompressionState* bucket = meta.add_buckets();
    bucket->set_key("x,y");
    bucket->mutable_policy()->set_kind("accordion");
    bucket->set_pending_level(4);
    std::string out;
    StringSink sink(&out);
    EXPECT_TRUE(WriteCheckpoint(meta, Tensors(), &sink, kChunk).ok());
    return out;
  }
};

uint32_t U32At(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) {
    v |= static_cast<uint32_t>(static_cast<unsigned char>(s[at + i]))
         << (8 * i);
  }
  return v;
}

bool BitEqual(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() &&
         (x.empty() || std::memcmp(x.data(), y.data(), x.size() * 4) == 0);
}

absl::Status Load(const std::string& bytes) {
  StringSource source(bytes);
  return ReadCheckpoint(&source).status();
}

// The layout, parsed by hand (not by ReadCheckpoint).
TEST(CheckpointFormatTest, LayoutIsAsDocumented) {
  Fixture f;
  const std::string bytes = f.Bytes();
  ASSERT_GE(bytes.size(), 20u);
  EXPECT_EQ(bytes.substr(0, 8), "TERSECKP");
  EXPECT_EQ(U32At(bytes, 8), 1u);
  const uint32_t h = U32At(bytes, 12);
  const std::string head = bytes.substr(20, h);
  EXPECT_EQ(U32At(bytes, 16),
            crc32(0, reinterpret_cast<const Bytef*>(head.data()), h));
  proto::CheckpointHeader header;
  ASSERT_TRUE(header.ParseFromString(head));
  EXPECT_EQ(header.chunk_bytes(), kChunk);
  EXPECT_EQ(header.bytes_sent(), 12345);
  ASSERT_EQ(header.buckets_size(), 1);
  EXPECT_EQ(header.buckets(0).pending_level(), 4);
  ASSERT_EQ(header.tensors_size(), 4);
  EXPECT_EQ(header.tensors(0).chunk_crc32_size(), 3);
  EXPECT_EQ(header.tensors(1).chunk_crc32_size(), 2);
  EXPECT_EQ(header.tensors(2).chunk_crc32_size(), 0);
  EXPECT_EQ(header.tensors(3).chunk_crc32_size(), 1);
  EXPECT_EQ(header.tensors(1).tensor_offset(), 8);
  EXPECT_EQ(header.tensors(1).kind(), proto::CheckpointTensor::VELOCITY);
  EXPECT_EQ(header.tensors(3).dtype(), proto::CheckpointTensor::FLOAT32);
  // The raw float bytes, tensors back to back, nothing after.
  std::string raw;
  for (const auto* v : {&f.a, &f.b, &f.c, &f.d}) {
    raw.append(reinterpret_cast<const char*>(v->data()), v->size() * 4);
  }
  EXPECT_EQ(bytes.substr(20 + h), raw);
  // Chunk 1 of tensor 0: bytes [16, 32) of its data.
  EXPECT_EQ(header.tensors(0).chunk_crc32(1),
            crc32(0, reinterpret_cast<const Bytef*>(raw.data() + 16), 16));
}

TEST(CheckpointFormatTest, RoundTripsBitForBit) {
  Fixture f;
  const std::string bytes = f.Bytes();
  StringSource source(bytes);
  absl::StatusOr<Checkpoint> read = ReadCheckpoint(&source);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->values.size(), 4u);
  EXPECT_TRUE(BitEqual(read->values[0], f.a));
  EXPECT_TRUE(BitEqual(read->values[1], f.b));
  EXPECT_TRUE(BitEqual(read->values[2], f.c));
  EXPECT_TRUE(BitEqual(read->values[3], f.d));
  EXPECT_EQ(read->header.tensors(0).name(), "layer.a");
  EXPECT_EQ(read->header.tensors(3).name(), "x,y");
  EXPECT_EQ(read->header.buckets(0).key(), "x,y");
  EXPECT_EQ(read->header.buckets(0).policy().kind(), "accordion");
}

TEST(CheckpointFormatTest, EmptyStateRoundTrips) {
  std::string bytes;
  StringSink sink(&bytes);
  ASSERT_TRUE(WriteCheckpoint(proto::CheckpointHeader(), {}, &sink).ok());
  EXPECT_TRUE(HasMagic(bytes));
  EXPECT_TRUE(Load(bytes).ok());
}

TEST(CheckpointFormatTest, TruncationNamesWhatIsMissing) {
  Fixture f;
  const std::string bytes = f.Bytes();
  const size_t data = 20 + U32At(bytes, 12);
  // Inside the prefix (but the magic's prefix itself is fine).
  for (size_t cut : {0, 5, 8, 19}) {
    EXPECT_THAT(Load(bytes.substr(0, cut)).message(),
                HasSubstr("truncated inside its 20-byte prefix"))
        << cut;
  }
  for (size_t cut : {size_t{20}, size_t{21}, data - 1}) {
    EXPECT_THAT(Load(bytes.substr(0, cut)).message(),
                HasSubstr("truncated inside its header"))
        << cut;
  }
  // At every chunk boundary and inside every chunk: the first chunk that is
  // not all there.
  struct Cut {
    size_t at;
    std::string chunk;
  };
  const std::vector<Cut> cuts = {
      {data, "tensor 'layer.a' (residual, offset 0, 10 floats) chunk 0 of 3"},
      {data + 3, "tensor 'layer.a' (residual, offset 0, 10 floats) chunk 0"},
      {data + 16, "'layer.a' (residual, offset 0, 10 floats) chunk 1 of 3"},
      {data + 32, "'layer.a' (residual, offset 0, 10 floats) chunk 2 of 3"},
      {data + 39, "'layer.a' (residual, offset 0, 10 floats) chunk 2 of 3"},
      {data + 40, "'layer.b' (velocity, offset 8, 8 floats) chunk 0 of 2"},
      {data + 56, "'layer.b' (velocity, offset 8, 8 floats) chunk 1 of 2"},
      {data + 72, "'x,y' (accumulator, offset 0, 3 floats) chunk 0 of 1"},
      {data + 83, "'x,y' (accumulator, offset 0, 3 floats) chunk 0 of 1"},
  };
  ASSERT_EQ(bytes.size(), data + 84);
  for (const Cut& cut : cuts) {
    const absl::Status status = Load(bytes.substr(0, cut.at));
    EXPECT_THAT(status.message(),
                AllOf(HasSubstr("truncated"), HasSubstr(cut.chunk),
                      HasSubstr(absl::StrCat("has ", cut.at, " bytes"))))
        << cut.at;
  }
  EXPECT_THAT(Load(bytes + "x").message(),
              HasSubstr("1 bytes after its last chunk"));
  EXPECT_TRUE(Load(bytes).ok());
}

TEST(CheckpointFormatTest, FlippedBytesNameTheChunkAndChecksums) {
  Fixture f;
  const std::string bytes = f.Bytes();
  const size_t data = 20 + U32At(bytes, 12);
  struct Flip {
    size_t at;
    std::string what;
  };
  const std::vector<Flip> flips = {
      {data + 0, "'layer.a' (residual, offset 0, 10 floats) chunk 0 of 3"},
      {data + 17, "'layer.a' (residual, offset 0, 10 floats) chunk 1 of 3"},
      {data + 39, "'layer.a' (residual, offset 0, 10 floats) chunk 2 of 3"},
      {data + 40, "'layer.b' (velocity, offset 8, 8 floats) chunk 0 of 2"},
      {data + 71, "'layer.b' (velocity, offset 8, 8 floats) chunk 1 of 2"},
      {data + 80, "'x,y' (accumulator, offset 0, 3 floats) chunk 0 of 1"},
  };
  for (const Flip& flip : flips) {
    std::string bad = bytes;
    bad[flip.at] ^= 0x20;
    const absl::Status status = Load(bad);
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << flip.at;
    EXPECT_THAT(status.message(),
                AllOf(HasSubstr(flip.what), HasSubstr("CRC-32 expected"),
                      HasSubstr("found")))
        << flip.at;
  }
  // Every byte of the header.
  for (size_t at = 20; at < data; ++at) {
    std::string bad = bytes;
    bad[at] ^= 0x01;
    EXPECT_THAT(Load(bad).message(),
                AllOf(HasSubstr("header"), HasSubstr("corrupt")))
        << at;
  }
  // The prefix: magic, version, header length, header checksum.
  std::string bad = bytes;
  bad[0] = 'X';
  EXPECT_THAT(Load(bad).message(), HasSubstr("does not start with"));
  bad = bytes;
  bad[8] ^= 2;
  EXPECT_THAT(Load(bad).message(), HasSubstr("version 3 is not supported"));
  bad = bytes;
  bad[12] ^= 1;
  EXPECT_FALSE(Load(bad).ok());
  bad = bytes;
  bad[14] ^= 1;
  EXPECT_THAT(Load(bad).message(), HasSubstr("truncated inside its header"));
  bad = bytes;
  bad[17] ^= 1;
  EXPECT_THAT(Load(bad).message(), HasSubstr("header"));
}

TEST(CheckpointFormatTest, RejectsBadChunkSizes) {
  std::string out;
  StringSink sink(&out);
  for (int64_t chunk : {0, 2, 6, -4}) {
    EXPECT_FALSE(
        WriteCheckpoint(proto::CheckpointHeader(), {}, &sink, chunk).ok());
  }
  EXPECT_TRUE(out.empty());
}

TEST(CheckpointFormatTest, FileRoundTrip) {
  Fixture f;
  const std::string path =
      absl::StrCat(::testing::TempDir(), "/format_test.ckpt");
  {
    absl::StatusOr<std::unique_ptr<FileSink>> sink = FileSink::Create(path);
    ASSERT_TRUE(sink.ok()) << sink.status();
    ASSERT_TRUE(WriteCheckpoint(f.meta, f.Tensors(), sink->get(), kChunk).ok());
    ASSERT_TRUE((*sink)->Commit().ok());
  }
  absl::StatusOr<std::unique_ptr<FileSource>> source = FileSource::Open(path);
  ASSERT_TRUE(source.ok()) << source.status();
  absl::StatusOr<Checkpoint> read = ReadCheckpoint(source->get());
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(BitEqual(read->values[0], f.a));
  EXPECT_TRUE(BitEqual(read->values[3], f.d));
}

}  // namespace
}  // namespace checkpoint
}  // namespace terse
