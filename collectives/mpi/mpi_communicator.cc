#include "collectives/mpi/mpi_communicator.h"

#include <algorithm>
#include <cstring>
#include <climits>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "collectives/mpi/call_signature.h"
#include "collectives/mpi/mpi_members.h"
#include "collectives/reduce.h"
#include "common/status.h"

namespace terse {
namespace {

// Registered with MPI_Op_create: the element type and operation are template
// arguments, so the function needs no state to know what it reduces. Used
// for f16/bf16 (widened to fp32) and for u8 sums, which must wrap modulo 256
// while Open MPI 4.1's AVX op component saturates 8- and 16-bit integer sums
// (open-mpi/ompi#8045).
template <DataType kType, ReduceOp kOp>
void ReduceFn(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  ReduceInPlace(inout, in, *len, kType, kOp);
}

std::string ThreadLevelName(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
  }
  return absl::StrCat("level ", level);
}

void FinalizeMpiAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace

absl::Status MpiCommunicator::CheckBuffer(const void* p, int64_t n,
                                          absl::string_view what) {
  if (n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("mpi: ", what, ": negative count ", n));
  }
  if (p == nullptr && n > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("mpi: ", what, ": null buffer with count ", n));
  }
  return absl::OkStatus();
}

MpiCommunicator::MpiCommunicator(const MpiOptions& options)
    : options_(options) {
  for (auto& row : half_ops_) {
    for (MPI_Op& op : row) op = MPI_OP_NULL;
  }
}

absl::StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::Create(
    const MpiOptions& options) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {
    return absl::FailedPreconditionError(
        "mpi: MPI has already been finalised in this process; terse cannot "
        "use it any more");
  }
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    int rc =
        MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) {
      return absl::InternalError(
          absl::StrCat("mpi: MPI_Init_thread failed with code ", rc));
    }
    // terse initialised MPI, so terse finalises it, after everything else.
    std::atexit(FinalizeMpiAtExit);
    if (provided < MPI_THREAD_SERIALIZED) {
      return absl::FailedPreconditionError(absl::StrCat(
          "mpi: MPI_Init_thread granted ", ThreadLevelName(provided),
          " but terse needs MPI_THREAD_SERIALIZED or higher: its background "
          "thread makes the MPI calls; use an "
          "MPI library built with thread support"));
    }
  } else {
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_SERIALIZED) {
      return absl::FailedPreconditionError(absl::StrCat(
          "mpi: the application initialised MPI with ",
          ThreadLevelName(provided),
          " but terse needs MPI_THREAD_SERIALIZED or higher because its "
          "background thread makes the MPI calls: "
          "call MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...) instead of "
          "MPI_Init, or let terse initialise MPI"));
    }
  }
  MPI_Comm members = MPI_COMM_NULL;
  TERSE_RETURN_IF_ERROR(CommunicatorToDuplicate(options, &members));
  std::unique_ptr<MpiCommunicator> comm(new MpiCommunicator(options));
  absl::Status status = comm->Init(members);
  if (members != options.parent) MPI_Comm_free(&members);
  TERSE_RETURN_IF_ERROR(status);
  if (!options.ranks.empty()) {
    TERSE_RETURN_IF_ERROR(
        VerifySameRanks(comm->comm_, options.ranks, comm->rank_, comm->size_));
  }
  return comm;
}

absl::StatusOr<std::unique_ptr<Communicator>> MpiCommunicator::CreateSubgroup(
    const std::vector<int>& ranks) {
  TERSE_RETURN_IF_ERROR(CheckSubgroupRanks(ranks, size_));
  int key = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] == rank_) key = static_cast<int>(i);
  }
  MPI_Comm split = MPI_COMM_NULL;
  TERSE_RETURN_IF_ERROR(
      Check(MPI_Comm_split(comm_, key >= 0 ? 0 : MPI_UNDEFINED,
                           key >= 0 ? key : 0, &split),
            "MPI_Comm_split"));
  if (split == MPI_COMM_NULL) return std::unique_ptr<Communicator>();
  std::unique_ptr<MpiCommunicator> sub(new MpiCommunicator(options_));
  absl::Status status = sub->Init(split);
  MPI_Comm_free(&split);
  TERSE_RETURN_IF_ERROR(status);
  return std::unique_ptr<Communicator>(std::move(sub));
}

