#include "collectives/mpi/call_signature.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "collectives/communicator.h"
#include "common/data_type.h"
#include "common/stable_hash.h"

namespace terse {
namespace {

const char* KindName(int64_t kind) {
  switch (kind) {
    case kCallAllreduce:
      return "allreduce";
    case kCallAllgather:
      return "allgather";
    case kCallAllgatherv:
      return "allgatherv";
    case kCallBroadcast:
      return "broadcast";
    case kCallBarrier:
      return "barrier";
    case kCallBitwiseAnd:
      return "bitwise_and";
    case kCallBitwiseOr:
      return "bitwise_or";
    case kCallAlltoallv:
      return "alltoallv";
    case kCallReduceScatter:
      return "reduce_scatter";
  }
  return "unknown";
}

}  // namespace

int64_t HashSizes(const std::vector<int64_t>& sizes) {
  return static_cast<int64_t>(StableHashOf(sizes));
}

std::string DescribeSignature(const CallSignature& s) {
  std::string out = absl::StrCat(KindName(s[0]), "(");
  absl::StrAppend(&out,
                  s[0] == kCallAllgatherv ? "total_bytes=" : "count=", s[1]);
  if (s[2] >= 0) {
    absl::StrAppend(&out,
                    ", dtype=", DataTypeName(static_cast<DataType>(s[2])));
  }
  if (s[3] >= 0) {
    absl::StrAppend(&out, ", op=", ReduceOpName(static_cast<ReduceOp>(s[3])));
  }
  if (s[4] >= 0) absl::StrAppend(&out, ", root=", s[4]);
  if (s[0] == kCallAllgatherv) {
    absl::StrAppend(&out, ", recv_bytes hash=", static_cast<uint64_t>(s[5]));
  }
  return out + ")";
}

absl::Status CompareSignatures(const std::vector<int64_t>& all, int size,
                               int seen_on_rank) {
  if (size < 1 ||
      all.size() != static_cast<size_t>(size) * kCallSignatureFields) {
    return absl::InvalidArgumentError(
        absl::StrCat("mpi: ", all.size(), " signature fields for ", size,
                     " ranks (want ", kCallSignatureFields, " per rank)"));
  }
  CallSignature first;
  std::copy(all.begin(), all.begin() + kCallSignatureFields, first.begin());
  for (int r = 1; r < size; ++r) {
    CallSignature other;
    std::copy(all.begin() + r * kCallSignatureFields,
              all.begin() + (r + 1) * kCallSignatureFields, other.begin());
    if (other != first) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mpi: mismatched collective calls: rank 0 called ",
          DescribeSignature(first), ", rank ", r, " called ",
          DescribeSignature(other), " (seen on rank ", seen_on_rank, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace terse
