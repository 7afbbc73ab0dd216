// A persistent fork-join pool for the CPU kernels (parallel.h).
//
// Run(n, fn) runs fn(t) for every t in [0, n) and returns once all have
// finished: the caller runs t = 0 and then claims further indices itself,
// idle workers claim the others. Which thread runs an index never changes
// what fn(t) computes, so a kernel's result depends on n only (bitwise), not
// on the pool's size or load. Thread-safe: concurrent and nested Run calls
// are independent (a caller can always finish its own job alone, so nesting
// cannot deadlock). The destructor finishes queued work and joins the
// workers.
//
// Default() is the one pool of the process (a function-local static, made
// on first use) with DefaultThreads() - 1 workers; it grows when a caller
// asks for more threads than it has (an explicit num_threads wins), up to
// kMaxThreads.
#ifndef TERSE_COMPRESSORS_KERNELS_THREAD_POOL_H_
#define TERSE_COMPRESSORS_KERNELS_THREAD_POOL_H_

#include <list>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"

namespace terse {
namespace kernels {

// Threads a kernel uses when its caller passes 0: the hardware threads
// divided among the ranks on this host (OMPI_COMM_WORLD_LOCAL_SIZE when set,
// else 1), at least 1 and at most 8. Read once per process.
int DefaultThreads();

// DefaultThreads() for `hardware` threads and a local-size value (null or
// unparsable: 1 rank). Exposed for tests.
int DefaultThreadsFor(int hardware, const char* local_size);

class ThreadPool {
 public:
  static constexpr int kMaxThreads = 64;

  // Starts `workers` threads (clamped to [0, kMaxThreads - 1]).
  explicit ThreadPool(int workers);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // The process's pool.
  static ThreadPool& Default();

  // fn(t) for t in [0, n), t = 0 on the calling thread; blocks until all
  // returned. n <= 1 runs fn(0) inline. Starts workers up to
  // min(n, kMaxThreads) - 1 if the pool has fewer.
  void Run(int n, absl::FunctionRef<void(int)> fn);

  int workers() const;

 private:
  struct Job {
    absl::FunctionRef<void(int)> fn;
    int n;
    int next = 1;     // First unclaimed index.
    int running = 0;  // Claimed by workers, not yet finished.
    absl::CondVar done;
  };

  void WorkerLoop();

  mutable absl::Mutex mu_;
  absl::CondVar work_;                      // A job was queued, or stop_.
  std::list<Job*> queue_ ABSL_GUARDED_BY(mu_);  // Jobs with unclaimed indices.
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace kernels
}  // namespace terse

#endif  // TERSE_COMPRESSORS_KERNELS_THREAD_POOL_H_