absl::Status MpiCommunicator::Init(MPI_Comm parent) {
  // Errors on MPI_COMM_WORLD keep the application's handler; everything
  // after the dup returns codes.
  int rc = MPI_Comm_dup(parent, &comm_);
  if (rc != MPI_SUCCESS) {
    comm_ = MPI_COMM_NULL;
    return absl::InternalError("mpi: MPI_Comm_dup failed");
  }
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_set_name(comm_, const_cast<char*>("terse"));
  TERSE_RETURN_IF_ERROR(Check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank"));
  TERSE_RETURN_IF_ERROR(Check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size"));

  MPI_Comm local = MPI_COMM_NULL;
  TERSE_RETURN_IF_ERROR(Check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED,
                                                  rank_, MPI_INFO_NULL, &local),
                              "MPI_Comm_split_type"));
  absl::Status local_status =
      Check(MPI_Comm_rank(local, &local_rank_), "MPI_Comm_rank(local)");
  if (local_status.ok()) {
    local_status =
        Check(MPI_Comm_size(local, &local_size_), "MPI_Comm_size(local)");
  }
  MPI_Comm_free(&local);
  TERSE_RETURN_IF_ERROR(local_status);

  TERSE_RETURN_IF_ERROR(Check(MPI_Type_contiguous(2, MPI_BYTE, &half_type_),
                              "MPI_Type_contiguous"));
  TERSE_RETURN_IF_ERROR(Check(MPI_Type_commit(&half_type_), "MPI_Type_commit"));
  MPI_User_function* fns[2][4] = {
      {ReduceFn<DataType::kFloat16, ReduceOp::kSum>,
       ReduceFn<DataType::kFloat16, ReduceOp::kMin>,
       ReduceFn<DataType::kFloat16, ReduceOp::kMax>,
       ReduceFn<DataType::kFloat16, ReduceOp::kProduct>},
      {ReduceFn<DataType::kBFloat16, ReduceOp::kSum>,
       ReduceFn<DataType::kBFloat16, ReduceOp::kMin>,
       ReduceFn<DataType::kBFloat16, ReduceOp::kMax>,
       ReduceFn<DataType::kBFloat16, ReduceOp::kProduct>}};
  MPI_User_function* small_int_prod[3] = {
      ReduceFn<DataType::kUInt8, ReduceOp::kProduct>,
      ReduceFn<DataType::kInt8, ReduceOp::kProduct>,
      ReduceFn<DataType::kInt16, ReduceOp::kProduct>};
  for (int t = 0; t < 3; ++t) {
    TERSE_RETURN_IF_ERROR(Check(MPI_Op_create(small_int_prod[t], /*commute=*/1,
                                              &small_int_prod_ops_[t]),
                                "MPI_Op_create"));
  }
  TERSE_RETURN_IF_ERROR(
      Check(MPI_Op_create(ReduceFn<DataType::kUInt8, ReduceOp::kSum>,
                          /*commute=*/1, &u8_sum_op_),
            "MPI_Op_create"));
  TERSE_RETURN_IF_ERROR(
      Check(MPI_Op_create(ReduceFn<DataType::kInt8, ReduceOp::kSum>,
                          /*commute=*/1, &i8_sum_op_),
            "MPI_Op_create"));
  TERSE_RETURN_IF_ERROR(
      Check(MPI_Op_create(ReduceFn<DataType::kInt16, ReduceOp::kSum>,
                          /*commute=*/1, &i16_sum_op_),
            "MPI_Op_create"));
  for (int t = 0; t < 2; ++t) {
    for (int o = 0; o < 4; ++o) {
      TERSE_RETURN_IF_ERROR(
          Check(MPI_Op_create(fns[t][o], /*commute=*/1, &half_ops_[t][o]),
                "MPI_Op_create"));
    }
  }
  return absl::OkStatus();
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;  // Handles died with MPI.
  for (auto& row : half_ops_) {
    for (MPI_Op& op : row) {
      if (op != MPI_OP_NULL) MPI_Op_free(&op);
    }
  }
  for (MPI_Op& op : small_int_prod_ops_) {
    if (op != MPI_OP_NULL) MPI_Op_free(&op);
  }
  if (u8_sum_op_ != MPI_OP_NULL) MPI_Op_free(&u8_sum_op_);
  if (i8_sum_op_ != MPI_OP_NULL) MPI_Op_free(&i8_sum_op_);
  if (i16_sum_op_ != MPI_OP_NULL) MPI_Op_free(&i16_sum_op_);
  if (half_type_ != MPI_DATATYPE_NULL) MPI_Type_free(&half_type_);
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

absl::Status MpiStatus(int rc, absl::string_view call, int rank, int size) {
  if (rc == MPI_SUCCESS) return absl::OkStatus();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = 0;
  int error_class = rc;
  if (MPI_Error_class(rc, &error_class) != MPI_SUCCESS) error_class = rc;
  std::string message =
      absl::StrCat("mpi: ", call, " failed on rank ", rank, " of ", size, ": ",
                   absl::string_view(text, len), " (code ", rc, ")");
  switch (error_class) {
    case MPI_ERR_BUFFER:
    case MPI_ERR_COUNT:
    case MPI_ERR_TYPE:
    case MPI_ERR_OP:
    case MPI_ERR_ROOT:
    case MPI_ERR_ARG:
    case MPI_ERR_TRUNCATE:
      return absl::InvalidArgumentError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status MpiCommunicator::Check(int rc, const char* call) const {
  return MpiStatus(rc, call, rank_, size_);
}

absl::StatusOr<MPI_Datatype> MpiCommunicator::MpiType(DataType dtype) const {
  switch (dtype) {
    case DataType::kFloat32:
      return MPI_FLOAT;
    case DataType::kFloat64:
      return MPI_DOUBLE;
    case DataType::kInt32:
      return MPI_INT32_T;
    case DataType::kInt64:
      return MPI_INT64_T;
    case DataType::kUInt8:
    case DataType::kBool:  // Moved as bytes; never reduced.
      return MPI_UINT8_T;
    case DataType::kInt8:
      return MPI_INT8_T;
    case DataType::kInt16:
      return MPI_INT16_T;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return half_type_;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("mpi: unknown dtype value ", static_cast<int32_t>(dtype)));
}

absl::StatusOr<MPI_Op> MpiCommunicator::MpiOp(DataType dtype,
                                              ReduceOp op) const {
  int index;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      index = 0;
      break;
    case ReduceOp::kMin:
      index = 1;
      break;
    case ReduceOp::kMax:
      index = 2;
      break;
    case ReduceOp::kProduct:
      index = 3;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "mpi: unknown reduce op value ", static_cast<int32_t>(op)));
  }
  if (dtype == DataType::kFloat16) return half_ops_[0][index];
  if (dtype == DataType::kBFloat16) return half_ops_[1][index];
  if (dtype == DataType::kUInt8 && index == 0) return u8_sum_op_;
  if (dtype == DataType::kInt8 && index == 0) return i8_sum_op_;
  if (dtype == DataType::kInt16 && index == 0) return i16_sum_op_;
  if (index == 3) {
    if (dtype == DataType::kUInt8) return small_int_prod_ops_[0];
    if (dtype == DataType::kInt8) return small_int_prod_ops_[1];
    if (dtype == DataType::kInt16) return small_int_prod_ops_[2];
  }
  const MPI_Op builtin[4] = {MPI_SUM, MPI_MIN, MPI_MAX, MPI_PROD};
  return builtin[index];
}

