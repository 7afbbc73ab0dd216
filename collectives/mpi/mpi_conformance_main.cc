// Runs under mpirun (collectives/mpi/BUILD's mpi_test targets):
//   mpi_conformance_main [conformance|app_init|app_init_single|rank_list]
// conformance      terse initialises MPI from a background thread (as the
//                  engine does) and runs the conformance suite three times:
//                  with the default options, with verify_all_calls and tiny
//                  per-call chunks (so the chunked paths run too), and with
//                  the ring allreduce forced.
// app_init         the application initialises MPI (MPI_THREAD_MULTIPLE);
//                  terse must use it, and must not finalise it.
// app_init_single  the application initialises MPI with MPI_Init (thread
//                  level SINGLE); Create() must fail with a clear message.
// rank_list        (4 ranks) MpiOptions::ranks and ::parent: worlds of
//                  listed ranks (unordered lists), a process outside its
//                  list, bad lists, a split parent; the conformance suite
//                  on a two-rank subset.
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

// The conformance and alltoall suites on a communicator created with
// `mpi`; 1 if creating it or any check failed on this rank.
int ConformanceWith(const MpiOptions& mpi, const std::string& what) {
  auto comm = MpiCommunicator::Create(mpi);
  if (!comm.ok()) {
    std::fprintf(stderr, "FAIL create (%s): %s\n", what.c_str(),
                 comm.status().ToString().c_str());
    return 1;
  }
  ConformanceOptions options;
  options.half_partial_roundings = (*comm)->size() - 1;  // Ring: n-1 steps.
  // A count mismatch is caught only by the signature check.
  options.detects_count_mismatch = mpi.verify_all_calls;
  std::vector<std::string> failures = RunConformance(**comm, options);
  std::vector<std::string> f = RunAlltoallConformance(**comm);
  failures.insert(failures.end(), f.begin(), f.end());
  return Report((*comm)->rank(), what, failures);
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
    result |= ConformanceWith(strict, "verify_all_calls + 4096-element chunks");

    // terse's ring allreduce (ring_allreduce.h), which the default options
    // take only across hosts: forced here, in segments small enough that a
    // block of the 100003-element case spans many messages.
    MpiOptions ring;
    ring.allreduce_algorithm = MpiAllreduceAlgorithm::kRing;
    ring.ring_segment_bytes = 4096;
    result |= ConformanceWith(ring, "ring allreduce, 4096-byte segments");
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

// Each check's oracle is the rank list itself: allgathering the world ranks
// over the new communicator must give back the list, in list order.
std::vector<int> WorldRanksOf(MpiCommunicator& c, std::string* failure) {
  int32_t mine = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &mine);
  std::vector<int32_t> all(c.size(), -1);
  absl::Status s = c.Allgather(&mine, all.data(), sizeof(mine));
  if (!s.ok()) *failure = "allgather: " + s.ToString();
  return std::vector<int>(all.begin(), all.end());
}

std::string Join(const std::vector<int>& v) {
  std::string out;
  for (int x : v) out += (out.empty() ? "" : ",") + std::to_string(x);
  return "[" + out + "]";
}

// Create() with `options` must succeed with exactly `want` (world ranks,
// in rank order); appends what differs to `failures`.
void ExpectWorld(const MpiOptions& options, const std::vector<int>& want,
                 const std::string& what, std::vector<std::string>* failures) {
  auto comm = MpiCommunicator::Create(options);
  if (!comm.ok()) {
    failures->push_back(what + ": create: " + comm.status().ToString());
    return;
  }
  MpiCommunicator& c = **comm;
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  int position = -1;
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] == world_rank) position = static_cast<int>(i);
  }
  if (c.size() != static_cast<int>(want.size()) || c.rank() != position) {
    failures->push_back(what + ": rank " + std::to_string(c.rank()) + " of " +
                        std::to_string(c.size()) + ", want " +
                        std::to_string(position) + " of " +
                        std::to_string(want.size()));
  }
  // One host: the local communicator is the whole new one.
  if (c.local_rank() != c.rank() || c.local_size() != c.size()) {
    failures->push_back(what + ": local rank/size differ from rank/size");
  }
  std::string failure;
  std::vector<int> got = WorldRanksOf(c, &failure);
  if (!failure.empty()) failures->push_back(what + ": " + failure);
  if (got != want) {
    failures->push_back(what + ": world ranks " + Join(got) + ", want " +
                        Join(want));
  }
  int64_t sum = world_rank + 1;
  absl::Status s = c.Allreduce(&sum, 1, DataType::kInt64, ReduceOp::kSum);
  int64_t want_sum = 0;
  for (int r : want) want_sum += r + 1;
  if (!s.ok() || sum != want_sum) {
    failures->push_back(what + ": allreduce sum " + std::to_string(sum) +
                        " want " + std::to_string(want_sum) + " " +
                        s.ToString());
  }
}

