#include "collectives/mpi/ring_allreduce.h"

#include <algorithm>
#include <climits>
#include <deque>

#include "absl/strings/str_cat.h"
#include "collectives/mpi/mpi_communicator.h"
#include "collectives/reduce.h"
#include "common/status.h"

namespace terse {
namespace {

// One rank's pipelined ring over MPI (see ring_allreduce.h): posts receives
// and sends in message order within the window, and waits on the oldest of
// each, so receipts are handled in order (MPI's non-overtaking rule: the
// messages of one sender on one tag match receives in posting order).
class PipelinedRing {
 public:
  PipelinedRing(MPI_Comm comm, int rank, int size, char* buffer, int64_t count,
                DataType dtype, ReduceOp op, int64_t segment_elements,
                char* scratch, const Communicator::Staging* staging)
      : comm_(comm),
        rank_(rank),
        size_(size),
        buffer_(buffer),
        dtype_(dtype),
        op_(op),
        elem_(static_cast<int64_t>(DataTypeSize(dtype))),
        schedule_(count, rank, size, segment_elements),
        scratch_(scratch),
        slot_bytes_(RingBlockOf(count, size, 0).end * elem_),
        right_((rank + 1) % size),
        left_((rank + size - 1) % size),
        recv_window_(static_cast<int>(
            std::min<int64_t>(kRingWindow, 2 * schedule_.segments()))),
        recvs_(kRingWindow, MPI_REQUEST_NULL),
        sends_(kRingWindow, MPI_REQUEST_NULL),
        staging_(staging) {}

  // On an error midway no receive of this call may land after it has
  // returned: the buffer and the scratch are the caller's again (and may be
  // freed). Every receive still posted is cancelled and completed (MPI_Wait
  // returns for a cancelled request whatever the peers do). Sends are
  // released to finish in MPI's hands: they only read, and Open MPI cannot
  // cancel a send. Nothing is posted after a successful Run().
  ~PipelinedRing() {
    for (MPI_Request& r : recvs_) {
      if (r == MPI_REQUEST_NULL) continue;
      MPI_Cancel(&r);
      MPI_Wait(&r, MPI_STATUS_IGNORE);
    }
    for (MPI_Request& r : sends_) {
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
    }
  }

  absl::Status Run() {
    const int64_t total = schedule_.messages();
    while (received_ < total || sent_ < total) {
      TERSE_RETURN_IF_ERROR(PostReceives());
      TERSE_RETURN_IF_ERROR(PostSends());
      // The oldest receive and the oldest send; one is always posted (a
      // receive waits only for a send, a send only for a receive, never
      // for each other's: see OverwritesSent and ForwardsReceived).
      MPI_Request* const slots[2] = {
          received_ < recv_posted_ ? &recvs_[received_ % kRingWindow] : nullptr,
          sent_ < send_posted_ ? &sends_[sent_ % kRingWindow] : nullptr};
      MPI_Request oldest[2] = {slots[0] ? *slots[0] : MPI_REQUEST_NULL,
                               slots[1] ? *slots[1] : MPI_REQUEST_NULL};
      int which = MPI_UNDEFINED;
      int rc = MPI_SUCCESS;
      const char* call = "MPI_Waitany";
      bool done = true;
      if (HasStagingWork()) {
        // Copy while the messages travel: test, and fill or drain one
        // segment when nothing has arrived.
        int flag = 0;
        call = "MPI_Testany";
        rc = MPI_Testany(2, oldest, &which, &flag, MPI_STATUS_IGNORE);
        done = flag != 0;
      } else {
        rc = MPI_Waitany(2, oldest, &which, MPI_STATUS_IGNORE);
      }
      // MPI frees the request it completed, with or without an error: keep
      // the window in step, so that only live requests are cancelled.
      for (int i = 0; i < 2; ++i) {
        if (slots[i] != nullptr) *slots[i] = oldest[i];
      }
      TERSE_RETURN_IF_ERROR(Check(rc, call));
      if (!done) {
        StageOne();
        continue;
      }
      if (which == 0) {
        const RingBlock in = schedule_.RecvRange(received_);
        if (schedule_.Reduces(received_)) {
          FillThrough(FillIndexOfReduce(received_));
          ReduceInPlace(buffer_ + in.begin * elem_, Slot(received_),
                        in.end - in.begin, dtype_, op_);
        }
        // The last reduce-scatter step completes block rank + 1; every
        // allgather receipt is final.
        if (staging_ != nullptr &&
            received_ >= int64_t{size_ - 2} * schedule_.segments()) {
          final_.push_back(in);
        }
        ++received_;
      } else if (which == 1) {
        ++sent_;
      } else {
        return absl::InternalError(absl::StrCat(
            "ring allreduce: rank ", rank_, " of ", size_,
            " had nothing to wait for at message ", received_, "/", sent_));
      }
    }
    while (!final_.empty()) DrainOne();
    return absl::OkStatus();
  }