absl::Status MpiCommunicator::VerifySignature(const CallSignature& mine) {
  std::vector<int64_t> all(static_cast<size_t>(size_) * kCallSignatureFields);
  TERSE_RETURN_IF_ERROR(
      Check(MPI_Allgather(mine.data(), kCallSignatureFields, MPI_INT64_T,
                          all.data(), kCallSignatureFields, MPI_INT64_T, comm_),
            "MPI_Allgather(signature)"));
  return CompareSignatures(all, size_, rank_);
}

absl::Status MpiCommunicator::Allreduce(void* buffer, int64_t count,
                                        DataType dtype, ReduceOp op) {
  return AllreduceWith(buffer, count, dtype, op, /*staging=*/nullptr);
}

absl::Status MpiCommunicator::AllreduceStaged(void* buffer, int64_t count,
                                              DataType dtype, ReduceOp op,
                                              const Staging& staging) {
  // Only the ring stages range by range, and not Average, whose division
  // comes after the last range is final.
  if (op == ReduceOp::kAverage || op == ReduceOp::kAdasum ||
      !IsValidDataType(static_cast<int32_t>(dtype)) ||
      !RingAllreduceChosen(options_.allreduce_algorithm, size_, local_size_,
                           count * static_cast<int64_t>(DataTypeSize(dtype)),
                           options_.ring_min_bytes)) {
    return Communicator::AllreduceStaged(buffer, count, dtype, op, staging);
  }
  return AllreduceWith(buffer, count, dtype, op, &staging);
}

