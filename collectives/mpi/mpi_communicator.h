// MpiCommunicator: the Communicator over Open MPI for CPU buffers, and the
// control plane (negotiation, NCCL unique ids) of every run.
//
// Initialisation: Create() initialises MPI with MPI_Init_thread requesting
// MPI_THREAD_SERIALIZED (the engine makes every MPI call from one background
// thread that is not the main thread) unless the application already did. If
// terse initialised MPI it also finalises it, once, at process exit
// (std::atexit), so communicators may be created and destroyed freely; if the
// application initialised MPI, terse never finalises it, and the level the
// application obtained must be at least MPI_THREAD_SERIALIZED or Create()
// fails with FailedPrecondition saying how to initialise.
//
// Every communicator duplicates its parent (MPI_COMM_WORLD unless
// MpiOptions says otherwise), so terse's traffic never matches the
// application's messages, and sets MPI_ERRORS_RETURN on the duplicate: an
// MPI failure becomes a Status carrying MPI's error string (argument errors
// InvalidArgument, the rest Internal) instead of an abort.
//
// Horovod's init(comm=...): MpiOptions::parent duplicates an application
// communicator instead of MPI_COMM_WORLD, and MpiOptions::ranks runs on a
// subset of the parent's ranks (MPI_Comm_create_group, collective over the
// listed processes only). rank(), size(), local_rank() and local_size() are
// then those of the new communicator.
//
// Reductions: f32 sum calls MPI_Allreduce(MPI_IN_PLACE, ...) directly, with
// no copy and no extra message; across hosts, buffers of 2 MiB or more take
// terse's ring instead (MpiAllreduceAlgorithm, ring_allreduce.h), which
// reduces with the same functions as the user-defined ops below. f16/bf16 use
// user-defined ops (MPI_Op_create over a 2-byte contiguous datatype) that widen
// each block to fp32, reduce, and round back (collectives/reduce.h,
// vectorised). Each reduction step rounds to 16 bits, so a sum over n ranks
// carries up to one rounding per step of MPI's reduction chain (n - 1 steps for
// the ring algorithm Open MPI uses on large buffers, ceil(log2 n) for recursive
// doubling): the result is within (n - 1) + 1 half-ulps of the exact sum when
// all partial sums are no larger in magnitude than the result. Average is the
// sum divided by size() afterwards (one more rounding for f16/bf16).
//
// u8 sums wrap modulo 256 like every other backend, through a user op: Open
// MPI 4.1's AVX op component saturates 8-bit integer sums instead.
//
// Argument checks: local checks (null buffer, negative count, unsupported
// dtype/op, bad root) fail before any message is sent. Allgatherv always
// exchanges a small signature of its arguments first (one 48-byte-per-rank
// allgather) so ranks whose recv_bytes disagree all get InvalidArgument
// naming the ranks, instead of a truncation or corrupted data;
// AllgathervAgreedSizes, for sizes that came from a collective, does not;
// MpiOptions::verify_all_calls extends that check to every collective.
//
// Counts above INT_MAX elements (MPI's int counts) are split into chunks.
//
// Thread-safety: one thread at a time per communicator (communicator.h).
#ifndef TERSE_COLLECTIVES_MPI_MPI_COMMUNICATOR_H_
#define TERSE_COLLECTIVES_MPI_MPI_COMMUNICATOR_H_

#include <mpi.h>

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "collectives/mpi/call_signature.h"
#include "collectives/mpi/ring_allreduce.h"

