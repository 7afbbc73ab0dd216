#include "collectives/mpi/mpi_members.h"

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/stable_hash.h"
#include "common/status.h"

namespace terse {
namespace {

// "MPI_COMM_WORLD" or "the parent communicator", for messages.
const char* ParentName(MPI_Comm parent) {
  return parent == MPI_COMM_WORLD ? "MPI_COMM_WORLD"
                                  : "the parent communicator";
}

absl::Status ParentError(int rc, absl::string_view call) {
  return absl::InternalError(absl::StrCat(
      "mpi: ", call, " on the parent communicator failed with code ", rc));
}

}  // namespace

absl::Status CommunicatorToDuplicate(const MpiOptions& options,
                                     MPI_Comm* members) {
  const MPI_Comm parent = options.parent;
  if (parent == MPI_COMM_NULL) {
    return absl::InvalidArgumentError(
        "mpi: the communicator to run on is MPI_COMM_NULL; pass one this "
        "process is in");
  }
  int inter = 0;
  int rc = MPI_Comm_test_inter(parent, &inter);
  if (rc != MPI_SUCCESS) return ParentError(rc, "MPI_Comm_test_inter");
  if (inter) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mpi: ", ParentName(parent),
        " is an intercommunicator; terse needs an intracommunicator (one "
        "group of processes)"));
  }
  if (options.ranks.empty()) {
    *members = parent;
    return absl::OkStatus();
  }
  int rank = 0;
  int size = 0;
  rc = MPI_Comm_rank(parent, &rank);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_size(parent, &size);
  if (rc != MPI_SUCCESS) return ParentError(rc, "MPI_Comm_rank/size");
  const std::vector<int>& ranks = options.ranks;
  const std::string list = absl::StrCat("[", absl::StrJoin(ranks, ", "), "]");
  std::vector<bool> listed(size, false);
  for (int r : ranks) {
    if (r < 0 || r >= size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mpi: rank ", r, " of the rank list ", list, " is outside [0, ", size,
          "), the ranks of ", ParentName(parent)));
    }
    if (listed[r]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mpi: rank ", r, " is listed twice in the rank list ", list));
    }
    listed[r] = true;
  }
  if (!listed[rank]) {
    return absl::InvalidArgumentError(
        absl::StrCat("mpi: this process (rank ", rank, " of ",
                     ParentName(parent), ") is not in the rank list ", list,
                     "; only the listed processes may start terse on it"));
  }
  MPI_Group all = MPI_GROUP_NULL;
  MPI_Group chosen = MPI_GROUP_NULL;
  rc = MPI_Comm_group(parent, &all);
  if (rc != MPI_SUCCESS) return ParentError(rc, "MPI_Comm_group");
  rc = MPI_Group_incl(all, static_cast<int>(ranks.size()), ranks.data(),
                      &chosen);
  MPI_Group_free(&all);
  if (rc != MPI_SUCCESS) return ParentError(rc, "MPI_Group_incl");
  // The tag only tells concurrent creations on one parent apart; terse
  // makes one at a time.
  constexpr int kCreateGroupTag = 7103;
  rc = MPI_Comm_create_group(parent, chosen, kCreateGroupTag, members);
  MPI_Group_free(&chosen);
  if (rc != MPI_SUCCESS) return ParentError(rc, "MPI_Comm_create_group");
  return absl::OkStatus();
}

absl::Status VerifySameRanks(MPI_Comm comm, const std::vector<int>& ranks,
                             int rank, int size) {
  // The order counts.
  const uint64_t h = StableHashOf(ranks);
  // max(h) and max(~h) = ~min(h): equal to this rank's h only if every
  // rank's is.
  uint64_t words[2] = {h, ~h};
  TERSE_RETURN_IF_ERROR(MpiStatus(
      MPI_Allreduce(MPI_IN_PLACE, words, 2, MPI_UINT64_T, MPI_MAX, comm),
      "MPI_Allreduce", rank, size));
  if (words[0] != h || ~words[1] != h) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mpi: the processes of the new communicator passed different rank "
        "lists (this one [",
        absl::StrJoin(ranks, ", "),
        "]); every listed process must pass the same list, in the same "
        "order"));
  }
  return absl::OkStatus();
}

}  // namespace terse
