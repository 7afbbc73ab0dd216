// A 4-rank sanity check of the MPI installation: every rank contributes its
// rank number and checks the sum. Stands in for the training demo until the
// engine exists.
#include <mpi.h>

#include <cstdio>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  long value = rank, sum = 0;
  MPI_Allreduce(&value, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  long expected = static_cast<long>(size) * (size - 1) / 2;
  if (rank == 0) {
    std::printf("mpi_smoke: %d ranks, sum of ranks %ld (expected %ld): %s\n",
                size, sum, expected, sum == expected ? "ok" : "WRONG");
  }
  MPI_Finalize();
  return sum == expected ? 0 : 1;
}
