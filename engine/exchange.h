// Exchange ops: the engine's alltoall and reducescatter over one process
// set's communicator. Each is one collective call (Communicator::Alltoallv,
// Communicator::ReduceScatter) on the engine's background thread, never
// fused into a bucket, with the agreed response (agreement.h) as its plan.
//
// Pure apart from that call; the results are host memory owned by the
// caller. A response is from the set's rank 0 and untrusted: a malformed
// one is DataLoss naming the tensor, before any communication.
#ifndef TERSE_ENGINE_EXCHANGE_H_
#define TERSE_ENGINE_EXCHANGE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "common/control.pb.h"
#include "engine/tensor_entry.h"
#include "engine/types.h"

namespace terse {

// Enqueue-time checks of an alltoall or reducescatter `entry` (other ops:
// OK, untouched) on a process set of `size` ranks: at least one dimension;
// a CPU tensor (Unimplemented naming the op otherwise); reducescatter
// refuses Adasum. Alltoall: empty splits become equal parts; else size
// non-negative entries summing to shape[0]. Splits that break this (or a
// shape[0] not divisible by `size` without splits) are not an error here:
// they set entry.refused, and negotiation fails the op on every rank with
// that reason. Errors name the tensor.
absl::Status CheckExchange(TensorEntry& entry, int size);

// Horovod 0.28.1's split of `rows` rows over `size` ranks: rows / size
// each, the first rows % size ranks one more. Empty for size <= 0.
std::vector<int64_t> ReducescatterRows(int64_t rows, int size);

// The agreed alltoall `response` on this rank of `comm`: sends rank j the
// response's splits[comm->rank()][j] rows of `entry`'s input (packed in
// rank order) and receives splits[j][comm->rank()] rows from each rank j.
// `entry` null (or of a size other than agreed): takes part with zeros, so
// no peer blocks. Result: data packed in source-rank order, first_dims =
// the rows received from each rank, shape = [their sum, trailing dims].
absl::StatusOr<AllgatherResult> RunAlltoall(Communicator* comm,
                                            const proto::Response& response,
                                            const TensorEntry* entry);

// The agreed reducescatter `response` on this rank of `comm`: the
// reduction (response.reduce_op; Average = Sum then / size) of every
// rank's input, prescaled and postscaled, of which this rank keeps its
// ReducescatterRows part. `entry` as for RunAlltoall. Result: data = this
// rank's rows, first_dims = every rank's row count, shape = [this rank's
// rows, trailing dims].
absl::StatusOr<AllgatherResult> RunReducescatter(
    Communicator* comm, const proto::Response& response,
    const TensorEntry* entry);

}  // namespace terse

#endif  // TERSE_ENGINE_EXCHANGE_H_
