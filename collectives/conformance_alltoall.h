// Conformance of Communicator::Alltoallv and Communicator::ReduceScatter
// (host memory; loopback as a gtest with 2, 3 and 4 ranks, MPI under
// mpirun). Inputs are deterministic functions of (rank, peer, index), so
// every rank computes the reference of every call from all ranks' inputs
// without communicating: Alltoallv's bytes must match exactly;
// ReduceScatter's sums, minima, maxima and products of small integers are
// exact in every dtype and order, and Average is compared within a
// tolerance of the dtype's precision. Bad input: sizes or counts that
// disagree across ranks and Adasum must fail on every rank.
//
// Collective: every rank calls it; every rank makes the same calls whatever
// the results.
#ifndef TERSE_COLLECTIVES_CONFORMANCE_ALLTOALL_H_
#define TERSE_COLLECTIVES_CONFORMANCE_ALLTOALL_H_

#include <string>
#include <vector>

#include "collectives/communicator.h"

namespace terse {

// One line per failed check ("rank R: what: detail"); empty when
// everything conforms.
std::vector<std::string> RunAlltoallConformance(Communicator& comm);

}  // namespace terse

#endif  // TERSE_COLLECTIVES_CONFORMANCE_ALLTOALL_H_
