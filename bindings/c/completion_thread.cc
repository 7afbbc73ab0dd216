#include "bindings/c/completion_thread.h"

#include <utility>

namespace terse {

CompletionThread::CompletionThread() : thread_([this] { Run(); }) {}

CompletionThread::~CompletionThread() { Stop(); }

void CompletionThread::Post(Task task) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopped_) {
      tasks_.push_back(std::move(task));
      return;
    }
  }
  task();  // The thread is gone: run it here.
}

void CompletionThread::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      // An earlier or concurrent Stop() joins; wait until the queue is done.
      mu_.Await(absl::Condition(&stopped_));
      return;
    }
    stopping_ = true;
  }
  thread_.join();
}

bool CompletionThread::IsCurrentThread() const {
  return std::this_thread::get_id() == thread_.get_id();
}

void CompletionThread::Run() {
  for (;;) {
    Task task;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !tasks_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (tasks_.empty()) {  // Stopping and drained: later posts run inline.
        stopped_ = true;
        return;
      }
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace terse
