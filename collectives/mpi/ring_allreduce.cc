#include "collectives/mpi/ring_allreduce.h"

#include <algorithm>
#include <climits>

#include "collectives/mpi/mpi_communicator.h"
#include "collectives/reduce.h"
#include "common/status.h"

namespace terse {
namespace {

// The segments of one block as MPI messages of bytes.
struct Segment {
  int64_t offset;  // Bytes from the block's start.
  int bytes;
};

std::vector<Segment> SegmentsOf(int64_t block_elements, int64_t elem_bytes,
                                int64_t segment_elements) {
  std::vector<Segment> segments;
  for (int64_t done = 0; done < block_elements;) {
    const int64_t n = std::min(segment_elements, block_elements - done);
    segments.push_back({done * elem_bytes, static_cast<int>(n * elem_bytes)});
    done += n;
  }
  return segments;
}

class Ring {
 public:
  Ring(MPI_Comm comm, int rank, int size, char* buffer, int64_t count,
       DataType dtype, ReduceOp op, int64_t segment_elements)
      : comm_(comm),
        rank_(rank),
        size_(size),
        buffer_(buffer),
        count_(count),
        dtype_(dtype),
        op_(op),
        elem_(static_cast<int64_t>(DataTypeSize(dtype))),
        segment_elements_(segment_elements),
        right_((rank + 1) % size),
        left_((rank + size - 1) % size) {}

  // One step: sends block `send_block` to the right while receiving block
  // `recv_block` from the left, into `scratch` (then reduced into the
  // buffer) or, with a null `scratch`, straight into the buffer.
  absl::Status Step(int send_block, int recv_block, char* scratch) {
    const RingBlock out = RingBlockOf(count_, size_, send_block);
    const RingBlock in = RingBlockOf(count_, size_, recv_block);
    const std::vector<Segment> sends =
        SegmentsOf(out.end - out.begin, elem_, segment_elements_);
    const std::vector<Segment> recvs =
        SegmentsOf(in.end - in.begin, elem_, segment_elements_);
    char* in_base = buffer_ + in.begin * elem_;
    char* land = scratch != nullptr ? scratch : in_base;
    std::vector<MPI_Request> requests(recvs.size() + sends.size(),
                                      MPI_REQUEST_NULL);
    // Receives first, so every send finds its receive posted.
    for (size_t i = 0; i < recvs.size(); ++i) {
      TERSE_RETURN_IF_ERROR(
          Check(MPI_Irecv(land + recvs[i].offset, recvs[i].bytes, MPI_BYTE,
                          left_, kRingAllreduceTag, comm_, &requests[i]),
                "MPI_Irecv(ring)"));
    }
    const char* out_base = buffer_ + out.begin * elem_;
    for (size_t i = 0; i < sends.size(); ++i) {
      TERSE_RETURN_IF_ERROR(
          Check(MPI_Isend(out_base + sends[i].offset, sends[i].bytes, MPI_BYTE,
                          right_, kRingAllreduceTag, comm_,
                          &requests[recvs.size() + i]),
                "MPI_Isend(ring)"));
    }
    // Segments from one sender arrive in order (MPI's non-overtaking rule),
    // so waiting on them in order reduces each as soon as it is complete.
    for (size_t i = 0; i < recvs.size(); ++i) {
      TERSE_RETURN_IF_ERROR(
          Check(MPI_Wait(&requests[i], MPI_STATUS_IGNORE), "MPI_Wait(ring)"));
      if (scratch != nullptr) {
        ReduceInPlace(in_base + recvs[i].offset, scratch + recvs[i].offset,
                      recvs[i].bytes / elem_, dtype_, op_);
      }
    }
    if (sends.empty()) return absl::OkStatus();
    return Check(
        MPI_Waitall(static_cast<int>(sends.size()),
                    requests.data() + recvs.size(), MPI_STATUSES_IGNORE),
        "MPI_Waitall(ring)");
  }

  int Mod(int x) const { return ((x % size_) + size_) % size_; }

 private:
  absl::Status Check(int rc, const char* call) const {
    return MpiStatus(rc, call, rank_, size_);
  }

  const MPI_Comm comm_;
  const int rank_;
  const int size_;
  char* const buffer_;
  const int64_t count_;
  const DataType dtype_;
  const ReduceOp op_;
  const int64_t elem_;
  const int64_t segment_elements_;
  const int right_;
  const int left_;
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

absl::Status RingAllreduce(MPI_Comm comm, void* buffer, int64_t count,
                           DataType dtype, ReduceOp op,
                           int64_t segment_elements,
                           std::vector<uint8_t>* scratch) {
  int rank = 0, size = 1;
  TERSE_RETURN_IF_ERROR(
      MpiStatus(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank", rank, size));
  TERSE_RETURN_IF_ERROR(
      MpiStatus(MPI_Comm_size(comm, &size), "MPI_Comm_size", rank, size));
  if (size == 1 || count == 0) return absl::OkStatus();
  const int64_t elem = static_cast<int64_t>(DataTypeSize(dtype));
  // Every message's byte count must fit MPI's int.
  segment_elements = std::clamp<int64_t>(segment_elements, 1, INT_MAX / elem);
  const RingBlock largest = RingBlockOf(count, size, 0);
  const size_t need = static_cast<size_t>((largest.end - largest.begin) * elem);
  if (scratch->size() < need) scratch->resize(need);
  Ring ring(comm, rank, size, static_cast<char*>(buffer), count, dtype, op,
            segment_elements);
  for (int s = 0; s < size - 1; ++s) {
    TERSE_RETURN_IF_ERROR(ring.Step(ring.Mod(rank - s), ring.Mod(rank - s - 1),
                                    reinterpret_cast<char*>(scratch->data())));
  }
  for (int s = 0; s < size - 1; ++s) {
    TERSE_RETURN_IF_ERROR(ring.Step(ring.Mod(rank + 1 - s), ring.Mod(rank - s),
                                    /*scratch=*/nullptr));
  }
  return absl::OkStatus();
}

}  // namespace terse
