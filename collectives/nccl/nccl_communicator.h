// NcclCommunicator: the Communicator over NCCL for CUDA buffers.
//
// One NCCL communicator per CUDA device, over the ranks of a control
// communicator (MPI in production, see registry.h): rank 0 creates the NCCL
// unique id and broadcasts it over the control communicator. Ranks agree
// (one control-plane AND) that their device is usable before NCCL is
// initialised, so a rank without a device fails every rank's Create()
// instead of leaving the others blocked in NCCL's bootstrap.
//
// Completion: every operation is enqueued on stream() and returns when it is
// enqueued, not when it is done (unlike the host backends). Synchronize()
// waits for the stream while polling ncclCommGetAsyncError, so a failure on
// another rank surfaces as an error instead of a hang. The caller makes the
// data it hands over ready on stream() (or earlier) and must not read the
// results before Synchronize() or later work on stream().
//
// Buffers must be device (or managed) memory on this communicator's device:
// a CPU buffer or one on another device is InvalidArgument
// (cudaPointerGetAttributes), never a crash. BitwiseAnd/Or also accept host
// words.
//
// Reductions: f16/bf16 map to ncclFloat16/ncclBfloat16 and Average to
// ncclAvg. NCCL rounds 16-bit partial results at each step of its ring, so
// f16/bf16 sums carry the same bound as the MPI backend ((n - 1) + 1
// half-ulps of the exact sum when partial sums do not exceed the result).
//
// NCCL has no bitwise reduction: BitwiseAnd/Or copy the (small) word vector
// to the host, run the control communicator's BitwiseAnd/Or, and copy the
// result back; they synchronise stream() (negotiation-sized vectors only).
// Barrier() is Synchronize() then the control communicator's Barrier().
//
// Errors: an NCCL failure returns a Status naming the operation, the rank,
// the device and NCCL's error string (plus ncclGetLastError's detail). A
// system, internal, remote or CUDA error, or an asynchronous error found by
// polling, aborts the NCCL communicator (ncclCommAbort); every later call
// then fails with FailedPrecondition carrying the first error.
//
// Ownership and threads: the control communicator is borrowed and must
// outlive this one; use from one thread at a time (communicator.h), the
// control communicator's thread.
#ifndef TERSE_COLLECTIVES_NCCL_NCCL_COMMUNICATOR_H_
#define TERSE_COLLECTIVES_NCCL_NCCL_COMMUNICATOR_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/communicator.h"

namespace terse {

class NcclCommunicator : public Communicator {
 public:
  // Collective over every rank of `control`, each naming its own CUDA
  // `device`. InvalidArgument for a null control; FailedPrecondition when a
  // rank has no usable device (every rank gets it); Internal when NCCL fails.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(
      Communicator* control, int device);

  // Destroys the NCCL communicator (waiting for enqueued work) or, after an
  // error, nothing more: it was aborted then.
  ~NcclCommunicator() override;

  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return control_->rank(); }
  int size() const override { return control_->size(); }
  int local_rank() const override { return control_->local_rank(); }
  int local_size() const override { return control_->local_size(); }
  absl::string_view backend() const override { return "nccl"; }

  absl::Status Allreduce(void* buffer, int64_t count, DataType dtype,
                         ReduceOp op) override;
  absl::Status Allgather(const void* send, void* recv,
                         int64_t bytes_per_rank) override;
  // Checks (over the control plane, one 8-byte allgather) that recv_bytes
  // agree on every rank, then one ncclBroadcast per rank in a group.
  absl::Status Allgatherv(const void* send, void* recv,
                          const std::vector<int64_t>& recv_bytes) override;
  // The broadcasts without the control-plane check (the engine's sparse
  // gathers, whose sizes come from an allgather of counts).
  absl::Status AllgathervAgreedSizes(
      const void* send, void* recv,
      const std::vector<int64_t>& recv_bytes) override;
  absl::Status Broadcast(void* buffer, int64_t bytes, int root) override;
  absl::Status Barrier() override;
  absl::Status BitwiseAnd(uint64_t* words, int64_t count) override;
  absl::Status BitwiseOr(uint64_t* words, int64_t count) override;
  absl::Status Synchronize() override;
  // Later operations are enqueued on `stream` (a cudaStream_t, not owned);
  // null restores the communicator's own (non-blocking) stream. True.
  bool UseStream(void* stream) override;

  // The stream operations are enqueued on.
  cudaStream_t stream() const { return stream_; }
  int device() const { return device_; }

 private:
  NcclCommunicator(Communicator* control, int device)
      : control_(control), device_(device) {}

  // FailedPrecondition once aborted; otherwise polls the asynchronous error
  // and makes device_ current.
  absl::Status Ready(const char* op);
  // InvalidArgument unless `p` is device/managed memory on device_ (or
  // bytes == 0).
  absl::Status CheckDeviceBuffer(const void* p, int64_t bytes,
                                 const char* what) const;
  // Status for an NCCL result; aborts the communicator on fatal errors.
  absl::Status NcclStatus(ncclResult_t result, const char* op);
  absl::Status CudaStatus(cudaError_t error, const char* op);
  absl::Status Abort(absl::Status cause);
  absl::Status Bitwise(uint64_t* words, int64_t count, bool is_and);
  // Allgatherv; `check_sizes`: first the control plane's allgather of a
  // hash of recv_bytes.
  absl::Status AllgathervWith(const void* send, void* recv,
                              const std::vector<int64_t>& recv_bytes,
                              bool check_sizes);

  Communicator* const control_;
  const int device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t own_stream_ = nullptr;
  cudaStream_t stream_ = nullptr;
  absl::Status aborted_;  // The error that aborted comm_, if any.
};

}  // namespace terse

#endif  // TERSE_COLLECTIVES_NCCL_NCCL_COMMUNICATOR_H_