namespace terse {

struct MpiOptions {
  // Exchange a signature of every collective's arguments (kind, count,
  // dtype, op, root) before running it; costs one tiny allgather per call.
  // Allgatherv checks its sizes regardless of this flag;
  // AllgathervAgreedSizes only with it.
  bool verify_all_calls = false;
  // Largest element count handed to one MPI call (tests lower it to exercise
  // the chunking); clamped to [1, INT_MAX].
  int64_t max_elements_per_call = 2147483647;
  // The communicator to duplicate. The caller keeps ownership and may free
  // it once Create() returned. Not MPI_COMM_NULL, not an intercommunicator.
  MPI_Comm parent = MPI_COMM_WORLD;
  // Ranks of `parent` to run on; empty: all of them. Any order, as
  // MPI_Group_incl: rank i of the new communicator is parent rank ranks[i].
  // Distinct and in [0, parent size), else every caller gets
  // InvalidArgument. Every listed process must pass the same list (a
  // different list that does not hang in MPI_Comm_create_group is
  // InvalidArgument on every member); a process not in it gets
  // InvalidArgument naming its parent rank and the list, having sent
  // nothing.
  std::vector<int> ranks;
  MpiAllreduceAlgorithm allreduce_algorithm = MpiAllreduceAlgorithm::kAuto;
  // kAuto's smallest ring buffer: below it the ring's 2 (size - 1) message
  // latencies cost more than the bytes it saves (on the data-centre network
  // of integration/netns/, 4 ranks: the ring was 0.95x MPI_Allreduce at
  // 1 MiB, 1.03-1.13x at 2 MiB, 1.2x at 4 MiB).
  int64_t ring_min_bytes = int64_t{2} << 20;
  // Largest message of the ring; every block is sent in segments of at most
  // this size, pipelined across steps (also capped by
  // max_elements_per_call). On the data-centre network, 4 ranks, the ring
  // took 8 / 32 MiB in 110 / 419 ms with 512 KiB segments, 121 / 419 ms
  // with 1 MiB, 122 / 439 ms with 4 MiB and 121 / 458 ms with 256 KiB (the
  // links' floor: 103 / 413 ms).
  int64_t ring_segment_bytes = int64_t{512} << 10;
};

// An MPI return code as a Status: OK for MPI_SUCCESS; InvalidArgument for
// argument error classes (buffer, count, type, op, root, arg, truncate);
// Internal otherwise. The message names `call`, the rank and MPI's string.
absl::Status MpiStatus(int rc, absl::string_view call, int rank, int size);

class MpiCommunicator : public Communicator {
 public:
  // Initialises MPI if needed (see above), duplicates options.parent (or
  // the communicator of options.ranks, see MpiOptions) and creates the
  // half-precision ops. Blocks until every process of the new communicator
  // called it. FailedPrecondition when MPI was already finalised or the
  // thread level is too low; InvalidArgument for a bad parent or rank list;
  // Internal for MPI failures.
  static absl::StatusOr<std::unique_ptr<MpiCommunicator>> Create(
      const MpiOptions& options = MpiOptions());

  // Frees the duplicated communicator, datatype and ops (unless MPI has been
  // finalised already). Never finalises MPI itself.
  ~MpiCommunicator() override;

  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  absl::string_view backend() const override { return "mpi"; }

  absl::Status Allreduce(void* buffer, int64_t count, DataType dtype,
                         ReduceOp op) override;
  // Staged range by range when the ring runs (ring_allreduce.h), so the
  // copies overlap its messages; otherwise as the base class.
  absl::Status AllreduceStaged(void* buffer, int64_t count, DataType dtype,
                               ReduceOp op, const Staging& staging) override;
  absl::Status Allgather(const void* send, void* recv,
                         int64_t bytes_per_rank) override;
  absl::Status Allgatherv(const void* send, void* recv,
                          const std::vector<int64_t>& recv_bytes) override;
  // Allgatherv without the size check (unless verify_all_calls).
  absl::Status AllgathervAgreedSizes(
      const void* send, void* recv,
      const std::vector<int64_t>& recv_bytes) override;
  absl::Status Broadcast(void* buffer, int64_t bytes, int root) override;
  absl::Status Barrier() override;
  // MPI_Alltoallv of bytes; MPI_Sendrecv pairs in chunks past INT_MAX or
  // max_elements_per_call. The sizes are checked across ranks first (one
  // small allgather).
  absl::Status Alltoallv(const void* send,
                         const std::vector<int64_t>& send_bytes, void* recv,
                         const std::vector<int64_t>& recv_bytes) override;
  // MPI_Reduce_scatter (f16/bf16 and small-integer products through the
  // same user-defined ops as Allreduce); one MPI_Reduce per block and chunk
  // past INT_MAX or max_elements_per_call. The counts are checked across
  // ranks first.
  absl::Status ReduceScatter(const void* send, void* recv,
                             const std::vector<int64_t>& recv_counts,
                             DataType dtype, ReduceOp op) override;
  absl::Status BitwiseAnd(uint64_t* words, int64_t count) override;
  absl::Status BitwiseOr(uint64_t* words, int64_t count) override;
  // MPI_Comm_split of this communicator (collective over all its ranks);
  // the members' communicator duplicates the split one, with the same
  // options and error handling. It may outlive this communicator.
  absl::StatusOr<std::unique_ptr<Communicator>> CreateSubgroup(
      const std::vector<int>& ranks) override;