void ExpectInvalid(const MpiOptions& options,
                   const std::vector<std::string>& fragments,
                   const std::string& what,
                   std::vector<std::string>* failures) {
  auto comm = MpiCommunicator::Create(options);
  if (comm.ok()) {
    failures->push_back(what + ": Create() succeeded");
    return;
  }
  if (comm.status().code() != absl::StatusCode::kInvalidArgument) {
    failures->push_back(what +
                        ": not InvalidArgument: " + comm.status().ToString());
  }
  for (const std::string& f : fragments) {
    if (comm.status().message().find(f) == std::string::npos) {
      failures->push_back(what + ": message does not name \"" + f +
                          "\": " + comm.status().ToString());
    }
  }
}

int RankList() {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<std::string> failures;
  if (size != 4) {
    failures.push_back("rank_list needs 4 ranks, not " + std::to_string(size));
    MPI_Finalize();
    return Report(rank, "rank_list", failures);
  }
  {
    // Two disjoint worlds, created at once; lists out of order.
    MpiOptions options;
    options.ranks =
        rank % 2 == 1 ? std::vector<int>{3, 1} : std::vector<int>{0, 2};
    ExpectWorld(options, options.ranks, "ranks " + Join(options.ranks),
                &failures);
  }
  {
    // Rank 0 asks for a list without it while 1..3 build theirs.
    MpiOptions options;
    options.ranks = {1, 2, 3};
    if (rank == 0) {
      ExpectInvalid(options, {"rank 0 of MPI_COMM_WORLD", "[1, 2, 3]"},
                    "outsider", &failures);
    } else {
      ExpectWorld(options, options.ranks, "[1, 2, 3]", &failures);
    }
  }
  {
    // Bad lists fail on every caller without any message.
    MpiOptions options;
    options.ranks = {0, 4};
    ExpectInvalid(options, {"rank 4", "outside [0, 4)", "[0, 4]"},
                  "out of range", &failures);
    options.ranks = {2, 0, 2};
    ExpectInvalid(options, {"rank 2 is listed twice", "[2, 0, 2]"}, "duplicate",
                  &failures);
    options.ranks.clear();
    options.parent = MPI_COMM_NULL;
    ExpectInvalid(options, {"MPI_COMM_NULL"}, "null parent", &failures);
  }
  {
    // A split parent, freed by the application right after Create(): ranks
    // index the parent. Evens {0, 2}, odds {1, 3}; [1, 0] reverses them.
    MPI_Comm split = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &split);
    MpiOptions whole;
    whole.parent = split;
    MpiOptions reversed = whole;
    reversed.ranks = {1, 0};
    auto kept = MpiCommunicator::Create(whole);
    MPI_Comm_free(&split);
    std::vector<int> evens_or_odds = {rank % 2, rank % 2 + 2};
    if (!kept.ok()) {
      failures.push_back("split parent: " + kept.status().ToString());
    } else {
      std::string failure;
      std::vector<int> got = WorldRanksOf(**kept, &failure);
      if (got != evens_or_odds || !failure.empty()) {
        failures.push_back("split parent: world ranks " + Join(got) + " " +
                           failure);
      }
    }
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &split);
    reversed.parent = split;
    ExpectWorld(reversed, {evens_or_odds[1], evens_or_odds[0]},
                "split parent, ranks [1, 0]", &failures);
    MPI_Comm_free(&split);
  }
  {
    // Every operation on a two-rank subset, the other pair idle.
    MpiOptions options;
    options.ranks = {1, 2};
    if (rank == 1 || rank == 2) {
      auto comm = MpiCommunicator::Create(options);
      if (!comm.ok()) {
        failures.push_back("conformance create: " + comm.status().ToString());
      } else {
        ConformanceOptions conformance;
        conformance.half_partial_roundings = 1;
        conformance.detects_count_mismatch = false;
        std::vector<std::string> f = RunConformance(**comm, conformance);
        failures.insert(failures.end(), f.begin(), f.end());
      }
    }
  }
  MPI_Finalize();
  return Report(rank, "rank_list", failures);
}

}  // namespace
}  // namespace terse

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "conformance";
  if (mode == "conformance") return terse::Conformance();
  if (mode == "app_init") return terse::AppInit();
  if (mode == "app_init_single") return terse::AppInitSingle();
  if (mode == "rank_list") return terse::RankList();
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}
