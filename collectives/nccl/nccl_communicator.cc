#include "collectives/nccl/nccl_communicator.h"

#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "collectives/reduce.h"
#include "common/stable_hash.h"
#include "common/status.h"

namespace terse {
namespace {

absl::StatusOr<ncclDataType_t> NcclType(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat16:
      return ncclFloat16;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
    case DataType::kUInt8:
    case DataType::kBool:  // Moved as bytes; never reduced.
      return ncclUint8;
    case DataType::kInt8:
      return ncclInt8;
    case DataType::kInt16:
      // NCCL has no 16-bit integer type: say so instead of "unknown".
      return absl::UnimplementedError(absl::StrCat(
          "nccl: NCCL has no 16-bit integer type (", DataTypeName(dtype),
          "); reduce int16 tensors on the CPU or with "
          "TERSE_GPU_OPERATIONS=mpi"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("nccl: unknown dtype value ", static_cast<int32_t>(dtype)));
}

absl::StatusOr<ncclRedOp_t> NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAverage:
      return ncclAvg;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kProduct:
      return ncclProd;
    case ReduceOp::kAdasum:
      return absl::UnimplementedError(
          "nccl: adasum of CUDA tensors is not supported; reduce a CPU copy");
  }
  return absl::InvalidArgumentError(
      absl::StrCat("nccl: unknown reduce op value ", static_cast<int32_t>(op)));
}

// Rank 0's unique id, with whether creating it worked, as broadcast.
struct IdMessage {
  int32_t ok;
  ncclUniqueId id;
};

}  // namespace

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    Communicator* control, int device) {
  if (control == nullptr) {
    return absl::InvalidArgumentError("nccl: null control communicator");
  }
  std::unique_ptr<NcclCommunicator> comm(new NcclCommunicator(control, device));
  const int rank = control->rank();

  // 1. Every rank checks its device; all agree before NCCL starts.
  absl::Status local;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    local = absl::FailedPreconditionError(
        absl::StrCat("no CUDA device: ", cudaGetErrorString(err)));
  } else if (device < 0 || device >= count) {
    local = absl::FailedPreconditionError(absl::StrCat(
        "device cuda:", device, " does not exist (", count, " devices)"));
  } else if ((err = cudaSetDevice(device)) != cudaSuccess ||
             (err = cudaStreamCreateWithFlags(
                  &comm->own_stream_, cudaStreamNonBlocking)) != cudaSuccess) {
    cudaGetLastError();
    local = absl::FailedPreconditionError(
        absl::StrCat("cuda:", device, ": ", cudaGetErrorString(err)));
  }
  comm->stream_ = comm->own_stream_;
  uint64_t all_ok = local.ok() ? 1 : 0;
  TERSE_RETURN_IF_ERROR(control->BitwiseAnd(&all_ok, 1));
  if (!local.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("nccl: rank ", rank, ": ", local.message()));
  }
  if (all_ok == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "nccl: another rank cannot use its CUDA device (see its error); rank ",
        rank, " is fine on cuda:", device));
  }

  // 2. Rank 0's unique id over the control plane.
  IdMessage message;
  std::memset(&message, 0, sizeof(message));
  if (rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&message.id);
    message.ok = r == ncclSuccess ? 1 : static_cast<int32_t>(-r);
  }
  TERSE_RETURN_IF_ERROR(control->Broadcast(&message, sizeof(message), 0));
  if (message.ok != 1) {
    return absl::InternalError(absl::StrCat(
        "nccl: ncclGetUniqueId failed on rank 0: ",
        ncclGetErrorString(static_cast<ncclResult_t>(-message.ok))));
  }

  // 3. Initialise, and agree that it worked everywhere.
  ncclResult_t r =
      ncclCommInitRank(&comm->comm_, control->size(), message.id, rank);
  if (r != ncclSuccess) comm->comm_ = nullptr;
  uint64_t init_ok = r == ncclSuccess ? 1 : 0;
  TERSE_RETURN_IF_ERROR(control->BitwiseAnd(&init_ok, 1));
  if (r != ncclSuccess) {
    return absl::InternalError(absl::StrCat(
        "nccl: ncclCommInitRank failed on rank ", rank, " (cuda:", device,
        "): ", ncclGetErrorString(r), "; ", ncclGetLastError(nullptr)));
  }
  if (init_ok == 0) {
    return absl::InternalError(
        "nccl: ncclCommInitRank failed on another rank (see its error)");
  }
  return comm;
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ != nullptr) ncclCommDestroy(comm_);
  if (own_stream_ != nullptr) cudaStreamDestroy(own_stream_);
}

