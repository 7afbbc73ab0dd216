#include "compressors/payload.h"

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace terse {
namespace {

std::vector<uint32_t> AscendingSubset(int64_t d, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::set<uint32_t> s;
  while (static_cast<int64_t>(s.size()) < k) s.insert(rng() % d);
  return {s.begin(), s.end()};
}

const IndexCoding kCodings[] = {IndexCoding::kU32, IndexCoding::kDelta16,
                                IndexCoding::kVarint};
const ValueType kTypes[] = {ValueType::kFloat32, ValueType::kFloat16,
                            ValueType::kBFloat16};

TEST(PayloadTest, HeaderRoundTripAndChecks) {
  PayloadHeader h;
  h.compressor = CompressorId::kQsgd;
  h.value_type = ValueType::kFloat16;
  h.index_coding = IndexCoding::kVarint;
  h.dense_count = 123;
  h.entry_count = 7;
  h.ext_bytes = 3;
  h.body_bytes = 5;
  Payload p;
  StartPayload(h, &p);
  ASSERT_EQ(p.bytes.size(), 48u);
  absl::StatusOr<PayloadView> v =
      ParsePayload(p.bytes, CompressorId::kQsgd, 123);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->header.value_type, ValueType::kFloat16);
  EXPECT_EQ(v->header.index_coding, IndexCoding::kVarint);
  EXPECT_EQ(v->header.entry_count, 7u);
  EXPECT_EQ(v->ext.size(), 3u);
  EXPECT_EQ(v->body.size(), 5u);
  // Wrong compressor, wrong dense count, truncation, extension.
  EXPECT_FALSE(ParsePayload(p.bytes, CompressorId::kTopK, 123).ok());
  EXPECT_FALSE(ParsePayload(p.bytes, CompressorId::kQsgd, 124).ok());
  std::vector<uint8_t> b = p.bytes;
  b.pop_back();
  EXPECT_FALSE(ParsePayload(b, CompressorId::kQsgd, 123).ok());
  b = p.bytes;
  b.push_back(0);
  EXPECT_FALSE(ParsePayload(b, CompressorId::kQsgd, 123).ok());
  for (int byte : {0, 4, 5, 6, 7, 28}) {
    b = p.bytes;
    b[byte] = 0xee;
    EXPECT_FALSE(ParsePayload(b, CompressorId::kQsgd, 123).ok()) << byte;
  }
  EXPECT_FALSE(ParsePayload({}, CompressorId::kQsgd, 123).ok());
}

TEST(PayloadTest, SparseRoundTripEveryCodingAndType) {
  const int64_t d = 1000000;
  std::vector<uint32_t> idx = AscendingSubset(d, 5000, 1);
  idx.front() = 0;
  idx.back() = static_cast<uint32_t>(d - 1);
  // A gap beyond 16 bits to exercise the escape.
  idx.push_back(static_cast<uint32_t>(d - 1));
  std::vector<uint32_t> wide = {0, 3, 70000, 70001, 900000};
  for (const auto& indices : {idx, wide}) {
    std::vector<uint32_t> ind(indices);
    ind.erase(std::unique(ind.begin(), ind.end()), ind.end());
    std::vector<float> val(ind.size());
    for (size_t j = 0; j < val.size(); ++j)
      val[j] = 0.25f * static_cast<float>(j % 64) - 3.0f;
    for (IndexCoding c : kCodings) {
      for (ValueType t : kTypes) {
        Payload p;
        EncodeSparsePayload(CompressorId::kTopK, t, c, d, ind.data(),
                            val.data(), ind.size(), &p);
        absl::StatusOr<SparseEntries> e =
            DecodeSparsePayload(p.bytes, CompressorId::kTopK, d);
        ASSERT_TRUE(e.ok()) << e.status();
        EXPECT_EQ(e->indices, ind);
        EXPECT_EQ(e->values, val);  // Multiples of 0.25 survive fp16/bf16.
        EXPECT_EQ(static_cast<int64_t>(p.bytes.size()),
                  static_cast<int64_t>(kPayloadHeaderBytes) +
                      IndexSectionBytes(c, ind.data(), ind.size()) +
                      static_cast<int64_t>(ind.size()) * ValueTypeBytes(t));
        EXPECT_LE(IndexSectionBytes(c, ind.data(), ind.size()),
                  MaxIndexSectionBytes(c, ind.size(), d));
      }
    }
  }
}

TEST(PayloadTest, BytesPerKeptEntryAtOnePercent) {
  const int64_t d = 1 << 20, k = d / 100;
  const std::vector<uint32_t> idx = AscendingSubset(d, k, 2);
  std::vector<float> val(k, 1.0f);
  auto per_entry = [&](IndexCoding c, ValueType t) {
    Payload p;
    EncodeSparsePayload(CompressorId::kTopK, t, c, d, idx.data(), val.data(), k,
                        &p);
    return static_cast<double>(p.bytes.size() - kPayloadHeaderBytes) / k;
  };
  EXPECT_EQ(per_entry(IndexCoding::kU32, ValueType::kBFloat16), 6.0);
  EXPECT_EQ(per_entry(IndexCoding::kU32, ValueType::kFloat32), 8.0);
  EXPECT_LE(per_entry(IndexCoding::kDelta16, ValueType::kBFloat16), 4.0);
  EXPECT_LE(per_entry(IndexCoding::kVarint, ValueType::kFloat16), 4.0);
}

TEST(PayloadTest, RejectsBadIndices) {
  const uint64_t d = 100;
  auto encode_raw = [&](std::vector<uint32_t> ind) {
    std::vector<float> val(ind.size(), 1.0f);
    Payload p;
    EncodeSparsePayload(CompressorId::kTopK, ValueType::kFloat32,
                        IndexCoding::kU32, d, ind.data(), val.data(),
                        ind.size(), &p);
    return p;
  };
  EXPECT_TRUE(
      DecodeSparsePayload(encode_raw({1, 5, 99}).bytes, CompressorId::kTopK, d)
          .ok());
  EXPECT_FALSE(
      DecodeSparsePayload(encode_raw({1, 5, 100}).bytes, CompressorId::kTopK, d)
          .ok());  // Out of range.
  EXPECT_FALSE(
      DecodeSparsePayload(encode_raw({1, 5, 5}).bytes, CompressorId::kTopK, d)
          .ok());  // Repeated.
  EXPECT_FALSE(
      DecodeSparsePayload(encode_raw({5, 1}).bytes, CompressorId::kTopK, d)
          .ok());  // Descending.
  // More entries than the dense count.
  std::vector<uint32_t> many(101);
  for (uint32_t i = 0; i < 101; ++i) many[i] = i;
  Payload p;
  std::vector<float> val(101, 0.0f);
  EncodeSparsePayload(CompressorId::kTopK, ValueType::kFloat32,
                      IndexCoding::kVarint, 101, many.data(), val.data(), 101,
                      &p);
  EXPECT_FALSE(DecodeSparsePayload(p.bytes, CompressorId::kTopK, d).ok());
  // Varint longer than 5 bytes.
  std::vector<uint8_t> section = {0x80, 0x80, 0x80, 0x80, 0x80, 0x01};
  std::vector<uint32_t> out;
  EXPECT_FALSE(
      ReadIndexSection(IndexCoding::kVarint, section, 1, 1u << 31, &out).ok());
  // Escaped delta16 index going backwards.
  std::vector<uint8_t> back = {5, 0, 0xff, 0xff, 2, 0, 0, 0};
  EXPECT_FALSE(
      ReadIndexSection(IndexCoding::kDelta16, back, 2, 1000, &out).ok());
}

// Every truncation and random bit flips: an error or a valid decode, never
// a crash or an out-of-range index.
TEST(PayloadTest, FuzzTruncationAndBitFlips) {
  const uint64_t d = 70000;
  std::vector<uint32_t> idx = AscendingSubset(d, 300, 3);
  idx.push_back(69999);
  std::sort(idx.begin(), idx.end());
  idx.erase(std::unique(idx.begin(), idx.end()), idx.end());
  std::vector<float> val(idx.size(), -1.5f);
  std::mt19937 rng(4);
  for (IndexCoding c : kCodings) {
    for (ValueType t : kTypes) {
      Payload p;
      EncodeSparsePayload(CompressorId::kDgc, t, c, d, idx.data(), val.data(),
                          idx.size(), &p);
      auto check = [&](const std::vector<uint8_t>& bytes) {
        absl::StatusOr<SparseEntries> e =
            DecodeSparsePayload(bytes, CompressorId::kDgc, d);
        if (!e.ok()) return;
        ASSERT_EQ(e->indices.size(), e->values.size());
        for (size_t j = 0; j < e->indices.size(); ++j) {
          ASSERT_LT(e->indices[j], d);
          if (j > 0) {
            ASSERT_LT(e->indices[j - 1], e->indices[j]);
          }
        }
      };
      for (size_t len = 0; len < p.bytes.size(); ++len) {
        std::vector<uint8_t> cut(p.bytes.begin(), p.bytes.begin() + len);
        EXPECT_FALSE(DecodeSparsePayload(cut, CompressorId::kDgc, d).ok());
      }
      for (int trial = 0; trial < 2000; ++trial) {
        std::vector<uint8_t> bytes = p.bytes;
        const int flips = 1 + trial % 4;
        for (int f = 0; f < flips; ++f) {
          const size_t bit = rng() % (bytes.size() * 8);
          bytes[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
        }
        check(bytes);
      }
    }
  }
}

}  // namespace
}  // namespace terse
