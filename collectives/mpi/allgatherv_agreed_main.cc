// Runs under mpirun (collectives/mpi/BUILD: allgatherv_agreed_np2_test and
// _np4_test). Counts the MPI collectives MpiCommunicator makes through the
// MPI profiling interface (this binary defines MPI_Allgather and
// MPI_Allgatherv; they count and call PMPI_*), and checks:
//
// 1. Allgatherv checks its sizes across ranks: one MPI_Allgather of call
//    signatures before the data.
// 2. AllgathervAgreedSizes, for sizes every rank took from a collective,
//    does not: the data's call alone.
// 3. With MpiOptions::verify_all_calls it does check them again.
// 4. AllgathervUnknownSizes gathers the sizes and then the data, with no
//    check between them.
//
// Each with equal sizes (the data goes through MPI_Allgather) and with
// sizes that differ by rank (MPI_Allgatherv), against the bytes each rank
// sent (rank r's part is r * 31 + i for byte i). Every rank prints its
// failures; the exit status is 1 if any check failed on this rank.
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/mpi/mpi_communicator.h"

namespace {
int allgather_calls = 0;
int allgatherv_calls = 0;
}  // namespace

// The profiling interface: every MPI collective of this process, terse's
// included, lands here first.
extern "C" int MPI_Allgather(const void* send, int send_count,
                             MPI_Datatype send_type, void* recv, int recv_count,
                             MPI_Datatype recv_type, MPI_Comm comm) {
  ++allgather_calls;
  return PMPI_Allgather(send, send_count, send_type, recv, recv_count,
                        recv_type, comm);
}

extern "C" int MPI_Allgatherv(const void* send, int send_count,
                              MPI_Datatype send_type, void* recv,
                              const int recv_counts[], const int displs[],
                              MPI_Datatype recv_type, MPI_Comm comm) {
  ++allgatherv_calls;
  return PMPI_Allgatherv(send, send_count, send_type, recv, recv_counts, displs,
                         recv_type, comm);
}

namespace terse {
namespace {

struct Checks {
  std::vector<std::string> failures;
  void Expect(bool ok, const std::string& what) {
    if (!ok) failures.push_back(what);
  }
};

std::vector<uint8_t> Part(int rank, int64_t bytes) {
  std::vector<uint8_t> part(static_cast<size_t>(bytes));
  for (int64_t i = 0; i < bytes; ++i) {
    part[i] = static_cast<uint8_t>(rank * 31 + i);
  }
  return part;
}

std::vector<uint8_t> Expected(const std::vector<int64_t>& sizes) {
  std::vector<uint8_t> all;
  for (size_t r = 0; r < sizes.size(); ++r) {
    std::vector<uint8_t> part = Part(static_cast<int>(r), sizes[r]);
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

// Runs `call` and checks how many MPI_Allgather / MPI_Allgatherv calls it
// made and what it gathered.
template <typename Call>
void Count(Checks& checks, const std::string& what, int want_allgather,
           int want_allgatherv, const std::vector<uint8_t>& want,
           const std::vector<uint8_t>& got, Call call) {
  const int before = allgather_calls;
  const int before_v = allgatherv_calls;
  const absl::Status status = call();
  checks.Expect(status.ok(), absl::StrCat(what, ": ", status.ToString()));
  checks.Expect(allgather_calls - before == want_allgather,
                absl::StrCat(what, ": ", allgather_calls - before,
                             " MPI_Allgather calls, want ", want_allgather));
  checks.Expect(allgatherv_calls - before_v == want_allgatherv,
                absl::StrCat(what, ": ", allgatherv_calls - before_v,
                             " MPI_Allgatherv calls, want ", want_allgatherv));
  checks.Expect(got == want, what + ": gathered bytes differ");
}

void Run(Checks& checks, MpiCommunicator& comm, bool verify_all_calls) {
  const int size = comm.size();
  const int me = comm.rank();
  const int check = verify_all_calls ? 1 : 0;
  for (const bool equal : {true, false}) {
    std::vector<int64_t> sizes(size);
    for (int r = 0; r < size; ++r) sizes[r] = equal ? 24 : 8 + 5 * r;
    const std::vector<uint8_t> want = Expected(sizes);
    const std::vector<uint8_t> mine = Part(me, sizes[me]);
    // The data's own call: MPI_Allgather for equal parts, else Allgatherv.
    const int data = equal ? 1 : 0;
    const int data_v = equal ? 0 : 1;
    const std::string how =
        absl::StrCat(equal ? "equal" : "unequal", " sizes",
                     verify_all_calls ? ", verify_all_calls" : "");
    std::vector<uint8_t> got(want.size());
    Count(checks, "Allgatherv, " + how, 1 + data, data_v, want, got,
          [&] { return comm.Allgatherv(mine.data(), got.data(), sizes); });
    got.assign(want.size(), 0);
    Count(checks, "AllgathervAgreedSizes, " + how, check + data, data_v, want,
          got, [&] {
            return comm.AllgathervAgreedSizes(mine.data(), got.data(), sizes);
          });
    std::vector<int64_t> got_sizes;
    got.clear();
    // The sizes' Allgather (checked too with verify_all_calls), the data.
    Count(checks, "AllgathervUnknownSizes, " + how, 1 + 2 * check + data,
          data_v, want, got, [&] {
            return comm.AllgathervUnknownSizes(mine.data(), sizes[me], &got,
                                               &got_sizes);
          });
    checks.Expect(got_sizes == sizes, "AllgathervUnknownSizes, " + how +
                                          ": the gathered sizes differ");
  }
}

}  // namespace
}  // namespace terse

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  terse::Checks checks;
  for (const bool verify_all_calls : {false, true}) {
    terse::MpiOptions options;
    options.verify_all_calls = verify_all_calls;
    auto comm = terse::MpiCommunicator::Create(options);
    if (!comm.ok()) {
      checks.Expect(false, comm.status().ToString());
      break;
    }
    terse::Run(checks, **comm, verify_all_calls);
  }
  for (const std::string& f : checks.failures) {
    std::fprintf(stderr, "rank %d: FAILED: %s\n", rank, f.c_str());
  }
  if (checks.failures.empty())
    std::printf("rank %d: all checks passed\n", rank);
  MPI_Finalize();
  return checks.failures.empty() ? 0 : 1;
}