bool NcclCommunicator::UseStream(void* stream) {
  stream_ = stream != nullptr ? static_cast<cudaStream_t>(stream) : own_stream_;
  return true;
}

absl::Status NcclCommunicator::Abort(absl::Status cause) {
  if (comm_ != nullptr) {
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  if (aborted_.ok()) aborted_ = cause;
  return cause;
}

absl::Status NcclCommunicator::NcclStatus(ncclResult_t result, const char* op) {
  if (result == ncclSuccess) return absl::OkStatus();
  const char* detail = comm_ != nullptr ? ncclGetLastError(comm_) : "";
  std::string message = absl::StrCat(
      "nccl: ", op, " failed on rank ", rank(), " (cuda:", device_,
      "): ", ncclGetErrorString(result),
      detail != nullptr && detail[0] != '\0' ? absl::StrCat("; ", detail)
                                             : std::string());
  switch (result) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return absl::InvalidArgumentError(message);
    default:
      // System, internal, remote or CUDA errors leave the communicator in
      // an unknown state: abort it so no rank waits on it forever.
      return Abort(absl::InternalError(message));
  }
}

absl::Status NcclCommunicator::CudaStatus(cudaError_t error, const char* op) {
  if (error == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();
  return Abort(absl::InternalError(
      absl::StrCat("nccl: ", op, " failed on rank ", rank(), " (cuda:", device_,
                   "): CUDA error ", cudaGetErrorString(error))));
}

absl::Status NcclCommunicator::Ready(const char* op) {
  if (!aborted_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "nccl: ", op,
        " on an aborted communicator; first error: ", aborted_.message()));
  }
  ncclResult_t async = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(comm_, &async);
  if (r != ncclSuccess) return NcclStatus(r, "ncclCommGetAsyncError");
  if (async != ncclSuccess) {
    return NcclStatus(
        async,
        absl::StrCat("an earlier operation (found before ", op, ")").c_str());
  }
  return CudaStatus(cudaSetDevice(device_), "cudaSetDevice");
}

absl::Status NcclCommunicator::CheckDeviceBuffer(const void* p, int64_t bytes,
                                                 const char* what) const {
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("nccl: ", what, ": negative count ", bytes));
  }
  if (bytes == 0) return absl::OkStatus();
  if (p == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("nccl: ", what, ": null buffer with ", bytes, " bytes"));
  }
  cudaPointerAttributes attr;
  cudaError_t err = cudaPointerGetAttributes(&attr, p);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::InvalidArgumentError(absl::StrCat(
        "nccl: ", what, ": not CUDA memory (", cudaGetErrorString(err), ")"));
  }
  if (attr.type == cudaMemoryTypeUnregistered ||
      attr.type == cudaMemoryTypeHost) {
    return absl::InvalidArgumentError(
        absl::StrCat("nccl: ", what,
                     ": a CPU buffer; NCCL moves CUDA buffers only "
                     "(TERSE_BACKEND=auto sends CPU tensors through MPI)"));
  }
  if (attr.type == cudaMemoryTypeDevice && attr.device != device_) {
    return absl::InvalidArgumentError(
        absl::StrCat("nccl: ", what, ": buffer on cuda:", attr.device,
                     ", communicator on cuda:", device_));
  }
  return absl::OkStatus();
}

