// Session 17: the engine's per-op pattern without the engine. The main
// thread hands each op to a worker thread (a condition variable) and waits
// for it to hand back; the worker runs a 16-byte MPI_BAND allreduce (the
// cached negotiation) and the 1 MiB allreduce. Modes: 0 raw (one thread,
// the 1 MiB allreduce back to back), 3 negotiation + allreduce on one
// thread, 2 hand-off + allreduce, 1 hand-off + negotiation + allreduce.
// Slowest rank's time per op over 300 ops.
//   mpicxx -O2 -pthread handoff_probe.cc -o handoff_probe
//   OMPI_MCA_mpi_yield_when_idle=1 mpirun -np 4 --oversubscribe \
//     --bind-to none --mca btl self,vader,tcp ./handoff_probe MODE
// Printed on 2026-12-05 (two passes over modes 0, 3, 2, 1): raw 464.5 /
// 482.4 us, negotiation 497.1 / 721.5, hand-off 503.1 / 501.6, both
// 518.5 / 529.2: the pattern alone is 0.89-0.91x raw at 1 MiB with 4 ranks
// on 2 cores.
#include <mpi.h>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>
#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
int main(int argc, char** argv) {
  int provided; MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int r, n; MPI_Comm_rank(MPI_COMM_WORLD, &r); MPI_Comm_size(MPI_COMM_WORLD, &n);
  const int mode = argc > 1 ? atoi(argv[1]) : 0;  // 0 raw, 1 handoff+neg, 2 handoff only, 3 neg only (1 thread)
  std::vector<float> buf(1 << 18, 1.0f);
  const int iters = 300;
  std::mutex mu; std::condition_variable cv; int pending = 0, done = 0; bool stop = false;
  auto op = [&](bool neg) {
    if (neg) { uint64_t w[2] = {~0ull, ~0ull}; MPI_Allreduce(MPI_IN_PLACE, w, 2, MPI_UINT64_T, MPI_BAND, MPI_COMM_WORLD); }
    MPI_Allreduce(MPI_IN_PLACE, buf.data(), buf.size(), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  };
  std::thread worker;
  if (mode == 1 || mode == 2) {
    worker = std::thread([&] {
      while (true) {
        { std::unique_lock<std::mutex> l(mu); cv.wait(l, [&] { return pending > 0 || stop; }); if (stop) return; --pending; }
        op(mode == 1);
        { std::lock_guard<std::mutex> l(mu); ++done; } cv.notify_all();
      }
    });
  }
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = 0;
  for (int i = 0; i < iters + 20; ++i) {
    if (i == 20) { if (mode == 0 || mode == 3) MPI_Barrier(MPI_COMM_WORLD); t0 = MPI_Wtime(); }
    if (mode == 0 || mode == 3) { op(mode == 3); continue; }
    { std::lock_guard<std::mutex> l(mu); ++pending; } cv.notify_all();
    std::unique_lock<std::mutex> l(mu); int want = i + 1; cv.wait(l, [&] { return done >= want; });
  }
  double t = (MPI_Wtime() - t0) / iters;
  if (worker.joinable()) { { std::lock_guard<std::mutex> l(mu); stop = true; } cv.notify_all(); worker.join(); }
  MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (r == 0) printf("mode %d: %.1f us/op\n", mode, t * 1e6);
  MPI_Finalize();
}
