// The communicator an MpiCommunicator duplicates (MpiOptions::parent and
// MpiOptions::ranks: Horovod's init(comm=...)). Internal to
// MpiCommunicator::Create; see mpi_communicator.h for the contract.
#ifndef TERSE_COLLECTIVES_MPI_MPI_MEMBERS_H_
#define TERSE_COLLECTIVES_MPI_MPI_MEMBERS_H_

#include <mpi.h>

#include <vector>

#include "absl/status/status.h"
#include "collectives/mpi/mpi_communicator.h"

namespace terse {

// Sets *comm to options.parent itself (the caller must not free it) when
// options.ranks is empty, else to a new communicator of the listed parent
// ranks (the caller frees it), made by MPI_Comm_create_group: collective
// over the listed processes only. Checks the parent and the list first, with
// no message sent: InvalidArgument for MPI_COMM_NULL, an intercommunicator,
// a rank out of range or listed twice, or this process not in the list
// (naming its parent rank and the list). Internal for MPI failures.
absl::Status CommunicatorToDuplicate(const MpiOptions& options, MPI_Comm* comm);

// Collective over `comm` (rank `rank` of `size`, for messages): fails on
// every rank unless every rank passes the same `ranks` (one two-word
// allreduce of a hash of the list). InvalidArgument naming this rank's list.
absl::Status VerifySameRanks(MPI_Comm comm, const std::vector<int>& ranks,
                             int rank, int size);

}  // namespace terse

#endif  // TERSE_COLLECTIVES_MPI_MPI_MEMBERS_H_
