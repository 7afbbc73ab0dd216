// Runs under mpirun -np 2 (collectives/mpi/BUILD: ring_failure_test). Rank 1
// plays a peer whose ring messages are malformed, rank 0 runs the ring:
//
// 1. RingAllreduce directly: rank 1's first message is twice the segment.
//    Rank 0 must get an error Status naming the MPI call, and nothing may be
//    written into its buffer or scratch after the call returned: rank 1 then
//    sends three well-formed messages on the ring's tag, which the failed
//    call's receives (four posted) would take if they were still posted.
//    They must stay unreceived (rank 0 probes and takes them itself) and
//    the buffer and scratch must keep the bytes they had at the return.
// 2. MpiCommunicator with the ring forced: after the same failure, a second
//    allreduce is refused (FailedPrecondition) instead of matching the
//    failed call's messages.
//
// Every rank prints its failures; the exit status is 1 if any check failed
// on this rank.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "collectives/mpi/mpi_communicator.h"
#include "collectives/mpi/ring_allreduce.h"

namespace terse {
namespace {

constexpr int kControlTag = 11;
constexpr int64_t kCount = 64;   // Floats: blocks of 32.
constexpr int64_t kSegment = 4;  // Floats: 8 segments per block.
constexpr int kSegmentBytes = kSegment * sizeof(float);

// This rank's failed checks.
struct Checks {
  std::vector<std::string> failures;
  void Expect(bool ok, const std::string& what) {
    if (!ok) failures.push_back(what);
  }
};

// Waits up to `seconds` for a message from `source` with `tag` on `comm`;
// receives it (whatever its size) and returns true, or returns false.
bool TakeOne(MPI_Comm comm, int source, int tag, double seconds) {
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    int flag = 0;
    MPI_Status status;
    MPI_Iprobe(source, tag, comm, &flag, &status);
    if (flag) {
      int bytes = 0;
      MPI_Get_count(&status, MPI_BYTE, &bytes);
      std::vector<char> sink(bytes > 0 ? bytes : 1);
      MPI_Recv(sink.data(), bytes, MPI_BYTE, source, tag, comm,
               MPI_STATUS_IGNORE);
      return true;
    }
  }
  return false;
}

// Receives whatever `source` still sends on `tag` until it has been quiet
// for `quiet` seconds (the victim's first-step sends).
void Drain(MPI_Comm comm, int source, int tag, double quiet) {
  while (TakeOne(comm, source, tag, quiet)) {
  }
}

// The peer's half: one oversized message on the ring's tag.
void SendMalformed(MPI_Comm comm) {
  std::vector<char> twice(2 * kSegmentBytes, 0);
  MPI_Send(twice.data(), static_cast<int>(twice.size()), MPI_BYTE, 0,
           kRingAllreduceTag, comm);
}

void NoLateWrites(Checks& checks) {
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  if (rank == 1) {
    SendMalformed(comm);
    int go = 0;
    MPI_Recv(&go, 1, MPI_INT, 0, kControlTag, MPI_COMM_WORLD,
             MPI_STATUS_IGNORE);
    std::vector<char> segment(kSegmentBytes, 0x5a);
    for (int i = 0; i < 3; ++i) {
      MPI_Send(segment.data(), kSegmentBytes, MPI_BYTE, 0, kRingAllreduceTag,
               comm);
    }
    MPI_Send(&go, 1, MPI_INT, 0, kControlTag, MPI_COMM_WORLD);
    Drain(comm, 0, kRingAllreduceTag, 0.2);
  } else {
    std::vector<float> buffer(kCount, 1.0f);
    std::vector<uint8_t> scratch;
    const absl::Status status =
        RingAllreduce(comm, buffer.data(), kCount, DataType::kFloat32,
                      ReduceOp::kSum, kSegment, &scratch, nullptr);
    checks.Expect(!status.ok(), "a truncated ring message must fail the call");
    checks.Expect(absl::StrContains(status.message(), "MPI_Waitany") ||
                      absl::StrContains(status.message(), "MPI_Testany"),
                  "the error names the MPI call: " + status.ToString());
    const std::vector<float> buffer_at_return = buffer;
    const std::vector<uint8_t> scratch_at_return = scratch;
    int go = 1;
    MPI_Send(&go, 1, MPI_INT, 1, kControlTag, MPI_COMM_WORLD);
    MPI_Recv(&go, 1, MPI_INT, 1, kControlTag, MPI_COMM_WORLD,
             MPI_STATUS_IGNORE);
    for (int i = 0; i < 3; ++i) {
      checks.Expect(
          TakeOne(comm, 1, kRingAllreduceTag, 5.0),
          absl::StrCat("the peer's message ", i + 1,
                       " after the failure was taken by a receive of the "
                       "failed call"));
    }
    checks.Expect(buffer == buffer_at_return,
                  "the buffer was written after the call returned");
    checks.Expect(scratch == scratch_at_return,
                  "the scratch was written after the call returned");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Comm_free(&comm);
}

void RingRefusedAfterFailure(Checks& checks) {
  MpiOptions options;
  options.allreduce_algorithm = MpiAllreduceAlgorithm::kRing;
  options.ring_segment_bytes = kSegmentBytes;
  auto comm = MpiCommunicator::Create(options);
  if (!comm.ok()) {
    checks.failures.push_back("create: " + comm.status().ToString());
    return;
  }
  MpiCommunicator& c = **comm;
  if (c.rank() == 1) {
    SendMalformed(c.comm());
    Drain(c.comm(), 0, kRingAllreduceTag, 0.2);
  } else {
    std::vector<float> buffer(kCount, 1.0f);
    const absl::Status first =
        c.Allreduce(buffer.data(), kCount, DataType::kFloat32, ReduceOp::kSum);
    checks.Expect(!first.ok(),
                  "a truncated ring message must fail the allreduce");
    const absl::Status second =
        c.Allreduce(buffer.data(), kCount, DataType::kFloat32, ReduceOp::kSum);
    checks.Expect(absl::IsFailedPrecondition(second) &&
                      absl::StrContains(second.message(), "failed midway"),
                  "the ring after a failed one: " + second.ToString());
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace terse

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) {
    std::fprintf(stderr, "ring_failure_main: run with 2 ranks, not %d\n", size);
    MPI_Finalize();
    return 1;
  }
  terse::Checks checks;
  terse::NoLateWrites(checks);
  terse::RingRefusedAfterFailure(checks);
  for (const std::string& f : checks.failures) {
    std::fprintf(stderr, "FAIL rank %d: %s\n", rank, f.c_str());
  }
  std::fprintf(stderr, "rank %d: ring failure: %zu failures\n", rank,
               checks.failures.size());
  MPI_Finalize();
  return checks.failures.empty() ? 0 : 1;
}
