// Ring allreduce over MPI point-to-point messages: a reduce-scatter and an
// allgather around the ring rank -> rank + 1, each in size - 1 steps.
//
// Why terse has its own: every rank sends and receives 2 (size - 1) / size
// of the buffer, the least any allreduce can move, and never more than one
// block at a time per link. Open MPI 4.1's default choice for large buffers
// over TCP (its fixed decision rules) moved the same 32 MiB about 1.65x
// slower on the data-centre network of integration/netns/ (see
// docs/results/engine_speed.md, "Session 15"); its own ring, when forced
// with MCA parameters, is as fast as this one, but MCA parameters are
// global to the process and would change the application's MPI too.
//
// Block b of the buffer is elements [b * n / size, (b + 1) * n / size) in a
// balanced split (the first n % size blocks one element longer). In
// reduce-scatter step s, rank r sends block (r - s) mod size to r + 1 and
// reduces block (r - s - 1) mod size received from r - 1 into its own
// copy; after size - 1 steps rank r holds the full reduction of block
// (r + 1) mod size, which the allgather steps pass around the ring.
//
// Pipelined: every block is cut into the same number of segments, and
// message k = step * segments + segment travels each link in order of k.
// A rank forwards segment j of step s + 1 as soon as it has received (and
// reduced) segment j of step s, not when the whole step is done, so a link
// never waits for a step's last segment before starting the next step; at
// most kRingWindow messages are in flight each way, so they finish nearly in
// order rather than sharing the link all at once. (Steps in lockstep, all
// segments posted at once, took 438 ms for 32 MiB on the data-centre
// network where the links' floor is 413 ms.)
//
// Every rank ends with the same bits: each block is reduced once, on one
// rank, and copied to the others. Each element is reduced size - 1 times
// (a sum over the ring in a rotated order), so f16/bf16 round once per
// step, as Open MPI's own ring does.
#ifndef TERSE_COLLECTIVES_MPI_RING_ALLREDUCE_H_
#define TERSE_COLLECTIVES_MPI_RING_ALLREDUCE_H_

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "collectives/communicator.h"
#include "common/data_type.h"

namespace terse {

// How MpiCommunicator::Allreduce moves an element-wise reduction (Adasum
// has its own exchange).
enum class MpiAllreduceAlgorithm {
  // The ring for buffers of at least MpiOptions::ring_min_bytes when the
  // communicator spans more than one host; MPI_Allreduce otherwise. Through
  // shared memory Open MPI's own algorithms serve well; over a network its
  // default choice for large buffers is not bandwidth-optimal (above).
  kAuto,
  kLibrary,  // MPI_Allreduce always.
  kRing,     // The ring always (tests; TERSE_MPI_ALLREDUCE=ring).
};

// Whether an allreduce of `bytes` takes the ring on a communicator of
// `size` ranks of which `local_size` share this rank's host. Every rank
// decides alike: local_size < size on one rank means more than one host,
// so it holds on every rank, and the engine allreduces equal byte counts.
bool RingAllreduceChosen(MpiAllreduceAlgorithm algorithm, int size,
                         int local_size, int64_t bytes, int64_t min_bytes);

// The element range [begin, end) of block `block` when `count` elements are
// split over `blocks` blocks as above.
struct RingBlock {
  int64_t begin;
  int64_t end;
};
RingBlock RingBlockOf(int64_t count, int blocks, int block);

// Messages in flight each way on a link (receives: at most two steps'
// worth, the scratch slots). Four of 512 KiB keep the link busy through
// Open MPI's rendezvous handshakes at round trips of several ms, and
// still finish nearly in order. On the data-centre network (engine_bench,
// 4 ranks, small / ResNet-50 workloads): 2 in flight 435 / 1,699 ms, 4 432 /
// 1,748, 8 446 / 1,756; with session 15's router, whose queues put
// round trips at 6-15 ms, 2 took 600 / 2,372 ms, 4 519 / 2,060, 8 560 /
// 2,142 (docs/results/engine_speed.md, session 16).
inline constexpr int kRingWindow = 4;

// The pipelined ring's messages for one rank (pure arithmetic, no MPI).
class RingSchedule {
 public:
  // `count` elements over `size` >= 2 ranks; no segment longer than
  // `segment_elements` (>= 1).
  RingSchedule(int64_t count, int rank, int size, int64_t segment_elements);

  // Messages each way: 2 (size - 1) steps of segments() each.
  int64_t messages() const { return 2 * int64_t{size_ - 1} * segments_; }
  int64_t segments() const { return segments_; }
  // Whether message k belongs to the reduce-scatter half (it is received
  // into scratch and reduced) rather than the allgather (received in place).
  bool Reduces(int64_t k) const { return k < int64_t{size_ - 1} * segments_; }
  // The elements of the buffer message k sends to the right, and those it
  // receives from the left (reduced into or overwritten).
  RingBlock SendRange(int64_t k) const;
  RingBlock RecvRange(int64_t k) const;
  // The received message whose data message k forwards: it must be complete
  // (and reduced) before k is sent. -1 in the first step (local data).
  int64_t ForwardsReceived(int64_t k) const;
  // The sent message that last read the elements message k overwrites in
  // the allgather: it must be complete before k is received. -1 if none.
  // (The ring's forwarding already implies the right neighbour has it; MPI
  // still wants the send's request complete before its buffer changes.)
  int64_t OverwritesSent(int64_t k) const;

 private:
  RingBlock Segment(int block, int64_t segment) const;

  int64_t count_;
  int rank_;
  int size_;
  int64_t segments_;
};

// Allreduces `count` elements of `buffer` in place over `comm` with the
// ring above. `op` is element-wise (Sum, Min, Max, Product; Average reduces
// as Sum and the caller divides); the caller has checked dtype, op and the
// buffer. `segment_elements` (>= 1) bounds each message, so a caller can
// keep counts within MPI's int. `scratch` receives incoming segments (two
// blocks' worth); it is grown as needed and may be reused across calls.
//
// Blocking and collective: every rank of `comm` must call it with the same
// count, dtype, op and segment_elements. Uses tag `kRingAllreduceTag` on
// `comm`; the caller must not have other messages with that tag in flight.
// An MPI failure returns Internal or InvalidArgument naming the call and
// this rank (MpiStatus); the buffer's contents are then unspecified, but
// nothing is written into the buffer or `scratch` after the return (the
// receives still posted are cancelled; the sends still posted are released
// to MPI and only read). The peers' messages of the failed call may still
// arrive, so the ring must not run again on `comm` (MpiCommunicator
// refuses to).
// Thread-safety: one thread at a time per communicator.
inline constexpr int kRingAllreduceTag = 0x7e12;
//
// With `staging` (Communicator::AllreduceStaged), the ring fills each
// segment of the buffer just before it first needs it and drains each
// segment once it is final, and while it waits on messages it fills ahead
// and drains what is final, so the caller's copies overlap the transfers:
// only the last segments' drains come after the last message.
absl::Status RingAllreduce(MPI_Comm comm, void* buffer, int64_t count,
                           DataType dtype, ReduceOp op,
                           int64_t segment_elements,
                           std::vector<uint8_t>* scratch,
                           const Communicator::Staging* staging = nullptr);

}  // namespace terse

#endif  // TERSE_COLLECTIVES_MPI_RING_ALLREDUCE_H_
