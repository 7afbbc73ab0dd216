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
#include "efcp/dense_window.h"
#include "efcp/sparse_window.h"
#include "efcp/state_blob.h"

namespace terse {
namespace efcp {

// Dense rows 0..filled-1.
void WriteDenseRows(const DenseWindow& window, int64_t filled,
                    BlobWriter* writer);
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

}  // namespace efcp
}  // namespace terse

#endif  // TERSE_EFCP_WINDOW_STATE_H_
