// Communicator: the collective operations terse's engine moves bytes with.
//
// One implementation per transport: loopback/ (ranks as threads of one
// process), mpi/ (Open MPI, CPU buffers), nccl/ (NCCL, CUDA buffers). The
// engine picks one per tensor device through the registry (registry.h).
//
// Contract shared by every implementation:
// - Every call is collective: all ranks of the group must make the same calls
//   in the same order with matching arguments (counts, dtype, op, root).
//   Where a mismatch is detectable the call fails with InvalidArgument on the
//   ranks that can see it, never with memory corruption.
// - Calls block until this rank's part is complete: the output buffer holds
//   the result when the call returns OK (NCCL: when the work is enqueued on
//   the communicator's stream; see nccl/nccl_communicator.h).
// - A Communicator is used by one thread at a time (the engine's background
//   thread); it is not thread-safe. Different communicators of one loopback
//   group are used by different threads concurrently, one each.
// - Buffers are owned by the caller and must stay valid for the call; a null
//   buffer with a nonzero count is InvalidArgument.
// - Every call returns absl::Status; nothing throws.
#ifndef TERSE_COLLECTIVES_COMMUNICATOR_H_
#define TERSE_COLLECTIVES_COMMUNICATOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/data_type.h"

namespace terse {

// kProduct multiplies element-wise (integers wrap modulo 2^bits, as numpy's
// and torch's do). kAdasum is not element-wise: the whole buffer is one
// vector, combined pairwise with Adasum's operator (reduce.h AdasumCombine)
// in recursive-doubling order; floating-point types and a power-of-two
// number of ranks only, and never a fused buffer of several tensors.
enum class ReduceOp : int32_t {
  kSum = 0,
  kAverage = 1,
  kMin = 2,
  kMax = 3,
  kProduct = 4,
  kAdasum = 5
};

absl::string_view ReduceOpName(ReduceOp op);

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Rank and number of ranks on this host.
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  // "loopback", "mpi" or "nccl".
  virtual absl::string_view backend() const = 0;

  // In place: `buffer` holds `count` elements of this rank's input and
  // receives the reduction over all ranks. Average is Sum divided by size()
  // and is defined for floating-point types only. f16/bf16 are accumulated in
  // fp32; backends that reduce in several steps (MPI, NCCL) round to 16 bits
  // after each step (bounds in their headers). Integer sums wrap.
  // Unsupported dtype/op pairs are InvalidArgument.
  virtual absl::Status Allreduce(void* buffer, int64_t count, DataType dtype,
                                 ReduceOp op) = 0;

  // Allreduce of a buffer the caller stages from other memory (the engine's
  // fusion buffer): `fill(begin, end)` must write this rank's input into
  // elements [begin, end) and is called before the collective first reads
  // or writes them; `drain(begin, end)` may read the result there and is
  // called once those elements are final (they are not written again). Each
  // element is filled once and drained once, in ranges that tile the buffer;
  // both run on the calling thread, before the call returns. Lets a backend
  // overlap the copies with its messages (MPI's ring, ring_allreduce.h);
  // the base class fills all, calls Allreduce, then drains all. On error,
  // some ranges may not have been drained. Same arguments and errors as
  // Allreduce.
  struct Staging {
    absl::FunctionRef<void(int64_t begin, int64_t end)> fill;
    absl::FunctionRef<void(int64_t begin, int64_t end)> drain;
  };
  virtual absl::Status AllreduceStaged(void* buffer, int64_t count,
                                       DataType dtype, ReduceOp op,
                                       const Staging& staging);

  // Every rank sends `bytes_per_rank` bytes; `recv` (size() * bytes_per_rank
  // bytes) receives them rank-major. `send` may not alias `recv`.
  virtual absl::Status Allgather(const void* send, void* recv,
                                 int64_t bytes_per_rank) = 0;

  // Variable sizes: rank i sends recv_bytes[i] bytes (this rank sends
  // recv_bytes[rank()] bytes from `send`); `recv` receives them rank-major,
  // packed. recv_bytes must have size() entries and agree on every rank.
  virtual absl::Status Allgatherv(const void* send, void* recv,
                                  const std::vector<int64_t>& recv_bytes) = 0;

  // Allgatherv for recv_bytes that every rank took from the same collective
  // result (an allgather of the sizes, the engine's negotiated response), so
  // they agree by construction. A backend that checks Allgatherv's sizes
  // across ranks with a collective of its own (MPI: one small allgather)
  // skips that check here. Same contract as Allgatherv otherwise; the base
  // class calls Allgatherv, so wrappers that override only Allgatherv see
  // these calls too.
  virtual absl::Status AllgathervAgreedSizes(
      const void* send, void* recv, const std::vector<int64_t>& recv_bytes);

