#include "compressors/residual_store.h"

#include <vector>

#include "gtest/gtest.h"

namespace terse {
namespace {

std::vector<Segment> Segments(std::initializer_list<Segment> s) { return s; }

TEST(ResidualStoreTest, ResidualFollowsTheTensorAcrossBuckets) {
  ResidualStore store;
  // Bucket 1: tensor "w" at offset 2, 3 elements.
  std::vector<Segment> first = Segments({{"w", 2, 3, 0}});
  std::vector<float> a = {0, 0, 1, 2, 3}, sent = {0, 0, 1, 0, 3};
  store.Store(first, a, sent);
  EXPECT_EQ(store.Residual("w", 0, 3), (std::vector<float>{0, 2, 0}));
  // Next step "w" sits at offset 0 of another bucket: same residual.
  std::vector<float> g = {10, 10, 10, 7};
  store.AddTo(absl::MakeSpan(g), Segments({{"w", 0, 3, 0}}));
  EXPECT_EQ(g, (std::vector<float>{10, 12, 10, 7}));
  store.Erase(Segments({{"w", 0, 3, 0}}));
  EXPECT_EQ(store.size(), 0);
}

TEST(ResidualStoreTest, LeakyAccumulationAndClearingSentEntries) {
  ResidualStore store;
  const std::vector<Segment> w = Segments({{"w", 1, 2, 0}});
  std::vector<float> a = {9, 1, 2};
  store.Accumulate(absl::MakeSpan(a), w, 0.5f);  // r = a.
  EXPECT_EQ(a, (std::vector<float>{9, 1, 2}));
  std::vector<float> b = {9, 4, 4};
  store.Accumulate(absl::MakeSpan(b), w, 0.5f);  // r = 0.5 r + b.
  EXPECT_EQ(b, (std::vector<float>{9, 4.5f, 5}));
  EXPECT_EQ(store.Residual("w", 0, 2), (std::vector<float>{4.5f, 5}));
  store.ClearSent(w, std::vector<float>{7, 0, 3});
  EXPECT_EQ(store.Residual("w", 0, 2), (std::vector<float>{4.5f, 0}));
}

TEST(ResidualStoreTest, ExportImportRoundTrip) {
  ResidualStore a;
  a.Store(Segments({{"x", 0, 2, 0}, {"y", 2, 1, 4}}),
          std::vector<float>{1, 2, 3}, std::vector<float>{0, 0, 0});
  ResidualStore b;
  b.Import(a.Export());
  EXPECT_EQ(b.Residual("x", 0, 2), (std::vector<float>{1, 2}));
  EXPECT_EQ(b.Residual("y", 4, 1), (std::vector<float>{3}));
  EXPECT_EQ(b.size(), 2);
}

// Error feedback over steps with a compressor that sends the entries of even
// index: conservation (what was sent + the residual = every gradient since
// the residual was last zero), checked in exact small-integer arithmetic.
TEST(ResidualStoreTest, EraseNamesRestartsThoseResidualsAndKeepsTheLaw) {
  ResidualStore store;
  // One bucket: "kept" at [0, 4), "dropped" in two segments at [4, 6) and
  // [6, 9) (tensor offsets 0 and 2), "other" at [9, 10).
  const std::vector<Segment> bucket = Segments({{"kept", 0, 4, 0},
                                                {"dropped", 4, 2, 0},
                                                {"dropped", 6, 3, 2},
                                                {"other", 9, 1, 0}});
  const int d = 10;
  std::vector<double> sent_sum(d, 0), grad_sum(d, 0);
  auto step = [&](int t) {
    std::vector<float> a(d), sent(d, 0);
    for (int i = 0; i < d; ++i) a[i] = static_cast<float>((t * 7 + i * 3) % 11);
    for (int i = 0; i < d; ++i) grad_sum[i] += a[i];
    store.AddTo(absl::MakeSpan(a), bucket);
    for (int i = 0; i < d; i += 2) sent[i] = a[i];
    for (int i = 0; i < d; ++i) sent_sum[i] += sent[i];
    store.Store(bucket, a, sent);
  };
  auto residual = [&](int i) -> double {
    if (i < 4) return store.Residual("kept", 0, 4)[i];
    if (i < 6) return store.Residual("dropped", 0, 2)[i - 4];
    if (i < 9) return store.Residual("dropped", 2, 3)[i - 6];
    return store.Residual("other", 0, 1)[0];
  };
  for (int t = 0; t < 5; ++t) step(t);
  for (int i = 0; i < d; ++i) {
    EXPECT_EQ(sent_sum[i] + residual(i), grad_sum[i]) << i;
  }
  EXPECT_EQ(store.size(), 4);
  EXPECT_EQ(store.EraseNames({"dropped", "never.seen"}), 2);
  EXPECT_EQ(store.size(), 2);
  for (int i = 4; i < 9; ++i) EXPECT_EQ(residual(i), 0.0) << i;
  // The dropped tensor starts afresh: its law counts from here.
  for (int i = 4; i < 9; ++i) sent_sum[i] = grad_sum[i] = 0;
  for (int t = 5; t < 9; ++t) step(t);
  for (int i = 0; i < d; ++i) {
    EXPECT_EQ(sent_sum[i] + residual(i), grad_sum[i]) << i;
  }
  EXPECT_EQ(store.EraseNames({}), 0);
  EXPECT_EQ(store.size(), 4);
}

TEST(ResidualStoreTest, SegmentsAreValidated) {
  CompressContext ctx;
  std::vector<Segment> bad = Segments({{"x", 3, 4, 0}});
  ctx.segments = bad;
  EXPECT_FALSE(ResidualStore::SegmentsOf(ctx, 5).ok());
  std::vector<Segment> overlap = Segments({{"x", 0, 3, 0}, {"y", 2, 2, 0}});
  ctx.segments = overlap;
  EXPECT_FALSE(ResidualStore::SegmentsOf(ctx, 5).ok());
}

}  // namespace
}  // namespace terse