absl::Status NcclCommunicator::Allreduce(void* buffer, int64_t count,
                                         DataType dtype, ReduceOp op) {
  if (count < 0 || (buffer == nullptr && count > 0)) {
    return CheckDeviceBuffer(buffer, count, "allreduce");
  }
  TERSE_ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(dtype));
  TERSE_ASSIGN_OR_RETURN(ncclRedOp_t nccl_op, NcclOp(op));
  TERSE_RETURN_IF_ERROR(CheckReduceSupported(dtype, op));
  TERSE_RETURN_IF_ERROR(Ready("allreduce"));
  TERSE_RETURN_IF_ERROR(
      CheckDeviceBuffer(buffer, count * DataTypeSize(dtype), "allreduce"));
  if (count == 0) return absl::OkStatus();
  return NcclStatus(
      ncclAllReduce(buffer, buffer, count, type, nccl_op, comm_, stream_),
      "ncclAllReduce");
}

absl::Status NcclCommunicator::Allgather(const void* send, void* recv,
                                         int64_t bytes_per_rank) {
  TERSE_RETURN_IF_ERROR(
      CheckDeviceBuffer(send, bytes_per_rank, "allgather send"));
  TERSE_RETURN_IF_ERROR(
      CheckDeviceBuffer(recv, bytes_per_rank * size(), "allgather recv"));
  TERSE_RETURN_IF_ERROR(Ready("allgather"));
  if (bytes_per_rank == 0) return absl::OkStatus();
  return NcclStatus(
      ncclAllGather(send, recv, bytes_per_rank, ncclUint8, comm_, stream_),
      "ncclAllGather");
}

absl::Status NcclCommunicator::Allgatherv(
    const void* send, void* recv, const std::vector<int64_t>& recv_bytes) {
  return AllgathervWith(send, recv, recv_bytes, /*check_sizes=*/true);
}

absl::Status NcclCommunicator::AllgathervAgreedSizes(
    const void* send, void* recv, const std::vector<int64_t>& recv_bytes) {
  return AllgathervWith(send, recv, recv_bytes, /*check_sizes=*/false);
}

absl::Status NcclCommunicator::AllgathervWith(
    const void* send, void* recv, const std::vector<int64_t>& recv_bytes,
    bool check_sizes) {
  const int n = size();
  if (static_cast<int>(recv_bytes.size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("nccl: allgatherv: recv_bytes has ", recv_bytes.size(),
                     " entries for ", n, " ranks"));
  }
  int64_t total = 0;
  for (int64_t b : recv_bytes) {
    if (b < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("nccl: allgatherv: negative size ", b));
    }
    total += b;
  }
  TERSE_RETURN_IF_ERROR(
      CheckDeviceBuffer(send, recv_bytes[rank()], "allgatherv send"));
  TERSE_RETURN_IF_ERROR(CheckDeviceBuffer(recv, total, "allgatherv recv"));
  TERSE_RETURN_IF_ERROR(Ready("allgatherv"));
  // Sizes must agree everywhere, or ranks would post different broadcasts
  // (and hang in them). Sizes from a collective agree by construction.
  if (check_sizes) {
    uint64_t mine = StableHashOf(recv_bytes);
    std::vector<uint64_t> hashes(n);
    TERSE_RETURN_IF_ERROR(control_->Allgather(&mine, hashes.data(), 8));
    for (int r = 0; r < n; ++r) {
      if (hashes[r] != hashes[0]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "nccl: mismatched collective calls: allgatherv recv_bytes differ "
            "between rank 0 and rank ",
            r, " (seen on rank ", rank(), ")"));
      }
    }
  }
  char* out = static_cast<char*>(recv);
  TERSE_RETURN_IF_ERROR(NcclStatus(ncclGroupStart(), "ncclGroupStart"));
  absl::Status status;
  for (int r = 0; r < n && status.ok(); ++r) {
    if (recv_bytes[r] > 0) {
      const void* src = r == rank() ? send : out;
      status = NcclStatus(
          ncclBroadcast(src, out, recv_bytes[r], ncclUint8, r, comm_, stream_),
          "ncclBroadcast (allgatherv)");
    }
    out += recv_bytes[r];
  }
  if (comm_ == nullptr) return status;  // Aborted: no group to close.
  absl::Status ended = NcclStatus(ncclGroupEnd(), "ncclGroupEnd (allgatherv)");
  return status.ok() ? ended : status;
}

