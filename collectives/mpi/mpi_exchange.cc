// MpiCommunicator's personalised exchanges: Alltoallv and ReduceScatter
// (contracts in communicator.h and mpi_communicator.h).
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/mpi/call_signature.h"
#include "collectives/mpi/mpi_communicator.h"
#include "collectives/reduce.h"
#include "common/status.h"

namespace terse {

absl::Status MpiCommunicator::Alltoallv(
    const void* send, const std::vector<int64_t>& send_bytes, void* recv,
    const std::vector<int64_t>& recv_bytes) {
  const int n = size_;
  if (static_cast<int>(send_bytes.size()) != n ||
      static_cast<int>(recv_bytes.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mpi: alltoallv: send_bytes has ", send_bytes.size(),
        " and recv_bytes ", recv_bytes.size(), " entries for ", n, " ranks"));
  }
  std::vector<int64_t> sdispl(n + 1, 0), rdispl(n + 1, 0);
  for (int r = 0; r < n; ++r) {
    if (send_bytes[r] < 0 || recv_bytes[r] < 0) {
      return absl::InvalidArgumentError("mpi: alltoallv: negative size");
    }
    sdispl[r + 1] = sdispl[r] + send_bytes[r];
    rdispl[r + 1] = rdispl[r] + recv_bytes[r];
  }
  TERSE_RETURN_IF_ERROR(CheckBuffer(send, sdispl[n], "alltoallv send"));
  TERSE_RETURN_IF_ERROR(CheckBuffer(recv, rdispl[n], "alltoallv recv"));
  // Every rank's sizes to every rank, so all find the same first mismatch
  // (sizes that disagree would make MPI truncate or hang).
  std::vector<int64_t> mine(send_bytes);
  mine.insert(mine.end(), recv_bytes.begin(), recv_bytes.end());
  std::vector<int64_t> all(static_cast<size_t>(2 * n) * n);
  TERSE_RETURN_IF_ERROR(Check(MPI_Allgather(mine.data(), 2 * n, MPI_INT64_T,
                                            all.data(), 2 * n, MPI_INT64_T,
                                            comm_),
                              "MPI_Allgather(alltoallv sizes)"));
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      const int64_t sends = all[static_cast<size_t>(i) * 2 * n + j];
      const int64_t expects = all[static_cast<size_t>(j) * 2 * n + n + i];
      if (sends != expects) {
        return absl::InvalidArgumentError(absl::StrCat(
            "mpi: alltoallv: rank ", i, " sends ", sends, " bytes to rank ",
            j, ", which expects ", expects, " (seen on rank ", rank_, ")"));
      }
    }
  }
  const int64_t chunk =
      std::clamp<int64_t>(options_.max_elements_per_call, 1, INT_MAX);
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  if (sdispl[n] <= chunk && rdispl[n] <= chunk) {
    std::vector<int> sc(n), sd(n), rc(n), rd(n);
    for (int r = 0; r < n; ++r) {
      sc[r] = static_cast<int>(send_bytes[r]);
      sd[r] = static_cast<int>(sdispl[r]);
      rc[r] = static_cast<int>(recv_bytes[r]);
      rd[r] = static_cast<int>(rdispl[r]);
    }
    return Check(MPI_Alltoallv(in, sc.data(), sd.data(), MPI_BYTE, out,
                               rc.data(), rd.data(), MPI_BYTE, comm_),
                 "MPI_Alltoallv");
  }
  // Large: at step d, send to rank + d and receive from rank - d, in chunks.
  for (int d = 0; d < n; ++d) {
    const int to = (rank_ + d) % n;
    const int from = (rank_ - d + n) % n;
    if (d == 0) {
      if (send_bytes[rank_] > 0) {
        std::memcpy(out + rdispl[rank_], in + sdispl[rank_],
                    send_bytes[rank_]);
      }
      continue;
    }
    for (int64_t sent = 0, got = 0;
         sent < send_bytes[to] || got < recv_bytes[from];) {
      const int ns = static_cast<int>(std::min(chunk, send_bytes[to] - sent));
      const int nr = static_cast<int>(std::min(chunk, recv_bytes[from] - got));
      TERSE_RETURN_IF_ERROR(Check(
          MPI_Sendrecv(in + sdispl[to] + sent, ns, MPI_BYTE, to, d,
                       out + rdispl[from] + got, nr, MPI_BYTE, from, d, comm_,
                       MPI_STATUS_IGNORE),
          "MPI_Sendrecv(alltoallv)"));
      sent += ns;
      got += nr;
    }
  }
  return absl::OkStatus();
}