 private:
  // Where reduce-scatter message k lands: two block-sized slots by step
  // parity, so a step's segment never overwrites the previous step's before
  // it is reduced (receives in flight span at most two steps).
  char* Slot(int64_t k) const {
    const int64_t step = k / schedule_.segments();
    const RingBlock in = schedule_.RecvRange(k);
    const RingBlock block_start =
        schedule_.RecvRange(step * schedule_.segments());
    return scratch_ + (step % 2) * slot_bytes_ +
           (in.begin - block_start.begin) * elem_;
  }

  absl::Status PostReceives() {
    const int64_t total = schedule_.messages();
    while (recv_posted_ < total && recv_posted_ - received_ < recv_window_ &&
           schedule_.OverwritesSent(recv_posted_) < sent_) {
      const int64_t k = recv_posted_;
      const RingBlock in = schedule_.RecvRange(k);
      char* land = schedule_.Reduces(k) ? Slot(k) : buffer_ + in.begin * elem_;
      TERSE_RETURN_IF_ERROR(
          Check(MPI_Irecv(land, static_cast<int>((in.end - in.begin) * elem_),
                          MPI_BYTE, left_, kRingAllreduceTag, comm_,
                          &recvs_[k % kRingWindow]),
                "MPI_Irecv(ring)"));
      ++recv_posted_;
    }
    return absl::OkStatus();
  }

  absl::Status PostSends() {
    const int64_t total = schedule_.messages();
    while (send_posted_ < total && send_posted_ - sent_ < kRingWindow &&
           schedule_.ForwardsReceived(send_posted_) < received_) {
      const int64_t k = send_posted_;
      // The first step sends this rank's own input: fill it first.
      if (k < schedule_.segments()) FillThrough(k);
      const RingBlock out = schedule_.SendRange(k);
      TERSE_RETURN_IF_ERROR(Check(
          MPI_Isend(buffer_ + out.begin * elem_,
                    static_cast<int>((out.end - out.begin) * elem_), MPI_BYTE,
                    right_, kRingAllreduceTag, comm_, &sends_[k % kRingWindow]),
          "MPI_Isend(ring)"));
      ++send_posted_;
    }
    return absl::OkStatus();
  }

  absl::Status Check(int rc, const char* call) const {
    return MpiStatus(rc, call, rank_, size_);
  }

  // Staging (RingAllreduce's `staging`). The buffer is filled in the order
  // the ring first touches it: the segments of this rank's block (sent in
  // the first step), then those of the block each reduce-scatter step
  // reduces into. Fill index i < segments is send i; after that, i is the
  // reduce of message i - segments.
  int64_t FillTotal() const { return int64_t{size_} * schedule_.segments(); }
  int64_t FillIndexOfReduce(int64_t k) const {
    return k + schedule_.segments();
  }
  RingBlock FillRange(int64_t i) const {
    return i < schedule_.segments()
               ? schedule_.SendRange(i)
               : schedule_.RecvRange(i - schedule_.segments());
  }
  void FillThrough(int64_t i) {
    if (staging_ == nullptr) return;
    while (filled_ <= i) {
      const RingBlock r = FillRange(filled_++);
      if (r.end > r.begin) staging_->fill(r.begin, r.end);
    }
  }
  bool HasStagingWork() const {
    return staging_ != nullptr && (filled_ < FillTotal() || !final_.empty());
  }
  // Drains first (their ranges are done with), else fills ahead.
  void StageOne() {
    if (!final_.empty()) {
      DrainOne();
    } else {
      FillThrough(filled_);
    }
  }
  void DrainOne() {
    const RingBlock r = final_.front();
    final_.pop_front();
    if (r.end > r.begin) staging_->drain(r.begin, r.end);
  }

