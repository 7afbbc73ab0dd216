// Serialising the gradient windows and Gram matrices inside a state blob
// (state_blob.h), shared by the four preconditioners, and the checks a
// restored or imported window must pass before anything is committed.
//
// Dense rows: `filled` rows of d floats. Sparse rows: per row nnz (i64), the
// absolute indices (u32) and values (f32, as stored). Gram: m x m doubles,
// column-major. Readers validate everything (lengths, index order and range,
// finiteness, storage precision, Gram diagonal vs rows, unwritten slots
// zero) and return InvalidArgument on the first problem; the Commit
// functions cannot fail. Stateless, thread-compatible.
#ifndef TERSE_EFCP_WINDOW_STATE_H_
#define TERSE_EFCP_WINDOW_STATE_H_

#include <cstdint>
#include <vector>

#include "Eigen/Core"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "efcp/dense_window.h"
#include "efcp/sparse_window.h"
#include "efcp/state_blob.h"

namespace terse {
namespace efcp {

// Returns the start of filled*d floats inside the blob, all finite; fills
// `norms2` with each row's squared norm (for CheckGramMatchesRows).
absl::StatusOr<const char*> ReadDenseRows(BlobReader* reader, int64_t filled,
                                          int64_t dim,
                                          std::vector<double>* norms2);
// Clears the window and copies the rows into slots 0..filled-1.
void CommitDenseRows(const char* rows, int64_t filled, DenseWindow* window);

// Sparse rows 0..filled-1.
void WriteSparseRows(const SparseWindow& window, int64_t filled,
                     BlobWriter* writer);
// Checks one row against the window's shape: nnz <= capacity, indices
// strictly ascending and < dim, values finite and representable in the
// window's storage.
absl::Status CheckSparseRow(const SparseWindow& window, const uint32_t* indices,
                            const float* values, int64_t nnz);
absl::StatusOr<std::vector<SparseVector>> ReadSparseRows(
    BlobReader* reader, int64_t filled, const SparseWindow& window);
// Squared norm of each row.
std::vector<double> SparseNorms2(const std::vector<SparseVector>& rows);
// Clears the window and stores rows[i] in slot i.
void CommitSparseRows(const std::vector<SparseVector>& rows,
                      SparseWindow* window);

// The error-feedback buffer: d floats, all finite.
absl::StatusOr<std::vector<float>> ReadErrorBuffer(BlobReader* reader,
                                                   int64_t dim);

void WriteGram(const Eigen::MatrixXd& gram, BlobWriter* writer);
absl::StatusOr<Eigen::MatrixXd> ReadGram(BlobReader* reader, int64_t m);
// gram(i, i) equals norms2[i] (to 1e-6 relative) for the written slots
// i < norms2.size(), and the rows and columns of the other slots are zero.
absl::Status CheckGramMatchesRows(const Eigen::MatrixXd& gram,
                                  const std::vector<double>& norms2);

// Whole-state blobs of the preconditioners, so that the CPU and CUDA
// versions of one algorithm write and read the same bytes.
//
// Dense ("dense_mfac", "ggt"): dim, m, steps, the written rows
// (min(steps, m)), the Gram matrix. `rows` holds min(steps, m) * dim floats,
// row after row (a DenseWindow's row(0), or a download of a device window).
std::string SaveDenseHistory(absl::string_view kind, int64_t dim, int64_t m,
                             int64_t steps, const float* rows,
                             const Eigen::MatrixXd& gram);
struct DenseHistoryState {
  int64_t steps = 0;
  const char* rows = nullptr;  // inside the blob: min(steps, m) * dim floats
  Eigen::MatrixXd gram;
};
// Validates everything against the shape (including the Gram diagonal
// against the rows); commits nothing.
absl::StatusOr<DenseHistoryState> ParseDenseHistory(absl::string_view blob,
                                                    absl::string_view kind,
                                                    int64_t dim, int64_t m);

// Sparse ("sparse_mfac", "sparse_ggt"): dim, m, capacity k, storage, steps,
// the error buffer, the written rows, the Gram matrix.
std::string SaveSparseHistory(absl::string_view kind,
                              const SparseWindow& window, int64_t steps,
                              const float* error, const Eigen::MatrixXd& gram);
struct SparseHistoryState {
  int64_t steps = 0;
  std::vector<float> error;
  std::vector<SparseVector> rows;  // slots 0..min(steps, m)-1
  Eigen::MatrixXd gram;
};
absl::StatusOr<SparseHistoryState> ParseSparseHistory(
    absl::string_view blob, absl::string_view kind, const SparseWindow& window);

}  // namespace efcp
}  // namespace terse

#endif  // TERSE_EFCP_WINDOW_STATE_H_