absl::Status MpiCommunicator::AllreduceWith(void* buffer, int64_t count,
                                            DataType dtype, ReduceOp op,
                                            const Staging* staging) {
  TERSE_RETURN_IF_ERROR(CheckBuffer(buffer, count, "allreduce"));
  if (!IsValidDataType(static_cast<int32_t>(dtype))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mpi: allreduce: unknown dtype value ", static_cast<int32_t>(dtype)));
  }
  TERSE_RETURN_IF_ERROR(CheckReduceSupported(dtype, op));
  TERSE_RETURN_IF_ERROR(CheckAdasumRanks(op, size_, "mpi"));
  if (options_.verify_all_calls) {
    TERSE_RETURN_IF_ERROR(
        VerifySignature({kCallAllreduce, count, static_cast<int64_t>(dtype),
                         static_cast<int64_t>(op), -1, 0}));
  }
  if (op == ReduceOp::kAdasum) return AllreduceAdasum(buffer, count, dtype);
  const int64_t chunk =
      std::clamp<int64_t>(options_.max_elements_per_call, 1, INT_MAX);
  const size_t elem = DataTypeSize(dtype);
  if (RingAllreduceChosen(options_.allreduce_algorithm, size_, local_size_,
                          count * static_cast<int64_t>(elem),
                          options_.ring_min_bytes)) {
    const int64_t segment = std::min<int64_t>(
        chunk, std::max<int64_t>(1, options_.ring_segment_bytes / elem));
    if (!ring_failed_.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "mpi: allreduce: the ring cannot run again on this communicator: "
          "an earlier ring allreduce failed midway, so its peers' messages "
          "may still be in flight (",
          ring_failed_.message(), ")"));
    }
    const absl::Status ring = RingAllreduce(comm_, buffer, count, dtype, op,
                                            segment, &ring_scratch_, staging);
    if (!ring.ok()) {
      ring_failed_ = ring;
      return ring;
    }
    if (op == ReduceOp::kAverage) DivideInPlace(buffer, count, dtype, size_);
    return absl::OkStatus();
  }
  TERSE_ASSIGN_OR_RETURN(MPI_Datatype type, MpiType(dtype));
  TERSE_ASSIGN_OR_RETURN(MPI_Op mpi_op, MpiOp(dtype, op));
  char* p = static_cast<char*>(buffer);
  for (int64_t done = 0; done < count;) {
    const int n = static_cast<int>(std::min(chunk, count - done));
    TERSE_RETURN_IF_ERROR(Check(
        MPI_Allreduce(MPI_IN_PLACE, p + done * elem, n, type, mpi_op, comm_),
        "MPI_Allreduce"));
    done += n;
  }
  if (op == ReduceOp::kAverage) DivideInPlace(buffer, count, dtype, size_);
  return absl::OkStatus();
}

absl::Status MpiCommunicator::AllreduceAdasum(void* buffer, int64_t count,
                                              DataType dtype) {
  // Recursive doubling: at distance d each rank swaps its whole vector with
  // rank ^ d and both combine them, the lower rank's as `a`, so partners
  // hold the same bits. log2(size) exchanges of the full vector.
  const int64_t bytes = count * static_cast<int64_t>(DataTypeSize(dtype));
  std::vector<uint8_t> theirs(static_cast<size_t>(bytes));
  const int64_t chunk =
      std::clamp<int64_t>(options_.max_elements_per_call, 1, INT_MAX);
  char* mine = static_cast<char*>(buffer);
  for (int d = 1; d < size_; d <<= 1) {
    const int partner = rank_ ^ d;
    for (int64_t done = 0; done < bytes;) {
      const int n = static_cast<int>(std::min(chunk, bytes - done));
      TERSE_RETURN_IF_ERROR(Check(
          MPI_Sendrecv(mine + done, n, MPI_BYTE, partner, /*sendtag=*/d,
                       theirs.data() + done, n, MPI_BYTE, partner,
                       /*recvtag=*/d, comm_, MPI_STATUS_IGNORE),
          "MPI_Sendrecv(adasum)"));
      done += n;
    }
    if (rank_ < partner) {
      AdasumCombine(mine, theirs.data(), count, dtype);
    } else {
      // The partner's vector is `a`: combine into it, then take the result.
      AdasumCombine(theirs.data(), mine, count, dtype);
      if (bytes > 0) std::memcpy(mine, theirs.data(), bytes);
    }
  }
  return absl::OkStatus();
}