  // `bytes` from `root`'s buffer into every other rank's buffer.
  virtual absl::Status Broadcast(void* buffer, int64_t bytes, int root) = 0;

  virtual absl::Status Barrier() = 0;

  // Personalised all-to-all (MPI_Alltoallv): this rank sends send_bytes[j]
  // bytes to rank j, taken packed in rank order from `send`, and receives
  // recv_bytes[j] bytes from rank j, packed in rank order into `recv`. Both
  // vectors have size() entries; recv_bytes[j] here must equal
  // send_bytes[rank()] on rank j, or the call fails with InvalidArgument on
  // every rank (naming the pair). `send` may not alias `recv`. The base
  // class returns Unimplemented (NCCL, the simulated device); loopback and
  // MPI implement it.
  virtual absl::Status Alltoallv(const void* send,
                                 const std::vector<int64_t>& send_bytes,
                                 void* recv,
                                 const std::vector<int64_t>& recv_bytes);

  // Reduce-scatter (MPI_Reduce_scatter): `send` holds sum(recv_counts)
  // elements of this rank's input, in size() blocks of recv_counts[i]
  // elements; rank i receives into `recv` the reduction over ranks of block
  // i. recv_counts must agree on every rank (InvalidArgument on every rank
  // otherwise). Sum, Average, Min, Max and Product with Allreduce's dtype
  // rules and numerics; Adasum is InvalidArgument. `send` may not alias
  // `recv`. The base class returns Unimplemented; loopback and MPI
  // implement it.
  virtual absl::Status ReduceScatter(const void* send, void* recv,
                                     const std::vector<int64_t>& recv_counts,
                                     DataType dtype, ReduceOp op);

  // Element-wise AND / OR of `count` 64-bit words across ranks, in place.
  // Negotiation uses these for the ready-bit vectors.
  virtual absl::Status BitwiseAnd(uint64_t* words, int64_t count) = 0;
  virtual absl::Status BitwiseOr(uint64_t* words, int64_t count) = 0;

  // Blocks until every operation this communicator has issued is complete
  // and returns an error reported asynchronously by one of them. Host
  // backends complete each call before returning, so this is OK at once;
  // NCCL waits for its stream (nccl/nccl_communicator.h).
  virtual absl::Status Synchronize() { return absl::OkStatus(); }

  // Device backends that enqueue their work on a stream (NCCL): later
  // operations go on `stream`, a native stream of this communicator's
  // device (a cudaStream_t), so they run after the work the caller put
  // there with no host wait in between; null restores the backend's own.
  // Returns false where the backend cannot (host backends and the
  // simulated device read memory when called: the caller synchronises
  // first). Not thread-safe: the one thread that makes collective calls.
  virtual bool UseStream(void* stream) { return false; }

  // A communicator over the sorted, distinct ranks `ranks` of this one (its
  // rank i is this communicator's rank ranks[i]), for process sets.
  // Collective over ALL ranks of this communicator, members or not, with
  // equal `ranks` everywhere. Members get the new communicator (owned by
  // the caller; it may outlive this one only where the backend says so:
  // loopback and MPI allow it); non-members get null. Bad `ranks` (empty,
  // unsorted, repeated, out of range) are InvalidArgument before any
  // message. Backends without sub-groups (NCCL, the simulated device)
  // return Unimplemented.
  virtual absl::StatusOr<std::unique_ptr<Communicator>> CreateSubgroup(
      const std::vector<int>& ranks);

  // Allgatherv when the caller does not know the other ranks' sizes: gathers
  // the sizes first (one Allgather of int64), then the data
  // (AllgathervAgreedSizes: the gathered sizes agree). On return
  // `recv_bytes` has one entry per rank and `recv` holds the packed data.
  absl::Status AllgathervUnknownSizes(const void* send, int64_t send_bytes,
                                      std::vector<uint8_t>* recv,
                                      std::vector<int64_t>* recv_bytes);
};

// The local check of CreateSubgroup's `ranks` for a communicator of `size`
// ranks: InvalidArgument naming the problem.
absl::Status CheckSubgroupRanks(const std::vector<int>& ranks, int size);

}  // namespace terse

#endif  // TERSE_COLLECTIVES_COMMUNICATOR_H_