  const MPI_Comm comm_;
  const int rank_;
  const int size_;
  char* const buffer_;
  const DataType dtype_;
  const ReduceOp op_;
  const int64_t elem_;
  const RingSchedule schedule_;
  char* const scratch_;
  const int64_t slot_bytes_;
  const int right_;
  const int left_;
  // Receives in flight: within two steps, as the scratch slots are two.
  const int recv_window_;
  // Messages posted and completed each way; request of message k at
  // [k % kRingWindow].
  int64_t recv_posted_ = 0;
  int64_t received_ = 0;
  int64_t send_posted_ = 0;
  int64_t sent_ = 0;
  std::vector<MPI_Request> recvs_;
  std::vector<MPI_Request> sends_;
  const Communicator::Staging* const staging_;  // May be null.
  int64_t filled_ = 0;           // Fill indices done (FillRange).
  std::deque<RingBlock> final_;  // Final ranges not drained yet.
};

}  // namespace

bool RingAllreduceChosen(MpiAllreduceAlgorithm algorithm, int size,
                         int local_size, int64_t bytes, int64_t min_bytes) {
  if (size <= 1) return false;
  switch (algorithm) {
    case MpiAllreduceAlgorithm::kLibrary:
      return false;
    case MpiAllreduceAlgorithm::kRing:
      return true;
    case MpiAllreduceAlgorithm::kAuto:
      return local_size < size && bytes >= min_bytes;
  }
  return false;
}

RingBlock RingBlockOf(int64_t count, int blocks, int block) {
  const int64_t base = count / blocks;
  const int64_t extra = count % blocks;
  const int64_t begin = block * base + std::min<int64_t>(block, extra);
  return {begin, begin + base + (block < extra ? 1 : 0)};
}

RingSchedule::RingSchedule(int64_t count, int rank, int size,
                           int64_t segment_elements)
    : count_(count), rank_(rank), size_(size) {
  const RingBlock largest = RingBlockOf(count, size, 0);
  const int64_t longest = largest.end - largest.begin;
  segment_elements = std::max<int64_t>(segment_elements, 1);
  segments_ =
      std::max<int64_t>(1, (longest + segment_elements - 1) / segment_elements);
}

RingBlock RingSchedule::Segment(int block, int64_t segment) const {
  const RingBlock b = RingBlockOf(count_, size_, block);
  // The same number of segments in every block (blocks differ by at most
  // one element), balanced within the block.
  const int64_t length = b.end - b.begin;
  const int64_t base = length / segments_;
  const int64_t extra = length % segments_;
  const int64_t begin =
      b.begin + segment * base + std::min<int64_t>(segment, extra);
  return {begin, begin + base + (segment < extra ? 1 : 0)};
}

RingBlock RingSchedule::SendRange(int64_t k) const {
  const int64_t step = k / segments_;
  const int64_t segment = k % segments_;
  // Reduce-scatter step s sends block r - s; allgather step t (= s - (size
  // - 1)) sends block r + 1 - t: both are what step s - 1 received.
  const int64_t block =
      Reduces(k) ? rank_ - step : rank_ + 1 - (step - (size_ - 1));
  return Segment(static_cast<int>(((block % size_) + size_) % size_), segment);
}

RingBlock RingSchedule::RecvRange(int64_t k) const {
  const int64_t step = k / segments_;
  const int64_t segment = k % segments_;
  const int64_t block =
      Reduces(k) ? rank_ - step - 1 : rank_ - (step - (size_ - 1));
  return Segment(static_cast<int>(((block % size_) + size_) % size_), segment);
}

int64_t RingSchedule::ForwardsReceived(int64_t k) const {
  return k < segments_ ? -1 : k - segments_;
}

int64_t RingSchedule::OverwritesSent(int64_t k) const {
  // Allgather step t receives block r - t in place, the block this rank
  // sent in reduce-scatter step t, size - 1 steps earlier.
  return Reduces(k) ? -1 : k - int64_t{size_ - 1} * segments_;
}

absl::Status RingAllreduce(MPI_Comm comm, void* buffer, int64_t count,
                           DataType dtype, ReduceOp op,
                           int64_t segment_elements,
                           std::vector<uint8_t>* scratch,
                           const Communicator::Staging* staging) {
  int rank = 0, size = 1;
  TERSE_RETURN_IF_ERROR(
      MpiStatus(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank", rank, size));
  TERSE_RETURN_IF_ERROR(
      MpiStatus(MPI_Comm_size(comm, &size), "MPI_Comm_size", rank, size));
  if (count == 0) return absl::OkStatus();
  if (size == 1) {
    if (staging != nullptr) {
      staging->fill(0, count);
      staging->drain(0, count);
    }
    return absl::OkStatus();
  }
  const int64_t elem = static_cast<int64_t>(DataTypeSize(dtype));
  // Every message's byte count must fit MPI's int.
  segment_elements = std::clamp<int64_t>(segment_elements, 1, INT_MAX / elem);
  const RingBlock largest = RingBlockOf(count, size, 0);
  const size_t need =
      static_cast<size_t>(2 * (largest.end - largest.begin) * elem);
  if (scratch->size() < need) scratch->resize(need);
  PipelinedRing ring(comm, rank, size, static_cast<char*>(buffer), count, dtype,
                     op, segment_elements,
                     reinterpret_cast<char*>(scratch->data()), staging);
  return ring.Run();
}

}  // namespace terse
