#include "efcp/window_state.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace terse {
namespace efcp {

absl::StatusOr<const char*> ReadDenseRows(BlobReader* reader, int64_t filled,
                                          int64_t dim,
                                          std::vector<double>* norms2) {
  TERSE_ASSIGN_OR_RETURN(const char* rows,
                         reader->GetArray<float>(filled * dim));
  norms2->assign(filled, 0.0);
  for (int64_t i = 0; i < filled; ++i) {
    double sum = 0;
    for (int64_t j = 0; j < dim; ++j) {
      const float v = BlobReader::Element<float>(rows, i * dim + j);
      if (!std::isfinite(v)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "efcp state: window row ", i, " has a non-finite entry"));
      }
      sum += static_cast<double>(v) * v;
    }
    (*norms2)[i] = sum;
  }
  return rows;
}

void CommitDenseRows(const char* rows, int64_t filled, DenseWindow* window) {
  window->Clear();
  const int64_t d = window->dim();
  for (int64_t i = 0; i < filled; ++i) {
    BlobReader::CopyArray(rows + i * d * static_cast<int64_t>(sizeof(float)), d,
                          window->mutable_row(i));
  }
}

void WriteSparseRows(const SparseWindow& window, int64_t filled,
                     BlobWriter* writer) {
  std::vector<uint32_t> indices;
  std::vector<float> values;
  for (int64_t i = 0; i < filled; ++i) {
    window.ReadRow(i, &indices, &values);
    writer->PutI64(static_cast<int64_t>(indices.size()));
    writer->PutArray(indices.data(), static_cast<int64_t>(indices.size()));
    writer->PutArray(values.data(), static_cast<int64_t>(values.size()));
  }
}