absl::Status NcclCommunicator::Broadcast(void* buffer, int64_t bytes,
                                         int root) {
  if (root < 0 || root >= size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "nccl: broadcast: root ", root, " outside [0, ", size(), ")"));
  }
  TERSE_RETURN_IF_ERROR(CheckDeviceBuffer(buffer, bytes, "broadcast"));
  TERSE_RETURN_IF_ERROR(Ready("broadcast"));
  if (bytes == 0) return absl::OkStatus();
  return NcclStatus(
      ncclBroadcast(buffer, buffer, bytes, ncclUint8, root, comm_, stream_),
      "ncclBroadcast");
}

absl::Status NcclCommunicator::Synchronize() {
  TERSE_RETURN_IF_ERROR(Ready("synchronize"));
  // Poll without sleeping for the first 200 us (most collectives of a step
  // end within it, and a 20 us sleep lasts ~60-100 us in a VM: it was most
  // of a 1 MiB allreduce's time through the engine on an H200), then back
  // off so that a long or hung collective does not hold a core.
  const auto spin_until =
      std::chrono::steady_clock::now() + std::chrono::microseconds(200);
  while (true) {
    cudaError_t err = cudaStreamQuery(stream_);
    if (err == cudaSuccess) break;
    if (err != cudaErrorNotReady) {
      return CudaStatus(err, "cudaStreamQuery (synchronize)");
    }
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm_, &async);
    if (r != ncclSuccess) return NcclStatus(r, "ncclCommGetAsyncError");
    if (async != ncclSuccess) {
      return NcclStatus(async, "an enqueued operation (found by synchronize)");
    }
    if (std::chrono::steady_clock::now() < spin_until) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  return Ready("synchronize");  // An error raised as the work finished.
}

absl::Status NcclCommunicator::Barrier() {
  TERSE_RETURN_IF_ERROR(Synchronize());
  return control_->Barrier();
}

absl::Status NcclCommunicator::Bitwise(uint64_t* words, int64_t count,
                                       bool is_and) {
  const char* what = is_and ? "bitwise_and" : "bitwise_or";
  if (count < 0 || (words == nullptr && count > 0)) {
    return CheckDeviceBuffer(words, count, what);
  }
  TERSE_RETURN_IF_ERROR(Ready(what));
  cudaPointerAttributes attr;
  bool on_host = count == 0;
  if (!on_host) {
    cudaError_t err = cudaPointerGetAttributes(&attr, words);
    if (err != cudaSuccess) cudaGetLastError();
    on_host = err != cudaSuccess || attr.type == cudaMemoryTypeUnregistered ||
              attr.type == cudaMemoryTypeHost;
  }
  if (on_host) {
    // Host words (or none): the control plane reduces them directly.
    return is_and ? control_->BitwiseAnd(words, count)
                  : control_->BitwiseOr(words, count);
  }
  // Device words must be on this communicator's device.
  TERSE_RETURN_IF_ERROR(CheckDeviceBuffer(words, count * 8, what));
  std::vector<uint64_t> host(count);
  const size_t bytes = static_cast<size_t>(count) * 8;
  TERSE_RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(host.data(), words, bytes,
                                 cudaMemcpyDeviceToHost, stream_),
                 "cudaMemcpyAsync (bitwise)"));
  TERSE_RETURN_IF_ERROR(Synchronize());
  TERSE_RETURN_IF_ERROR(is_and ? control_->BitwiseAnd(host.data(), count)
                               : control_->BitwiseOr(host.data(), count));
  TERSE_RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(words, host.data(), bytes,
                                 cudaMemcpyHostToDevice, stream_),
                 "cudaMemcpyAsync (bitwise)"));
  return Synchronize();  // `host` dies on return.
}

absl::Status NcclCommunicator::BitwiseAnd(uint64_t* words, int64_t count) {
  return Bitwise(words, count, /*is_and=*/true);
}

absl::Status NcclCommunicator::BitwiseOr(uint64_t* words, int64_t count) {
  return Bitwise(words, count, /*is_and=*/false);
}

}  // namespace terse
