#include "compressors/kernels/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

namespace terse {
namespace kernels {

int DefaultThreadsFor(int hardware, const char* local_size) {
  int ranks = 1;
  if (local_size != nullptr) {
    char* end = nullptr;
    const long parsed = std::strtol(local_size, &end, 10);
    if (end != local_size && *end == '\0' && parsed > 0) {
      ranks = static_cast<int>(std::min<long>(parsed, 1 << 20));
    }
  }
  return std::min(std::max(std::max(hardware, 1) / ranks, 1), 8);
}

int DefaultThreads() {
  static const int threads =
      DefaultThreadsFor(static_cast<int>(std::thread::hardware_concurrency()),
                        std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE"));
  return threads;
}

ThreadPool::ThreadPool(int workers) {
  workers = std::min(std::max(workers, 0), kMaxThreads - 1);
  absl::MutexLock lock(&mu_);
  for (int i = 0; i < workers; ++i) {
    threads_.emplace_back([this] { WorkerLoop(); });
  }
}

ThreadPool::~ThreadPool() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    work_.SignalAll();
    threads.swap(threads_);
  }
  for (std::thread& t : threads) t.join();
}

ThreadPool& ThreadPool::Default() {
  // Never destroyed: kernels may run from other statics' destructors, and
  // the workers sleep in Wait at exit.
  static ThreadPool* const pool = new ThreadPool(DefaultThreads() - 1);
  return *pool;
}

int ThreadPool::workers() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(threads_.size());
}

void ThreadPool::WorkerLoop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    while (!stop_ && queue_.empty()) work_.Wait(&mu_);
    if (queue_.empty()) return;  // stop_ and nothing left to claim.
    Job* job = queue_.front();
    const int t = job->next++;
    if (job->next == job->n) queue_.pop_front();
    ++job->running;
    mu_.Unlock();
    job->fn(t);
    mu_.Lock();
    // The caller frees the job once nothing is unclaimed or running; it
    // needs mu_ for that, so the job outlives this Signal.
    if (--job->running == 0 && job->next == job->n) job->done.Signal();
  }
}

void ThreadPool::Run(int n, absl::FunctionRef<void(int)> fn) {
  if (n <= 1) {
    fn(0);
    return;
  }
  Job job{fn, n};
  {
    absl::MutexLock lock(&mu_);
    const int want = std::min(n, kMaxThreads) - 1;
    while (!stop_ && static_cast<int>(threads_.size()) < want) {
      threads_.emplace_back([this] { WorkerLoop(); });
    }
    queue_.push_back(&job);
    for (int i = 1; i < n; ++i) work_.Signal();
  }
  fn(0);
  absl::MutexLock lock(&mu_);
  // Claim what no worker has taken yet (all of it when the pool is busy).
  while (job.next < job.n) {
    const int t = job.next++;
    if (job.next == job.n) queue_.remove(&job);
    mu_.Unlock();
    fn(t);
    mu_.Lock();
  }
  while (job.running > 0) job.done.Wait(&mu_);
}

}  // namespace kernels
}  // namespace terse
