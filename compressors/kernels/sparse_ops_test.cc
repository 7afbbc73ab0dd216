#include "compressors/kernels/sparse_ops.h"

#include <algorithm>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include "common/half.h"
#include "gtest/gtest.h"

namespace terse {
namespace kernels {
namespace {

std::vector<uint32_t> RandomAscending(int64_t d, int64_t k, std::mt19937* rng) {
  std::set<uint32_t> chosen;
  while (static_cast<int64_t>(chosen.size()) < k) {
    chosen.insert(static_cast<uint32_t>((*rng)() % d));
  }
  return std::vector<uint32_t>(chosen.begin(), chosen.end());
}

std::vector<float> RandomValues(int64_t n, std::mt19937* rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

TEST(SparseOpsTest, GatherAndScatterAdd) {
  std::mt19937 rng(1);
  const std::vector<float> dense = RandomValues(100, &rng);
  const std::vector<uint32_t> idx = {5, 0, 99, 5, 42};
  std::vector<float> values(idx.size());
  Gather(dense.data(), idx.data(), idx.size(), values.data());
  for (size_t j = 0; j < idx.size(); ++j) EXPECT_EQ(values[j], dense[idx[j]]);

  std::vector<float> acc(100, 1.0f);
  const std::vector<float> add = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f};
  ScatterAdd(idx.data(), add.data(), idx.size(), acc.data());
  EXPECT_EQ(acc[5], 1.0f + 1.0f + 4.0f);  // Duplicates summed.
  EXPECT_EQ(acc[0], 3.0f);
  EXPECT_EQ(acc[99], 4.0f);
  EXPECT_EQ(acc[42], 6.0f);
  EXPECT_EQ(acc[1], 1.0f);
  ScatterAdd(idx.data(), add.data(), 0, acc.data());  // k = 0: no-op.
}

// Encodes into exactly the slots the encoding needs (plus `extra`).
struct Encoded {
  std::vector<uint16_t> i16, v16;
  int64_t used = 0;
  SparseRow row;
};

Encoded Encode(const std::vector<uint32_t>& idx, const std::vector<float>& val,
               int64_t d, int64_t extra = 0) {
  Encoded e;
  const int64_t slots = Block16Slots(idx.data(), idx.size()) + extra;
  e.i16.assign(slots, 0);
  e.v16.assign(slots, 0);
  e.used = EncodeBlock16BF16(idx.data(), val.data(), idx.size(), slots,
                             e.i16.data(), e.v16.data());
  e.row = Block16Row(e.i16.data(), e.v16.data(), slots, d);
  return e;
}

TEST(SparseOpsTest, Block16RoundTrip) {
  std::mt19937 rng(2);
  const int64_t d = 5 * kBlock16Size + 1234;  // Last block partial.
  std::vector<uint32_t> idx = RandomAscending(d, 5000, &rng);
  // No entry in block 0 (the row starts with a jump) nor in block 3.
  idx.erase(std::remove_if(idx.begin(), idx.end(),
                           [](uint32_t i) {
                             return i / kBlock16Size == 0 ||
                                    i / kBlock16Size == 3;
                           }),
            idx.end());
  idx.back() = static_cast<uint32_t>(d - 1);
  const std::vector<float> val = RandomValues(idx.size(), &rng);
  // One jump into block 1 and one over block 3; the other boundaries are
  // descents (random entries nearly fill each block).
  EXPECT_EQ(Block16Slots(idx.data(), idx.size()),
            static_cast<int64_t>(idx.size()) + 2);
  for (int64_t extra : {0, 3}) {
    const Encoded e = Encode(idx, val, d, extra);
    EXPECT_EQ(e.used, static_cast<int64_t>(idx.size()) + 2);
    EXPECT_EQ(e.v16[0], Block16Jump(1));
    EXPECT_EQ(e.i16[0], 0);
    if (extra > 0) {
      EXPECT_EQ(e.v16[e.used], kBlock16End);
    }
    std::vector<uint32_t> got_idx;
    std::vector<float> got_val;
    DecodeRow(e.row, &got_idx, &got_val);
    ASSERT_EQ(got_idx, idx);
    for (size_t j = 0; j < idx.size(); ++j) {
      ASSERT_EQ(got_val[j], BFloat16ToFloat(FloatToBFloat16(val[j])));
    }
  }
  // Empty input: an end marker only.
  const Encoded empty = Encode({}, {}, 10, 1);
  EXPECT_EQ(empty.used, 0);
  EXPECT_EQ(empty.v16[0], kBlock16End);
  std::vector<uint32_t> got_idx;
  std::vector<float> got_val;
  DecodeRow(empty.row, &got_idx, &got_val);
  EXPECT_TRUE(got_idx.empty());
}

TEST(SparseOpsTest, Block16MarkersOnlyWhereNoDescent) {
  const uint32_t b = kBlock16Size;
  // 16 -> b + 5: a descent, implicit.
  EXPECT_EQ(Block16Slots(std::vector<uint32_t>{16, b + 5}.data(), 2), 2);
  // 5 -> b + 5: equal relative index is a descent too.
  EXPECT_EQ(Block16Slots(std::vector<uint32_t>{5, b + 5}.data(), 2), 2);
  // 5 -> b + 10: no descent, a jump.
  EXPECT_EQ(Block16Slots(std::vector<uint32_t>{5, b + 10}.data(), 2), 3);
  // 16 -> 2b + 5: block 1 empty, a jump.
  EXPECT_EQ(Block16Slots(std::vector<uint32_t>{16, 2 * b + 5}.data(), 2), 3);
  // A first entry outside block 0 always jumps.
  EXPECT_EQ(Block16Slots(std::vector<uint32_t>{b}.data(), 1), 2);
  // Below 65536 never.
  EXPECT_EQ(Block16Slots(std::vector<uint32_t>{0, 1, 65535}.data(), 3), 3);
  // A jump advances at most 127 blocks: 300 blocks take 3.
  const std::vector<uint32_t> far = {7, 300 * b + 2, 300 * b + 9};
  EXPECT_EQ(Block16Slots(far.data(), 3), 6);
  const std::vector<float> vals = {1.0f, 2.0f, 3.0f};
  const Encoded e = Encode(far, vals, 301 * b);
  EXPECT_EQ(e.v16[1], Block16Jump(127));
  EXPECT_EQ(e.v16[2], Block16Jump(127));
  EXPECT_EQ(e.v16[3], Block16Jump(46));
  std::vector<uint32_t> got_idx;
  std::vector<float> got_val;
  DecodeRow(e.row, &got_idx, &got_val);
  EXPECT_EQ(got_idx, far);
  EXPECT_EQ(got_val, vals);
}

TEST(SparseOpsTest, Block16ValueSaturates) {
  EXPECT_EQ(ToBlock16Value(3.4e38f), 0x7f7f);
  EXPECT_EQ(ToBlock16Value(-3.4e38f), 0xff7f);
  EXPECT_FALSE(IsBlock16Marker(ToBlock16Value(3.4e38f)));
  EXPECT_EQ(ToBlock16Value(1.5f), FloatToBFloat16(1.5f));
}

TEST(SparseOpsTest, FitBlock16DropsSmallestUntilItFits) {
  const uint32_t b = kBlock16Size;
  // Every entry after the first needs a jump (each in its own block, rising
  // relative indices): 4 entries take 7 slots.
  std::vector<uint32_t> idx = {1, b + 2, 2 * b + 3, 3 * b + 4};
  std::vector<float> val = {4.0f, -1.0f, 3.0f, 2.0f};
  ASSERT_EQ(Block16Slots(idx.data(), 4), 7);
  // Nothing to drop when it fits.
  EXPECT_EQ(FitBlock16(idx.data(), val.data(), 4, 7), 4);
  // 5 slots: dropping -1 (b + 2) leaves 3 entries + 2 jumps.
  std::vector<uint32_t> i5 = idx;
  std::vector<float> v5 = val;
  ASSERT_EQ(FitBlock16(i5.data(), v5.data(), 4, 5), 3);
  EXPECT_EQ((std::vector<uint32_t>{i5[0], i5[1], i5[2]}),
            (std::vector<uint32_t>{1, 2 * b + 3, 3 * b + 4}));
  EXPECT_EQ((std::vector<float>{v5[0], v5[1], v5[2]}),
            (std::vector<float>{4.0f, 3.0f, 2.0f}));
  EXPECT_LE(Block16Slots(i5.data(), 3), 5);
  // 4 slots: also drop 2 (3b + 4).
  std::vector<uint32_t> i4 = idx;
  std::vector<float> v4 = val;
  ASSERT_EQ(FitBlock16(i4.data(), v4.data(), 4, 4), 2);
  EXPECT_EQ(i4[0], 1u);
  EXPECT_EQ(i4[1], 2 * b + 3);
  // Random rows whose boundaries are rarely descents (a drop may then free
  // no slot, as the next entry needs a jump instead): always fits, keeps
  // the stated minimum, keeps a subsequence.
  std::mt19937 rng(9);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t blocks = 1 + trial % 7;
    const int64_t n = 1 + trial % 23;
    std::vector<uint32_t> ix = RandomAscending(blocks * kBlock16Size, n, &rng);
    // Cluster the relative indices so that boundaries are rarely descents.
    for (uint32_t& i : ix) i = (i / b) * b + (i % 97);
    std::sort(ix.begin(), ix.end());
    ix.erase(std::unique(ix.begin(), ix.end()), ix.end());
    const int64_t count = ix.size();
    std::vector<float> vx = RandomValues(count, &rng);
    const std::vector<uint32_t> before_i = ix;
    const std::vector<float> before_v = vx;
    const int64_t slots = count;
    const int64_t kept = FitBlock16(ix.data(), vx.data(), count, slots);
    ASSERT_LE(Block16Slots(ix.data(), kept), slots);
    const int64_t top_blocks = before_i.back() / b + 1;
    ASSERT_GE(kept, std::min<int64_t>(
                        count, std::max<int64_t>(slots - (top_blocks - 1),
                                                 slots / 2)));
    int64_t p = 0;
    for (int64_t j = 0; j < kept; ++j) {
      while (p < count && before_i[p] != ix[j]) ++p;
      ASSERT_LT(p, count);
      ASSERT_EQ(before_v[p], vx[j]);
    }
  }
}

struct TestRows {
  std::vector<std::vector<uint32_t>> idx;
  std::vector<std::vector<float>> val;
  std::vector<Encoded> encoded;
  std::vector<SparseRow> rows;
};

// Rows alternate between format A and B; format-B rows keep the bf16 value.
TestRows MakeRows(int64_t m, int64_t d, int64_t nnz, std::mt19937* rng) {
  TestRows t;
  t.idx.resize(m);
  t.val.resize(m);
  t.encoded.resize(m);
  for (int64_t i = 0; i < m; ++i) {
    t.idx[i] = RandomAscending(d, nnz + i, rng);
    t.val[i] = RandomValues(t.idx[i].size(), rng);
    SparseRow row;
    if (i % 2 == 0) {
      row.nnz = t.idx[i].size();
      row.index32 = t.idx[i].data();
      row.value32 = t.val[i].data();
    } else {
      if (i == 3) {
        // Leave block 1 empty: a jump marker mid-row.
        auto& ix = t.idx[i];
        ix.erase(
            std::remove_if(ix.begin(), ix.end(),
                           [](uint32_t x) { return x / kBlock16Size == 1; }),
            ix.end());
        t.val[i].resize(ix.size());
      }
      t.encoded[i] = Encode(t.idx[i], t.val[i], d, /*extra=*/i % 4 == 1);
      for (float& v : t.val[i]) v = BFloat16ToFloat(ToBlock16Value(v));
      Encoded& e = t.encoded[i];
      row = Block16Row(e.i16.data(), e.v16.data(), e.row.nnz, d);
    }
    t.rows.push_back(row);
  }
  return t;
}

TEST(SparseOpsTest, DotsMatchDoubleReference) {
  std::mt19937 rng(3);
  const int64_t d = 2 * kBlock16Size + 77;
  const int64_t m = 7;
  TestRows t = MakeRows(m, d, 40000, &rng);
  const std::vector<float> dense = RandomValues(d, &rng);
  for (int threads : {1, 3}) {
    std::vector<double> out(m, -1.0);
    SparseDenseDots(t.rows.data(), m, dense.data(), out.data(), threads);
    for (int64_t i = 0; i < m; ++i) {
      double ref = 0;
      for (size_t j = 0; j < t.idx[i].size(); ++j) {
        ref += static_cast<double>(t.val[i][j]) * dense[t.idx[i][j]];
      }
      EXPECT_EQ(out[i], ref) << "row " << i;  // Same order: bit-exact.
    }
  }
}

TEST(SparseOpsTest, LinearCombinationMatchesRowOrderReference) {
  std::mt19937 rng(4);
  const int64_t d = 3 * kBlock16Size;
  const int64_t m = 5;
  TestRows t = MakeRows(m, d, 60000, &rng);
  const std::vector<double> coeffs = {0.5, -1.25, 3.0, 1e-3, -7.0};
  std::vector<float> ref = RandomValues(d, &rng);
  std::vector<float> base = ref;
  for (int64_t i = 0; i < m; ++i) {
    for (size_t j = 0; j < t.idx[i].size(); ++j) {
      ref[t.idx[i][j]] += static_cast<float>(coeffs[i] * t.val[i][j]);
    }
  }
  for (int threads : {1, 2, 5}) {
    std::vector<float> dense = base;
    SparseLinearCombination(t.rows.data(), m, coeffs.data(), dense.data(),
                            threads);
    ASSERT_EQ(dense, ref) << "threads=" << threads;
  }
}

TEST(SparseOpsTest, EmptyRows) {
  SparseRow empty;
  double out = 5;
  float dense[4] = {1, 2, 3, 4};
  SparseDenseDots(&empty, 1, dense, &out);
  EXPECT_EQ(out, 0.0);
  const double c = 2.0;
  SparseLinearCombination(&empty, 1, &c, dense);
  EXPECT_EQ(dense[3], 4.0f);
  // Format B: no slots, and an end marker first.
  const uint16_t i16[1] = {0}, v16[1] = {kBlock16End};
  for (int64_t slots : {0, 1}) {
    const SparseRow row = Block16Row(i16, v16, slots, 4);
    SparseDenseDots(&row, 1, dense, &out);
    EXPECT_EQ(out, 0.0);
    SparseLinearCombination(&row, 1, &c, dense);
    EXPECT_EQ(dense[0], 1.0f);
  }
}

// The format-B decoders on arbitrary slot bits (the window's rows are
// trusted, but a decoder must not read or write out of bounds whatever it is
// given; run under ASan in //tests:asan): only indices < dim are visited.
TEST(SparseOpsTest, Block16DecodersStayInBoundsOnGarbage) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t d = 1 + rng() % (3 * kBlock16Size);
    const int64_t slots = rng() % 64;
    std::vector<uint16_t> i16(slots), v16(slots);
    for (int64_t j = 0; j < slots; ++j) {
      // Mostly small relative indices, some markers (also with a nonzero
      // index16, which a valid row never has).
      i16[j] = static_cast<uint16_t>(rng() % 4 == 0 ? rng() : rng() % 8);
      const uint32_t kind = rng() % 8;
      v16[j] = kind == 0   ? Block16Jump(1 + static_cast<int>(rng() % 127))
               : kind == 1 ? static_cast<uint16_t>(0x7f80u | (rng() & 0x807fu))
                           : static_cast<uint16_t>(rng());
    }
    // Exact-size heap copies so that ASan sees any read past the end.
    std::unique_ptr<uint16_t[]> hi(new uint16_t[slots]);
    std::unique_ptr<uint16_t[]> hv(new uint16_t[slots]);
    std::copy(i16.begin(), i16.end(), hi.get());
    std::copy(v16.begin(), v16.end(), hv.get());
    const SparseRow row = Block16Row(hi.get(), hv.get(), slots, d);
    std::vector<uint32_t> idx;
    std::vector<float> val;
    DecodeRow(row, &idx, &val);
    for (uint32_t i : idx) ASSERT_LT(i, d);
    std::unique_ptr<float[]> dense(new float[d]());
    double out = 0;
    SparseDenseDots(&row, 1, dense.get(), &out, 1);
    const double coeff = 1.0;
    SparseLinearCombination(&row, 1, &coeff, dense.get(), 2);
    std::vector<uint32_t> starts;
    Block16BlockStarts(row, &starts);
    for (uint32_t st : starts) ASSERT_LE(st, slots);
  }
}

}  // namespace
}  // namespace kernels
}  // namespace terse
