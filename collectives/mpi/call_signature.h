// CallSignature: the arguments of one collective call, as MpiCommunicator
// exchanges them to catch ranks that call different collectives (or the same
// one with different arguments) before MPI would truncate, misplace or hang
// on them. Internal to MpiCommunicator (mpi_communicator.h,
// MpiOptions::verify_all_calls; allgatherv and reduce-scatter always).
//
// Pure functions of their arguments: no MPI, thread-safe.
#ifndef TERSE_COLLECTIVES_MPI_CALL_SIGNATURE_H_
#define TERSE_COLLECTIVES_MPI_CALL_SIGNATURE_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace terse {

// The kind of collective, the first field of a signature.
enum CallKind : int64_t {
  kCallAllreduce = 1,
  kCallAllgather = 2,
  kCallAllgatherv = 3,
  kCallBroadcast = 4,
  kCallBarrier = 5,
  kCallBitwiseAnd = 6,
  kCallBitwiseOr = 7,
  kCallAlltoallv = 8,
  kCallReduceScatter = 9,
};

// {kind, count (total bytes for allgatherv), dtype (-1: none), op (-1:
// none), root (-1: none), hash of the per-rank sizes (0: none)}.
constexpr int kCallSignatureFields = 6;
using CallSignature = std::array<int64_t, kCallSignatureFields>;

// StableHashOf(sizes) (common/stable_hash.h): the per-rank sizes of an
// allgatherv or reduce-scatter, which every rank must pass identically.
int64_t HashSizes(const std::vector<int64_t>& sizes);

// "allreduce(count=8, dtype=f32, op=sum)" and the like, for messages.
std::string DescribeSignature(const CallSignature& signature);

// `all` holds every rank's signature in rank order (size *
// kCallSignatureFields values, as an allgather of them leaves it). OK when
// all equal rank 0's; otherwise InvalidArgument naming rank 0's call, the
// first rank whose call differs and its call, and `seen_on_rank`. Also
// InvalidArgument when `all` has the wrong length.
absl::Status CompareSignatures(const std::vector<int64_t>& all, int size,
                               int seen_on_rank);

}  // namespace terse

#endif  // TERSE_COLLECTIVES_MPI_CALL_SIGNATURE_H_