absl::Status MpiCommunicator::ReduceScatter(
    const void* send, void* recv, const std::vector<int64_t>& recv_counts,
    DataType dtype, ReduceOp op) {
  if (static_cast<int>(recv_counts.size()) != size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("mpi: reduce-scatter: recv_counts has ",
                     recv_counts.size(), " entries for ", size_, " ranks"));
  }
  if (!IsValidDataType(static_cast<int32_t>(dtype))) {
    return absl::InvalidArgumentError(
        absl::StrCat("mpi: reduce-scatter: unknown dtype value ",
                     static_cast<int32_t>(dtype)));
  }
  if (op == ReduceOp::kAdasum) {
    return absl::InvalidArgumentError(
        "mpi: reduce-scatter: Adasum is not element-wise and cannot be "
        "scattered");
  }
  TERSE_RETURN_IF_ERROR(CheckReduceSupported(dtype, op));
  std::vector<int64_t> offset(size_ + 1, 0);
  for (int r = 0; r < size_; ++r) {
    if (recv_counts[r] < 0) {
      return absl::InvalidArgumentError("mpi: reduce-scatter: negative count");
    }
    offset[r + 1] = offset[r] + recv_counts[r];
  }
  const int64_t total = offset[size_];
  TERSE_RETURN_IF_ERROR(CheckBuffer(send, total, "reduce-scatter send"));
  TERSE_RETURN_IF_ERROR(
      CheckBuffer(recv, recv_counts[rank_], "reduce-scatter recv"));
  TERSE_RETURN_IF_ERROR(VerifySignature(
      {kCallReduceScatter, total, static_cast<int64_t>(dtype),
       static_cast<int64_t>(op), -1, HashSizes(recv_counts)}));
  if (total == 0) return absl::OkStatus();
  TERSE_ASSIGN_OR_RETURN(MPI_Datatype type, MpiType(dtype));
  TERSE_ASSIGN_OR_RETURN(MPI_Op mpi_op, MpiOp(dtype, op));
  const int64_t chunk =
      std::clamp<int64_t>(options_.max_elements_per_call, 1, INT_MAX);
  const size_t elem = DataTypeSize(dtype);
  const char* in = static_cast<const char*>(send);
  if (total <= chunk) {
    std::vector<int> counts(recv_counts.begin(), recv_counts.end());
    TERSE_RETURN_IF_ERROR(Check(MPI_Reduce_scatter(in, recv, counts.data(),
                                                   type, mpi_op, comm_),
                                "MPI_Reduce_scatter"));
  } else {
    // Each block reduced to its owner, chunk by chunk.
    for (int r = 0; r < size_; ++r) {
      for (int64_t done = 0; done < recv_counts[r];) {
        const int n = static_cast<int>(std::min(chunk, recv_counts[r] - done));
        void* dst = r == rank_ ? static_cast<char*>(recv) + done * elem
                               : nullptr;
        TERSE_RETURN_IF_ERROR(
            Check(MPI_Reduce(in + (offset[r] + done) * elem, dst, n, type,
                             mpi_op, r, comm_),
                  "MPI_Reduce(reduce-scatter)"));
        done += n;
      }
    }
  }
  if (op == ReduceOp::kAverage) {
    DivideInPlace(recv, recv_counts[rank_], dtype, size_);
  }
  return absl::OkStatus();
}

}  // namespace terse
