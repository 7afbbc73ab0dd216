// CompletionThread: runs completion tasks, in the order they were posted, on
// one thread of its own.
//
// The C ABI (terse_c.h) finishes callback-mode operations here rather than on
// the engine's background thread: the engine runs an operation's callback
// just before it completes the handle, so only another thread can wait on
// the handle, fetch an allgather's result and hand both to the caller's
// callback. Running the caller's code here also keeps it off the engine's
// thread.
//
// Thread-safe. Post() never blocks on a task. Stop() runs every task posted
// before it and joins the thread; a task posted after Stop() runs at once on
// the posting thread (so nothing posted is ever dropped).
#ifndef TERSE_BINDINGS_C_COMPLETION_THREAD_H_
#define TERSE_BINDINGS_C_COMPLETION_THREAD_H_

#include <deque>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace terse {

class CompletionThread {
 public:
  using Task = std::function<void()>;

  CompletionThread();
  ~CompletionThread();  // Stop().
  CompletionThread(const CompletionThread&) = delete;
  CompletionThread& operator=(const CompletionThread&) = delete;

  // Queues `task`; it runs after every task posted before it.
  void Post(Task task);
  // Runs the queued tasks, then joins the thread. Idempotent. Must not be
  // called from a task (it would wait for itself): check IsCurrentThread().
  void Stop();
  // True on the thread that runs the tasks.
  bool IsCurrentThread() const;

 private:
  void Run();

  mutable absl::Mutex mu_;
  std::deque<Task> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace terse

#endif  // TERSE_BINDINGS_C_COMPLETION_THREAD_H_