  // The duplicated communicator (benchmarks compare against raw MPI on it).
  MPI_Comm comm() const { return comm_; }

 private:
  explicit MpiCommunicator(const MpiOptions& options);
  // Duplicates `parent` (MpiOptions::parent, the communicator of
  // MpiOptions::ranks, or a split of terse's) and creates the datatypes and
  // ops.
  absl::Status Init(MPI_Comm parent);

  // Allgathers `mine` and fails on every rank if any rank's differs.
  absl::Status VerifySignature(const CallSignature& mine);
  // MPI status -> absl::Status naming `call` and this rank.
  absl::Status Check(int rc, const char* call) const;
  // InvalidArgument for a negative count, or a null buffer of n > 0.
  static absl::Status CheckBuffer(const void* p, int64_t n,
                                  absl::string_view what);
  absl::StatusOr<MPI_Datatype> MpiType(DataType dtype) const;
  absl::StatusOr<MPI_Op> MpiOp(DataType dtype, ReduceOp op) const;
  // Allreduce, staged through the ring when `staging` is not null (the
  // caller has checked the ring is chosen and op is not Average).
  absl::Status AllreduceWith(void* buffer, int64_t count, DataType dtype,
                             ReduceOp op, const Staging* staging);
  // Allreduce with ReduceOp::kAdasum (communicator.h), already checked.
  absl::Status AllreduceAdasum(void* buffer, int64_t count, DataType dtype);
  absl::Status Bitwise(uint64_t* words, int64_t count, bool is_and);
  // Allgatherv, checking the sizes across ranks first when `verify`.
  absl::Status AllgathervWith(const void* send, void* recv,
                              const std::vector<int64_t>& recv_bytes,
                              bool verify);
  // Allgatherv as one broadcast per rank, for sizes MPI's int counts or
  // displacements cannot express.
  absl::Status AllgathervByBroadcasts(const void* send, void* recv,
                                      const std::vector<int64_t>& recv_bytes);

  const MpiOptions options_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Datatype half_type_ = MPI_DATATYPE_NULL;  // 2 contiguous bytes.
  // User ops indexed [f16=0 / bf16=1][sum=0, min=1, max=2, product=3].
  MPI_Op half_ops_[2][4];
  // u8 sum that wraps modulo 256 (Open MPI's AVX MPI_SUM saturates).
  MPI_Op u8_sum_op_ = MPI_OP_NULL;
  // int8 / int16 sums that wrap modulo 2^8 / 2^16 (numpy's and torch's).
  MPI_Op i8_sum_op_ = MPI_OP_NULL;
  MPI_Op i16_sum_op_ = MPI_OP_NULL;
  // u8 / int8 / int16 products that wrap (terse's own, like the sums, so
  // no MPI component's saturating arithmetic is relied on).
  MPI_Op small_int_prod_ops_[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  // One incoming block of the ring, kept between calls (one thread at a
  // time uses a communicator).
  std::vector<uint8_t> ring_scratch_;
  // The error of a ring allreduce that failed midway (else OK): a later
  // ring call would match the failed one's messages still in flight, so it
  // is refused.
  absl::Status ring_failed_;
};

}  // namespace terse

#endif  // TERSE_COLLECTIVES_MPI_MPI_COMMUNICATOR_H_
