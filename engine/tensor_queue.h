// TensorQueue: where framework threads hand operations to the engine's
// background thread.
//
// Thread-safe: any thread pushes; the background thread drains. The queue
// also owns the set of names in flight (pushed and not yet released), per
// process set, so a second op with the same name on the same set is refused
// at once. Once closed (shutdown or
// fatal error), every push fails with the closing status.
#ifndef TERSE_ENGINE_TENSOR_QUEUE_H_
#define TERSE_ENGINE_TENSOR_QUEUE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "engine/tensor_entry.h"

namespace terse {

class TensorQueue {
 public:
  TensorQueue() = default;
  TensorQueue(const TensorQueue&) = delete;
  TensorQueue& operator=(const TensorQueue&) = delete;

  // Queues `entry`. InvalidArgument if an op of the same name is in flight
  // on the same process set;
  // the closing status once closed. On error `entry` is left untouched.
  absl::Status Push(TensorEntry& entry);
  // Queues every entry of `entries` at once (a group, Engine::GroupEnd), or
  // none: InvalidArgument naming the first whose name is in flight on its
  // set or given twice; the closing status once closed. On error `entries`
  // are left untouched.
  absl::Status PushAll(std::vector<TensorEntry>& entries);

  // The engine's wait between cycles (background thread). Returns true
  // (start a cycle now) once the queue is closed or shutdown is requested,
  // or once the engine holds no op (every op in flight is still queued)
  // and every queued op repeats a name pushed before on its set; false at
  // `deadline`. So an op that comes to an idle engine in a steady loop
  // (a training step's first gradient, a benchmark's next call) does not
  // wait for the cycle tick, while ops seen for the first time, whose
  // fusion into buckets is decided by the cycle they are negotiated in,
  // and ops that come while the engine holds others, still wait for it
  // and are negotiated together. The names remembered are bounded
  // (kMaxSeenNames, then forgotten all at once).
  // Also true once every name of the last Await() has been pushed since.
  bool WaitForPush(Clock::time_point deadline);
  // The names the engine awaits (background thread, after a cycle): the
  // members this rank has not pushed yet of buckets it holds others of. Once
  // the last of them is pushed, WaitForPush returns at once, so a bucket
  // whose members arrive one by one runs when its last member arrives, not
  // at the next cycle tick. Names already queued count as pushed; an empty
  // list awaits nothing. Replaced by the next Await, cleared by Drain.
  void Await(std::vector<std::pair<int32_t, std::string>> names);
  // Appends every queued entry to `out` in push order (background thread).
  void Drain(std::vector<TensorEntry>* out);

  // The op named `name` of process set `set` completed: the name may be
  // used again.
  void Release(int32_t set, const std::string& name);
  // Release() for several names of one set under one lock.
  void ReleaseAll(int32_t set, const std::vector<std::string>& names);

  // Refuses later pushes with `status` (the first Close wins).
  void Close(absl::Status status);
  // OK while open.
  absl::Status closed_status() const;

  // The names in flight (pushed and not yet released), in no order; a
  // non-global set's carry " (process set N)". Any
  // thread (the collective watchdog reads it while the background thread
  // is blocked).
  std::vector<std::string> InFlightNames() const;

  // Shutdown requested by this process (read by the background thread).
  void RequestShutdown();
  bool shutdown_requested() const;

 private:
  mutable absl::Mutex mu_;
  std::vector<TensorEntry> queued_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::pair<int32_t, std::string>> in_flight_
      ABSL_GUARDED_BY(mu_);
  absl::Status closed_ ABSL_GUARDED_BY(mu_);
  bool shutdown_requested_ ABSL_GUARDED_BY(mu_) = false;
  // A push that makes WaitForPush's condition true, a close or a shutdown
  // request (not every push: the background thread would wake once per op).
  absl::CondVar wake_;
  // Whether WaitForPush may return now.
  bool ShouldWake() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static absl::Status InFlightError(const TensorEntry& entry);
  // Push's bookkeeping once `entry`'s name is in flight: awaited and seen
  // names, then the queue (moves `entry`).
  void Enqueued(TensorEntry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::flat_hash_set<std::pair<int32_t, std::string>> awaited_
      ABSL_GUARDED_BY(mu_);
  bool awaited_arrived_ ABSL_GUARDED_BY(mu_) = false;
  static constexpr size_t kMaxSeenNames = 1 << 16;
  absl::flat_hash_set<std::pair<int32_t, std::string>> seen_
      ABSL_GUARDED_BY(mu_);
  int64_t queued_new_ ABSL_GUARDED_BY(mu_) = 0;  // Queued, name not seen.
};

}  // namespace terse

#endif  // TERSE_ENGINE_TENSOR_QUEUE_H_