absl::Status CheckSparseRow(const SparseWindow& window, const uint32_t* indices,
                            const float* values, int64_t nnz) {
  if (nnz < 0 || nnz > window.capacity()) {
    return absl::InvalidArgumentError(
        absl::StrCat("efcp: sparse row has ", nnz, " entries; at most ",
                     window.capacity(), " fit a slot"));
  }
  for (int64_t j = 0; j < nnz; ++j) {
    if (indices[j] >= window.dim() || (j > 0 && indices[j] <= indices[j - 1])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "efcp: sparse row index ", indices[j], " at entry ", j,
          " is out of range or not ascending (dim ", window.dim(), ")"));
    }
    if (!std::isfinite(values[j]) ||
        window.RoundToStorage(values[j]) != values[j]) {
      return absl::InvalidArgumentError(
          absl::StrCat("efcp: sparse row value ", values[j], " at entry ", j,
                       " is not finite or not representable in ",
                       WindowStorageName(window.storage())));
    }
  }
  const int64_t slots = window.Slots(indices, nnz);
  if (slots > window.capacity()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "efcp: sparse row of ", nnz, " entries needs ", slots,
        " slots with its block markers; a row has ", window.capacity()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SparseVector>> ReadSparseRows(
    BlobReader* reader, int64_t filled, const SparseWindow& window) {
  std::vector<SparseVector> rows(filled);
  for (SparseVector& row : rows) {
    TERSE_ASSIGN_OR_RETURN(int64_t nnz, reader->GetI64());
    if (nnz < 0 || nnz > window.capacity()) {
      return absl::InvalidArgumentError(
          absl::StrCat("efcp state: a sparse row of ", nnz,
                       " entries (capacity ", window.capacity(), ")"));
    }
    TERSE_ASSIGN_OR_RETURN(const char* index_bytes,
                           reader->GetArray<uint32_t>(nnz));
    TERSE_ASSIGN_OR_RETURN(const char* value_bytes,
                           reader->GetArray<float>(nnz));
    row.indices.resize(nnz);
    row.values.resize(nnz);
    BlobReader::CopyArray(index_bytes, nnz, row.indices.data());
    BlobReader::CopyArray(value_bytes, nnz, row.values.data());
    TERSE_RETURN_IF_ERROR(
        CheckSparseRow(window, row.indices.data(), row.values.data(), nnz));
  }
  return rows;
}

std::vector<double> SparseNorms2(const std::vector<SparseVector>& rows) {
  std::vector<double> norms2;
  norms2.reserve(rows.size());
  for (const SparseVector& row : rows) {
    double sum = 0;
    for (float v : row.values) sum += static_cast<double>(v) * v;
    norms2.push_back(sum);
  }
  return norms2;
}

void CommitSparseRows(const std::vector<SparseVector>& rows,
                      SparseWindow* window) {
  window->Clear();
  for (size_t i = 0; i < rows.size(); ++i) {
    window->SetRow(static_cast<int64_t>(i), rows[i].indices.data(),
                   rows[i].values.data(),
                   static_cast<int64_t>(rows[i].indices.size()));
  }
}

absl::StatusOr<std::vector<float>> ReadErrorBuffer(BlobReader* reader,
                                                   int64_t dim) {
  TERSE_ASSIGN_OR_RETURN(const char* bytes, reader->GetArray<float>(dim));
  std::vector<float> error(dim);
  BlobReader::CopyArray(bytes, dim, error.data());
  for (float e : error) {
    if (!std::isfinite(e)) {
      return absl::InvalidArgumentError(
          "efcp state: non-finite entry in the error-feedback buffer");
    }
  }
  return error;
}

void WriteGram(const Eigen::MatrixXd& gram, BlobWriter* writer) {
  writer->PutArray(gram.data(), gram.size());
}

absl::StatusOr<Eigen::MatrixXd> ReadGram(BlobReader* reader, int64_t m) {
  TERSE_ASSIGN_OR_RETURN(const char* bytes, reader->GetArray<double>(m * m));
  Eigen::MatrixXd gram(m, m);
  BlobReader::CopyArray(bytes, m * m, gram.data());
  return gram;
}

absl::Status CheckGramMatchesRows(const Eigen::MatrixXd& gram,
                                  const std::vector<double>& norms2) {
  const int64_t filled = static_cast<int64_t>(norms2.size());
  for (int64_t i = 0; i < gram.rows(); ++i) {
    if (i >= filled) {
      if (gram.row(i).cwiseAbs().maxCoeff() != 0.0 ||
          gram.col(i).cwiseAbs().maxCoeff() != 0.0) {
        return absl::InvalidArgumentError(
            "efcp: Gram matrix has entries for unwritten slots");
      }
      continue;
    }
    if (!(std::abs(gram(i, i) - norms2[i]) <= 1e-6 * norms2[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("efcp: Gram matrix diagonal entry ", i, " (", gram(i, i),
                       ") does not match its row (", norms2[i], ")"));
    }
  }
  return absl::OkStatus();
}

std::string SaveDenseHistory(absl::string_view kind, int64_t dim, int64_t m,
                             int64_t steps, const float* rows,
                             const Eigen::MatrixXd& gram) {
  BlobWriter writer(kind);
  writer.PutI64(dim);
  writer.PutI64(m);
  writer.PutI64(steps);
  writer.PutArray(rows, std::min(steps, m) * dim);
  WriteGram(gram, &writer);
  return writer.Release();
}

absl::StatusOr<DenseHistoryState> ParseDenseHistory(absl::string_view blob,
                                                    absl::string_view kind,
                                                    int64_t dim, int64_t m) {
  TERSE_ASSIGN_OR_RETURN(BlobReader reader, BlobReader::Open(blob, kind));
  const int64_t d = dim;
  TERSE_ASSIGN_OR_RETURN(int64_t blob_dim, reader.GetI64());
  TERSE_ASSIGN_OR_RETURN(int64_t blob_m, reader.GetI64());
  DenseHistoryState state;
  TERSE_ASSIGN_OR_RETURN(state.steps, reader.GetI64());
  if (blob_dim != d || blob_m != m) {
    return absl::InvalidArgumentError(absl::StrCat(
        "efcp: ", kind, " state is for dim ", blob_dim, ", window ", blob_m,
        "; this one has dim ", d, ", window ", m));
  }
  if (state.steps < 0) {
    return absl::InvalidArgumentError("efcp: negative step count in state");
  }
  std::vector<double> norms2;
  TERSE_ASSIGN_OR_RETURN(
      state.rows, ReadDenseRows(&reader, std::min(state.steps, m), d, &norms2));
  TERSE_ASSIGN_OR_RETURN(state.gram, ReadGram(&reader, m));
  TERSE_RETURN_IF_ERROR(reader.ExpectEnd());
  TERSE_RETURN_IF_ERROR(CheckGramMatchesRows(state.gram, norms2));
  return state;
}

std::string SaveSparseHistory(absl::string_view kind,
                              const SparseWindow& window, int64_t steps,
                              const float* error, const Eigen::MatrixXd& gram) {
  BlobWriter writer(kind);
  writer.PutI64(window.dim());
  writer.PutI64(window.rows());
  writer.PutI64(window.capacity());
  writer.PutU32(static_cast<uint32_t>(window.storage()));
  writer.PutI64(steps);
  writer.PutArray(error, window.dim());
  WriteSparseRows(window, std::min(steps, window.rows()), &writer);
  WriteGram(gram, &writer);
  return writer.Release();
}

absl::StatusOr<SparseHistoryState> ParseSparseHistory(
    absl::string_view blob, absl::string_view kind,
    const SparseWindow& window) {
  TERSE_ASSIGN_OR_RETURN(BlobReader reader, BlobReader::Open(blob, kind));
  const int64_t m = window.rows();
  const int64_t d = window.dim();
  const int64_t k = window.capacity();
  const uint32_t storage = static_cast<uint32_t>(window.storage());
  TERSE_ASSIGN_OR_RETURN(int64_t blob_dim, reader.GetI64());
  TERSE_ASSIGN_OR_RETURN(int64_t blob_m, reader.GetI64());
  TERSE_ASSIGN_OR_RETURN(int64_t blob_k, reader.GetI64());
  TERSE_ASSIGN_OR_RETURN(uint32_t blob_storage, reader.GetU32());
  SparseHistoryState state;
  TERSE_ASSIGN_OR_RETURN(state.steps, reader.GetI64());
  if (blob_dim != d || blob_m != m || blob_k != k || blob_storage != storage) {
    return absl::InvalidArgumentError(absl::StrCat(
        "efcp: ", kind, " state is for dim ", blob_dim, ", window ", blob_m,
        ", k ", blob_k, ", storage ", blob_storage, "; this one has dim ", d,
        ", window ", m, ", k ", k, ", storage ", storage));
  }
  if (state.steps < 0) {
    return absl::InvalidArgumentError("efcp: negative step count in state");
  }
  TERSE_ASSIGN_OR_RETURN(state.error, ReadErrorBuffer(&reader, d));
  TERSE_ASSIGN_OR_RETURN(
      state.rows, ReadSparseRows(&reader, std::min(state.steps, m), window));
  TERSE_ASSIGN_OR_RETURN(state.gram, ReadGram(&reader, m));
  TERSE_RETURN_IF_ERROR(reader.ExpectEnd());
  TERSE_RETURN_IF_ERROR(
      CheckGramMatchesRows(state.gram, SparseNorms2(state.rows)));
  return state;
}

}  // namespace efcp
}  // namespace terse
