// The Communicator conformance suite: one test body every backend runs
// (loopback as a gtest with 2, 3 and 4 ranks; MPI under mpirun; NCCL on a
// GPU).
//
// RunConformance() exercises every operation of communicator.h: Allreduce
// for each dtype (f32, f64, f16, bf16, i32, i64, u8) x op (sum, min, max,
// average for floating types) x size, AllreduceStaged (host memory: every
// element filled once before use and drained once when final), Allgather,
// Allgatherv with uneven sizes (zero on some ranks), Broadcast from every root,
// Barrier, BitwiseAnd/Or, and bad input (null buffers, negative counts, average
// on integers, a bad root, sizes that disagree across ranks where the backend
// can detect it). Inputs are deterministic functions of (rank, index), so every
// rank computes the reference result of every call by itself, from all ranks'
// inputs, without communicating.
//
// f32/f64/integer inputs are chosen so every summation order gives the same
// exact result, and results must match bit for bit. f16/bf16 sums use values
// with full mantissas, so rounding matters; the result must be within
// (half_partial_roundings + 1) half-ulps of the exact sum (all inputs
// positive, so partial sums never exceed the result).
//
// Collective: every rank of the group calls it with the same options. Every
// rank makes the same sequence of calls whatever the results, so a wrong
// result never leaves a rank blocked. Not thread-safe per communicator.
#ifndef TERSE_COLLECTIVES_CONFORMANCE_H_
#define TERSE_COLLECTIVES_CONFORMANCE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "collectives/communicator.h"

namespace terse {

// Where the suite places the buffers it hands to the communicator. The
// default is host memory; the NCCL test supplies device memory.
class ConformanceMemory {
 public:
  virtual ~ConformanceMemory() = default;
  // A buffer of `bytes` > 0 bytes, or null when allocation fails.
  virtual void* Allocate(int64_t bytes) = 0;
  virtual void Free(void* buffer) = 0;
  virtual absl::Status CopyFromHost(void* dst, const void* host,
                                    int64_t bytes) = 0;
  // Called after Communicator::Synchronize().
  virtual absl::Status CopyToHost(void* host, const void* src,
                                  int64_t bytes) = 0;
};

struct ConformanceOptions {
  // Element counts (byte counts for the byte-oriented operations).
  std::vector<int64_t> sizes = {0, 1, 7, 1000, 100003};
  // How many times a partial f16/bf16 sum may be rounded to 16 bits before
  // the final rounding: 0 for backends that accumulate in fp32 and round
  // once (loopback), size() - 1 for MPI's user-defined op and NCCL (one
  // rounding per step of a ring).
  int half_partial_roundings = 0;
  // Whether an Allreduce whose count differs across ranks is an error on
  // every rank (loopback; MPI with MpiOptions::verify_all_calls).
  bool detects_count_mismatch = true;
  // Whether Allgatherv with recv_bytes that disagree across ranks is an
  // error on every rank (loopback, MPI).
  bool detects_allgatherv_mismatch = true;
  // Run the bad-input checks.
  bool bad_inputs = true;
  // Types the backend cannot reduce (NCCL: int16): Allreduce of them must be
  // Unimplemented with a message naming the type, never a wrong result.
  std::vector<DataType> unreduced_dtypes;
  // Null: host memory. Not owned.
  ConformanceMemory* memory = nullptr;
};

// Returns one line per failed check ("rank R: what: detail"); empty when
// everything conforms.
std::vector<std::string> RunConformance(Communicator& comm,
                                        const ConformanceOptions& options);

}  // namespace terse

#endif  // TERSE_COLLECTIVES_CONFORMANCE_H_
