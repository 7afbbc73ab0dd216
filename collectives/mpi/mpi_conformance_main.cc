// Runs under mpirun (collectives/mpi/BUILD's mpi_test targets):
//   mpi_conformance_main [conformance|app_init|app_init_single]
// conformance      terse initialises MPI from a background thread (as the
//                  engine does) and runs the conformance suite twice: with
//                  the default options, and with verify_all_calls and tiny
//                  per-call chunks (so the chunked paths run too).
// app_init         the application initialises MPI (MPI_THREAD_MULTIPLE);
//                  terse must use it, and must not finalise it.
// app_init_single  the application initialises MPI with MPI_Init (thread
//                  level SINGLE); Create() must fail with a clear message.
// Every rank prints its failures; the exit status is 1 if any check failed
// on this rank.
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "collectives/conformance.h"
#include "collectives/conformance_alltoall.h"
#include "collectives/mpi/mpi_communicator.h"

namespace terse {
namespace {

int Report(int rank, const std::string& what,
           const std::vector<std::string>& failures) {
  for (const std::string& f : failures) {
    std::fprintf(stderr, "FAIL %s: %s\n", what.c_str(), f.c_str());
  }
  std::fprintf(stderr, "rank %d: %s: %zu failures\n", rank, what.c_str(),
               failures.size());
  return failures.empty() ? 0 : 1;
}

int Conformance() {
  int result = 1;
  // The engine's model: every MPI call, MPI_Init_thread included, from one
  // thread that is not the main thread.
  std::thread worker([&result] {
    std::vector<std::string> failures;
    int rank = 0;
    {
      auto comm = MpiCommunicator::Create();
      if (!comm.ok()) {
        std::fprintf(stderr, "FAIL create: %s\n",
                     comm.status().ToString().c_str());
        return;
      }
      MpiCommunicator& c = **comm;
      rank = c.rank();
      if (c.local_size() != c.size() || c.local_rank() != c.rank()) {
        failures.push_back("one host: local rank/size should equal rank/size");
      }
      int world_rank = -1;
      MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
      if (world_rank != c.rank()) failures.push_back("rank differs from world");
      int cmp = MPI_UNEQUAL;
      MPI_Comm_compare(c.comm(), MPI_COMM_WORLD, &cmp);
      if (cmp != MPI_CONGRUENT) failures.push_back("comm is not a world dup");
      absl::Status mapped = MpiStatus(MPI_ERR_COUNT, "MPI_Test", 1, 2);
      if (mapped.code() != absl::StatusCode::kInvalidArgument ||
          mapped.message().find("MPI_Test failed on rank 1 of 2") ==
              std::string::npos ||
          mapped.message().find("count") == std::string::npos) {
        failures.push_back("MPI_ERR_COUNT maps to " + mapped.ToString());
      }
      if (MpiStatus(MPI_ERR_INTERN, "x", 0, 1).code() !=
          absl::StatusCode::kInternal) {
        failures.push_back("MPI_ERR_INTERN should map to Internal");
      }

      ConformanceOptions options;
      options.half_partial_roundings = c.size() - 1;  // Ring: n-1 steps.
      options.detects_count_mismatch = false;  // Only with verify_all_calls.
      std::vector<std::string> f = RunConformance(c, options);
      failures.insert(failures.end(), f.begin(), f.end());
      f = RunAlltoallConformance(c);
      failures.insert(failures.end(), f.begin(), f.end());
    }
    result = Report(rank, "default options", failures);

    MpiOptions strict;
    strict.verify_all_calls = true;
    strict.max_elements_per_call = 4096;
    auto comm = MpiCommunicator::Create(strict);
    if (!comm.ok()) {
      std::fprintf(stderr, "FAIL create strict: %s\n",
                   comm.status().ToString().c_str());
      result = 1;
      return;
    }
    ConformanceOptions options;
    options.half_partial_roundings = (*comm)->size() - 1;
    options.detects_count_mismatch = true;
    std::vector<std::string> strict_failures = RunConformance(**comm, options);
    std::vector<std::string> f = RunAlltoallConformance(**comm);
    strict_failures.insert(strict_failures.end(), f.begin(), f.end());
    result |= Report((*comm)->rank(), "verify_all_calls + 4096-element chunks",
                     strict_failures);
  });
  worker.join();
  return result;  // MPI is finalised at exit (terse initialised it).
}

int AppInit() {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  std::vector<std::string> failures;
  {
    auto comm = MpiCommunicator::Create();
    if (!comm.ok()) {
      failures.push_back("create: " + comm.status().ToString());
    } else {
      int64_t v = (*comm)->rank();
      absl::Status s =
          (*comm)->Allreduce(&v, 1, DataType::kInt64, ReduceOp::kMax);
      if (!s.ok() || v != (*comm)->size() - 1) {
        failures.push_back("allreduce max of ranks: " + s.ToString());
      }
    }
  }
  int finalized = 1;
  MPI_Finalized(&finalized);
  if (finalized) failures.push_back("terse finalised the application's MPI");
  // The application's own traffic still works after terse is gone.
  int one = 1, sum = 0;
  MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  int size = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (sum != size) failures.push_back("application allreduce broken");
  MPI_Finalize();
  return Report(rank, "app_init", failures);
}

int AppInitSingle() {
  MPI_Init(nullptr, nullptr);
  int provided = 0, rank = 0;
  MPI_Query_thread(&provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::vector<std::string> failures;
  auto comm = MpiCommunicator::Create();
  if (provided >= MPI_THREAD_SERIALIZED) {
    // This MPI gives SERIALIZED even to MPI_Init: then terse must work.
    if (!comm.ok()) failures.push_back("create: " + comm.status().ToString());
  } else if (comm.ok()) {
    failures.push_back("Create() accepted thread level SINGLE");
  } else if (comm.status().code() != absl::StatusCode::kFailedPrecondition ||
             comm.status().message().find("MPI_Init_thread") ==
                 std::string::npos) {
    failures.push_back("unclear error: " + comm.status().ToString());
  } else if (rank == 0) {
    std::fprintf(stderr, "expected error: %s\n",
                 comm.status().ToString().c_str());
  }
  comm = absl::InternalError("released");  // Free before finalising.
  MPI_Finalize();
  return Report(rank, "app_init_single", failures);
}

}  // namespace
}  // namespace terse

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "conformance";
  if (mode == "conformance") return terse::Conformance();
  if (mode == "app_init") return terse::AppInit();
  if (mode == "app_init_single") return terse::AppInitSingle();
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}
