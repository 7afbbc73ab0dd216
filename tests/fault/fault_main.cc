// One rank of a multi-process fault scenario (tests/fault/fault_test.sh runs
// it under mpirun -np 4 and checks what every rank printed).
//
//   fault_main SCENARIO
//
// Scenarios (the victim is the last rank):
//   kill      ten allreduce steps; in step 3 the victim enqueues its
//             allreduce and then SIGKILLs itself, so the others are inside
//             that allreduce when it dies.
//   stall     every rank submits 'grad.a'; every rank but the victim also
//             submits 'grad.b'. The victim submits 'grad.b' after
//             FAULT_LATE_SECONDS seconds (default: never; it waits on a
//             barrier instead), so TERSE_STALL_CHECK_SECONDS and
//             TERSE_STALL_SHUTDOWN_SECONDS decide the outcome.
//   corrupt   one compressed allreduce (set TERSE_COMPRESSION and
//             TERSE_TEST_CORRUPT_PAYLOAD_RANK in the environment).
//   mismatch  'w' has shape [5] on rank 1 and [4] elsewhere; 'dt' is f64 on
//             the victim and f32 elsewhere; then a correct allreduce.
//
// Output, one line per event, for the script to check:
//   fault: rank R: <op> ok
//   fault: rank R: <op> failed: <status>
//   fault: rank R: killing itself at <unix ms>
// Every rank reaches an MPI barrier before it exits (so no rank's output is
// lost to mpirun tearing down the job), then exits 1 if any op failed.
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "engine/api.h"

namespace terse {
namespace {

class Reporter {
 public:
  explicit Reporter(int rank) : rank_(rank) {}

  // Prints the outcome of `op`; remembers a failure.
  void Report(const std::string& op, const absl::Status& status) {
    if (status.ok()) {
      std::printf("fault: rank %d: %s ok\n", rank_, op.c_str());
    } else {
      failed_ = true;
      std::printf("fault: rank %d: %s failed: %s\n", rank_, op.c_str(),
                  std::string(status.message()).c_str());
    }
    std::fflush(stdout);
  }
  bool failed() const { return failed_; }

 private:
  const int rank_;
  bool failed_ = false;
};

absl::Status AllreduceAndWait(const std::string& name, std::vector<float>* v,
                              const std::vector<int64_t>& shape) {
  TensorView view(v->data(), static_cast<int64_t>(v->size()),
                  DataType::kFloat32);
  absl::StatusOr<Handle> h =
      AllreduceAsync(name, view, view, shape, ReduceOp::kSum);
  if (!h.ok()) return h.status();
  return Wait(*h);
}

void Kill(int rank, int size, Reporter* out) {
  std::vector<float> grad(4096, 1.0f);
  TensorView view(grad.data(), 4096, DataType::kFloat32);
  for (int step = 0; step < 10; ++step) {
    absl::StatusOr<Handle> h =
        AllreduceAsync("grad", view, view, {4096}, ReduceOp::kSum);
    if (step == 3 && rank == size - 1) {
      const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::system_clock::now().time_since_epoch());
      std::printf("fault: rank %d: killing itself at %lld\n", rank,
                  static_cast<long long>(now.count()));
      std::fflush(stdout);
      kill(getpid(), SIGKILL);
    }
    out->Report("allreduce step " + std::to_string(step),
                h.ok() ? Wait(*h) : h.status());
    if (out->failed()) return;
  }
}

void Stall(int rank, int size, Reporter* out) {
  const bool victim = rank == size - 1;
  double late = -1;
  if (const char* v = std::getenv("FAULT_LATE_SECONDS")) {
    if (!absl::SimpleAtod(v, &late)) late = -1;
  }
  std::vector<float> a(1000, 1.0f), b(1000, 1.0f);
  TensorView va(a.data(), 1000, DataType::kFloat32);
  TensorView vb(b.data(), 1000, DataType::kFloat32);
  absl::StatusOr<Handle> ha =
      AllreduceAsync("grad.a", va, va, {1000}, ReduceOp::kSum);
  absl::StatusOr<Handle> hb = absl::UnknownError("not submitted");
  if (!victim) {
    hb = AllreduceAsync("grad.b", vb, vb, {1000}, ReduceOp::kSum);
  }
  out->Report("allreduce grad.a", ha.ok() ? Wait(*ha) : ha.status());
  if (victim) {
    if (late < 0) {
      out->Report("barrier", Barrier());
      return;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(late));
    hb = AllreduceAsync("grad.b", vb, vb, {1000}, ReduceOp::kSum);
  }
  out->Report("allreduce grad.b", hb.ok() ? Wait(*hb) : hb.status());
}

void Corrupt(int rank, Reporter* out) {
  std::vector<float> grad(8192);
  for (size_t i = 0; i < grad.size(); ++i) {
    grad[i] = static_cast<float>((i * 2654435761u + rank) % 1000) - 500.0f;
  }
  out->Report("compressed allreduce", AllreduceAndWait("grad", &grad, {8192}));
}

void Mismatch(int rank, int size, Reporter* out) {
  const int64_t n = rank == 1 ? 5 : 4;
  std::vector<float> w(n, 1.0f);
  out->Report("allreduce w", AllreduceAndWait("w", &w, {n}));
  const bool f64 = rank == size - 1;
  std::vector<double> d(2, 1.0);
  std::vector<float> f(2, 1.0f);
  TensorView dt = f64 ? TensorView(d.data(), 2, DataType::kFloat64)
                      : TensorView(f.data(), 2, DataType::kFloat32);
  absl::StatusOr<Handle> h = AllreduceAsync("dt", dt, dt, {2}, ReduceOp::kSum);
  out->Report("allreduce dt", h.ok() ? Wait(*h) : h.status());
  // Mismatches fail the op, not the engine.
  std::vector<float> ok(3, 1.0f);
  Reporter after(rank);
  after.Report("allreduce ok", AllreduceAndWait("ok", &ok, {3}));
  if (after.failed() || ok[0] != static_cast<float>(size)) {
    out->Report("sum after the mismatch", absl::InternalError("wrong sum"));
  }
}

}  // namespace
}  // namespace terse

int main(int argc, char** argv) {
  // terse's background thread makes the MPI calls; the main thread makes
  // the final barrier once terse has shut down.
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  terse::Reporter out(rank);
  const std::string scenario = argc > 1 ? argv[1] : "";
  absl::Status init = terse::InitFromEnvironment();
  out.Report("init", init);
  if (init.ok()) {
    if (scenario == "kill") {
      terse::Kill(rank, size, &out);
    } else if (scenario == "stall") {
      terse::Stall(rank, size, &out);
    } else if (scenario == "corrupt") {
      terse::Corrupt(rank, &out);
    } else if (scenario == "mismatch") {
      terse::Mismatch(rank, size, &out);
    } else {
      out.Report("scenario", absl::InvalidArgumentError("unknown scenario '" +
                                                        scenario + "'"));
    }
    // The root cause if the engine stopped on one.
    out.Report("shutdown", terse::Shutdown());
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return out.failed() ? 1 : 0;
}