absl::Status MpiCommunicator::Allgather(const void* send, void* recv,
                                        int64_t bytes_per_rank) {
  TERSE_RETURN_IF_ERROR(CheckBuffer(send, bytes_per_rank, "allgather send"));
  TERSE_RETURN_IF_ERROR(CheckBuffer(recv, bytes_per_rank, "allgather recv"));
  if (options_.verify_all_calls) {
    TERSE_RETURN_IF_ERROR(
        VerifySignature({kCallAllgather, bytes_per_rank, -1, -1, -1, 0}));
  }
  if (bytes_per_rank == 0) return absl::OkStatus();
  if (bytes_per_rank > options_.max_elements_per_call ||
      bytes_per_rank > INT_MAX ||
      static_cast<int64_t>(size_) * bytes_per_rank > INT_MAX) {
    return AllgathervByBroadcasts(send, recv,
                                  std::vector<int64_t>(size_, bytes_per_rank));
  }
  const int n = static_cast<int>(bytes_per_rank);
  const void* src = send == static_cast<char*>(recv) + rank_ * bytes_per_rank
                        ? MPI_IN_PLACE
                        : send;
  return Check(MPI_Allgather(src, n, MPI_BYTE, recv, n, MPI_BYTE, comm_),
               "MPI_Allgather");
}

absl::Status MpiCommunicator::Allgatherv(
    const void* send, void* recv, const std::vector<int64_t>& recv_bytes) {
  return AllgathervWith(send, recv, recv_bytes, /*verify=*/true);
}

absl::Status MpiCommunicator::AllgathervAgreedSizes(
    const void* send, void* recv, const std::vector<int64_t>& recv_bytes) {
  return AllgathervWith(send, recv, recv_bytes, options_.verify_all_calls);
}

absl::Status MpiCommunicator::AllgathervWith(
    const void* send, void* recv, const std::vector<int64_t>& recv_bytes,
    bool verify) {
  if (static_cast<int>(recv_bytes.size()) != size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("mpi: allgatherv: recv_bytes has ", recv_bytes.size(),
                     " entries for ", size_, " ranks"));
  }
  int64_t total = 0;
  for (int64_t b : recv_bytes) {
    if (b < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("mpi: allgatherv: negative size ", b));
    }
    total += b;
  }
  TERSE_RETURN_IF_ERROR(
      CheckBuffer(send, recv_bytes[rank_], "allgatherv send"));
  TERSE_RETURN_IF_ERROR(CheckBuffer(recv, total, "allgatherv recv"));
  // Sizes that disagree across ranks would make MPI truncate or misplace
  // data; the check costs one tiny allgather.
  if (verify) {
    TERSE_RETURN_IF_ERROR(VerifySignature(
        {kCallAllgatherv, total, -1, -1, -1, HashSizes(recv_bytes)}));
  }
  if (total == 0) return absl::OkStatus();
  if (total > INT_MAX || total > options_.max_elements_per_call) {
    return AllgathervByBroadcasts(send, recv, recv_bytes);
  }
  std::vector<int> counts(size_), displs(size_);
  int64_t offset = 0;
  for (int r = 0; r < size_; ++r) {
    counts[r] = static_cast<int>(recv_bytes[r]);
    displs[r] = static_cast<int>(offset);
    offset += recv_bytes[r];
  }
  const void* src =
      send == static_cast<char*>(recv) + displs[rank_] ? MPI_IN_PLACE : send;
  // Equal parts (the common case: the same shape on every rank) go through
  // MPI_Allgather, whose algorithms Open MPI tunes further than
  // MPI_Allgatherv's.
  if (std::all_of(counts.begin(), counts.end(),
                  [&](int c) { return c == counts[0]; })) {
    return Check(MPI_Allgather(src, counts[0], MPI_BYTE, recv, counts[0],
                               MPI_BYTE, comm_),
                 "MPI_Allgather");
  }
  return Check(MPI_Allgatherv(src, counts[rank_], MPI_BYTE, recv, counts.data(),
                              displs.data(), MPI_BYTE, comm_),
               "MPI_Allgatherv");
}

