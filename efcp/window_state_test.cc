#include "efcp/window_state.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace terse {
namespace efcp {
namespace {

TEST(WindowStateTest, DenseHistoryRoundTrip) {
  DenseWindow window(3, 4, 1);
  const float row0[4] = {1, 2, 3, 4}, row1[4] = {-1, 0, 0.5f, 2};
  window.SetRow(0, row0);
  window.SetRow(1, row1);
  Eigen::MatrixXd gram = Eigen::MatrixXd::Zero(3, 3);
  gram(0, 0) = 30;
  gram(1, 1) = 5.25;
  gram(0, 1) = gram(1, 0) = 9;
  const std::string blob =
      SaveDenseHistory("t", 4, 3, /*steps=*/2, window.row(0), gram);
  absl::StatusOr<DenseHistoryState> state = ParseDenseHistory(blob, "t", 4, 3);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->steps, 2);
  EXPECT_EQ(state->gram, gram);
  DenseWindow restored(3, 4, 1);
  std::vector<float> junk(4, 9.0f);
  restored.SetRow(2, junk.data());
  CommitDenseRows(state->rows, 2, &restored);
  EXPECT_EQ(restored.row(1)[2], 0.5f);
  EXPECT_EQ(restored.row(2)[0], 0.0f);  // cleared

  EXPECT_FALSE(ParseDenseHistory(blob, "t", 5, 3).ok());  // other shape
  EXPECT_FALSE(ParseDenseHistory(blob, "u", 4, 3).ok());  // other kind
  gram(1, 1) = 5;  // diagonal no longer matches row 1
  EXPECT_FALSE(
      ParseDenseHistory(SaveDenseHistory("t", 4, 3, 2, window.row(0), gram),
                        "t", 4, 3)
          .ok());
  const float nan_row[4] = {1, NAN, 0, 0};
  window.SetRow(1, nan_row);
  EXPECT_FALSE(
      ParseDenseHistory(SaveDenseHistory("t", 4, 3, 2, window.row(0), gram),
                        "t", 4, 3)
          .ok());
}

TEST(WindowStateTest, SparseRowChecks) {
  SparseWindow window(2, 100, 3, WindowStorage::kBlock16Bf16, 1);
  const uint32_t good[3] = {1, 5, 99};
  const float values[3] = {1.0f, -2.0f, 0.5f};
  EXPECT_TRUE(CheckSparseRow(window, good, values, 3).ok());
  EXPECT_FALSE(CheckSparseRow(window, good, values, 4).ok());  // > capacity
  const uint32_t unsorted[3] = {5, 1, 99};
  EXPECT_FALSE(CheckSparseRow(window, unsorted, values, 3).ok());
  const uint32_t duplicate[3] = {1, 1, 99};
  EXPECT_FALSE(CheckSparseRow(window, duplicate, values, 3).ok());
  const uint32_t out_of_range[3] = {1, 5, 100};
  EXPECT_FALSE(CheckSparseRow(window, out_of_range, values, 3).ok());
  const float not_bf16[3] = {1.0f, 1.0f + 1.0f / 1024, 0.5f};
  EXPECT_FALSE(CheckSparseRow(window, good, not_bf16, 3).ok());
  const float nan[3] = {1.0f, std::nanf(""), 0.5f};
  EXPECT_FALSE(CheckSparseRow(window, good, nan, 3).ok());
}

TEST(WindowStateTest, SparseRowsRoundTrip) {
  SparseWindow window(2, 70000, 3, WindowStorage::kIndex32Fp32, 1);
  const uint32_t indices[3] = {2, 65536, 69999};
  const float values[3] = {1.5f, -3.0f, 0.25f};
  window.SetRow(0, indices, values, 3);
  BlobWriter writer("t");
  WriteSparseRows(window, 2, &writer);  // slot 1 is empty
  const std::string blob = writer.Release();
  BlobReader reader = *BlobReader::Open(blob, "t");
  absl::StatusOr<std::vector<SparseVector>> rows =
      ReadSparseRows(&reader, 2, window);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_TRUE(reader.ExpectEnd().ok());
  EXPECT_EQ((*rows)[0].indices, (std::vector<uint32_t>{2, 65536, 69999}));
  EXPECT_TRUE((*rows)[1].indices.empty());
  EXPECT_EQ(SparseNorms2(*rows), (std::vector<double>{11.3125, 0}));
  SparseWindow restored(2, 70000, 3, WindowStorage::kIndex32Fp32, 1);
  CommitSparseRows(*rows, &restored);
  EXPECT_EQ(restored.nnz(0), 3);
  EXPECT_EQ(restored.nnz(1), 0);
}

TEST(WindowStateTest, GramChecks) {
  Eigen::MatrixXd gram = Eigen::MatrixXd::Zero(3, 3);
  gram(0, 0) = 4;
  gram(1, 1) = 9;
  gram(0, 1) = gram(1, 0) = 1;
  EXPECT_TRUE(CheckGramMatchesRows(gram, {4, 9}).ok());
  EXPECT_FALSE(CheckGramMatchesRows(gram, {4, 8}).ok());
  gram(2, 0) = 0.5;  // an unwritten slot
  EXPECT_FALSE(CheckGramMatchesRows(gram, {4, 9}).ok());
  BlobWriter writer("g");
  WriteGram(gram, &writer);
  const std::string blob = writer.Release();
  BlobReader reader = *BlobReader::Open(blob, "g");
  absl::StatusOr<Eigen::MatrixXd> back = ReadGram(&reader, 3);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, gram);
  BlobReader short_reader = *BlobReader::Open(blob, "g");
  EXPECT_FALSE(ReadGram(&short_reader, 4).ok());
}

TEST(WindowStateTest, ErrorBuffer) {
  const float good[3] = {1, 2, 3};
  BlobWriter writer("e");
  writer.PutArray(good, 3);
  std::string blob = writer.Release();
  BlobReader reader = *BlobReader::Open(blob, "e");
  EXPECT_EQ(*ReadErrorBuffer(&reader, 3), (std::vector<float>{1, 2, 3}));
  const float bad[3] = {1, INFINITY, 3};
  BlobWriter bad_writer("e");
  bad_writer.PutArray(bad, 3);
  blob = bad_writer.Release();
  BlobReader bad_reader = *BlobReader::Open(blob, "e");
  EXPECT_FALSE(ReadErrorBuffer(&bad_reader, 3).ok());
}

}  // namespace
}  // namespace efcp
}  // namespace terse