absl::Status MpiCommunicator::AllgathervByBroadcasts(
    const void* send, void* recv, const std::vector<int64_t>& recv_bytes) {
  const int64_t chunk =
      std::clamp<int64_t>(options_.max_elements_per_call, 1, INT_MAX);
  char* out = static_cast<char*>(recv);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ && recv_bytes[r] > 0 && out != send) {
      std::copy_n(static_cast<const char*>(send), recv_bytes[r], out);
    }
    for (int64_t done = 0; done < recv_bytes[r];) {
      const int n = static_cast<int>(std::min(chunk, recv_bytes[r] - done));
      TERSE_RETURN_IF_ERROR(
          Check(MPI_Bcast(out + done, n, MPI_BYTE, r, comm_), "MPI_Bcast"));
      done += n;
    }
    out += recv_bytes[r];
  }
  return absl::OkStatus();
}

absl::Status MpiCommunicator::Broadcast(void* buffer, int64_t bytes, int root) {
  TERSE_RETURN_IF_ERROR(CheckBuffer(buffer, bytes, "broadcast"));
  if (root < 0 || root >= size_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mpi: broadcast: root ", root, " outside [0, ", size_, ")"));
  }
  if (options_.verify_all_calls) {
    TERSE_RETURN_IF_ERROR(
        VerifySignature({kCallBroadcast, bytes, -1, -1, root, 0}));
  }
  const int64_t chunk =
      std::clamp<int64_t>(options_.max_elements_per_call, 1, INT_MAX);
  char* p = static_cast<char*>(buffer);
  for (int64_t done = 0; done < bytes;) {
    const int n = static_cast<int>(std::min(chunk, bytes - done));
    TERSE_RETURN_IF_ERROR(
        Check(MPI_Bcast(p + done, n, MPI_BYTE, root, comm_), "MPI_Bcast"));
    done += n;
  }
  return absl::OkStatus();
}

absl::Status MpiCommunicator::Barrier() {
  if (options_.verify_all_calls) {
    TERSE_RETURN_IF_ERROR(VerifySignature({kCallBarrier, 0, -1, -1, -1, 0}));
  }
  return Check(MPI_Barrier(comm_), "MPI_Barrier");
}

absl::Status MpiCommunicator::Bitwise(uint64_t* words, int64_t count,
                                      bool is_and) {
  TERSE_RETURN_IF_ERROR(
      CheckBuffer(words, count, is_and ? "bitwise_and" : "bitwise_or"));
  if (options_.verify_all_calls) {
    TERSE_RETURN_IF_ERROR(VerifySignature(
        {is_and ? kCallBitwiseAnd : kCallBitwiseOr, count, -1, -1, -1, 0}));
  }
  const int64_t chunk =
      std::clamp<int64_t>(options_.max_elements_per_call, 1, INT_MAX);
  for (int64_t done = 0; done < count;) {
    const int n = static_cast<int>(std::min(chunk, count - done));
    TERSE_RETURN_IF_ERROR(
        Check(MPI_Allreduce(MPI_IN_PLACE, words + done, n, MPI_UINT64_T,
                            is_and ? MPI_BAND : MPI_BOR, comm_),
              is_and ? "MPI_Allreduce(MPI_BAND)" : "MPI_Allreduce(MPI_BOR)"));
    done += n;
  }
  return absl::OkStatus();
}

absl::Status MpiCommunicator::BitwiseAnd(uint64_t* words, int64_t count) {
  return Bitwise(words, count, /*is_and=*/true);
}

absl::Status MpiCommunicator::BitwiseOr(uint64_t* words, int64_t count) {
  return Bitwise(words, count, /*is_and=*/false);
}

}  // namespace terse
