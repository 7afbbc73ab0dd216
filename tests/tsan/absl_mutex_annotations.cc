// ThreadSanitizer annotations for Debian's (uninstrumented) absl::Mutex.
//
// Why: terse links Debian's shared libabsl_synchronization, which was not
// built with -fsanitize=thread. TSan therefore never sees absl::Mutex or
// absl::CondVar acquire or release anything, and reports every access that
// a Mutex orders as a data race (false positives on every ABSL_GUARDED_BY
// field). Suppressions cannot fix this: the racing frames are terse's own
// code, so a suppression would hide real races too.
//
// How: this file defines the Mutex/CondVar entry points terse calls. Linked
// into a test executable (statically: --dynamic_mode=off), a definition in
// the executable takes precedence over the shared library's, so every call
// from instrumented code lands here. Each wrapper calls the real function
// (found with dlsym(RTLD_NEXT)) and tells TSan what it did:
//   lock-like   (Lock, TryLock success, ReaderLock, LockWhen...): acquire
//   unlock-like (Unlock, ReaderUnlock):                           release
//   wait-like   (Await..., CondVar::Wait...): release before, acquire after
// which is the happens-before order a Mutex provides. Not modelled: lock
// order inversions (TSan's deadlock detector) and absl::Notification (terse
// does not use it; add wrappers here if it does).
//
// absl's own lock-order checker (on in Debian's build) is switched off
// before main: it keeps a global graph of Mutexes (GraphCycles) behind an
// internal SpinLock that TSan cannot see either, so its memmove/mmap of
// that graph from two threads read as a data race inside every Lock()
// (engine_test, compressed_reducer_test). TSan's deadlock detector takes
// its place under this configuration; normal builds keep absl's.
//
// Used only by --config=tsan (.bazelrc links it into every binary through
// --custom_malloc, the one hook Bazel has for that; it defines no malloc).
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/base/config.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#ifndef ABSL_HAVE_THREAD_SANITIZER
#error "absl_mutex_annotations.cc is only for -fsanitize=thread builds"
#endif

namespace {

#define TERSE_STR2(x) #x
#define TERSE_STR(x) TERSE_STR2(x)

// The real symbol "_ZN4absl<len><inline namespace><rest>" from the next
// object in lookup order (the shared library); aborts if it is missing.
void* Real(const char* rest) {
  const std::string ns = TERSE_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  const std::string name = "_ZN4absl" + std::to_string(ns.size()) + ns + rest;
  void* fn = dlsym(RTLD_NEXT, name.c_str());
  if (fn == nullptr) {
    std::fprintf(stderr, "absl_mutex_annotations: %s not found\n",
                 name.c_str());
    std::abort();
  }
  return fn;
}

template <typename Fn>
Fn Lookup(const char* rest) {
  return reinterpret_cast<Fn>(Real(rest));
}

// Runs before main (static initialisation of this always-linked object),
// before any thread exists.
const bool kAbslDeadlockDetectionOff = [] {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return true;
}();

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

using MuFn = void (*)(Mutex*);
using MuTryFn = bool (*)(Mutex*);
using MuCondFn = void (*)(Mutex*, const Condition&);
using MuCondDurFn = bool (*)(Mutex*, const Condition&, Duration);
using MuCondTimeFn = bool (*)(Mutex*, const Condition&, Time);
using CvFn = void (*)(CondVar*, Mutex*);
using CvDurFn = bool (*)(CondVar*, Mutex*, Duration);
using CvTimeFn = bool (*)(CondVar*, Mutex*, Time);

void Mutex::Lock() {
  static const MuFn real = Lookup<MuFn>("5Mutex4LockEv");
  real(this);
  __tsan_acquire(this);
}

void Mutex::Unlock() {
  static const MuFn real = Lookup<MuFn>("5Mutex6UnlockEv");
  __tsan_release(this);
  real(this);
}

bool Mutex::TryLock() {
  static const MuTryFn real = Lookup<MuTryFn>("5Mutex7TryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

void Mutex::ReaderLock() {
  static const MuFn real = Lookup<MuFn>("5Mutex10ReaderLockEv");
  real(this);
  __tsan_acquire(this);
}

void Mutex::ReaderUnlock() {
  static const MuFn real = Lookup<MuFn>("5Mutex12ReaderUnlockEv");
  __tsan_release(this);
  real(this);
}

bool Mutex::ReaderTryLock() {
  static const MuTryFn real = Lookup<MuTryFn>("5Mutex13ReaderTryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

void Mutex::Await(const Condition& cond) {
  static const MuCondFn real =
      Lookup<MuCondFn>("5Mutex5AwaitERKNS0_9ConditionE");
  __tsan_release(this);
  real(this, cond);
  __tsan_acquire(this);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  static const MuCondDurFn real = Lookup<MuCondDurFn>(
      "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  __tsan_release(this);
  const bool met = real(this, cond, timeout);
  __tsan_acquire(this);
  return met;
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  static const MuCondTimeFn real = Lookup<MuCondTimeFn>(
      "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  __tsan_release(this);
  const bool met = real(this, cond, deadline);
  __tsan_acquire(this);
  return met;
}

void Mutex::LockWhen(const Condition& cond) {
  static const MuCondFn real =
      Lookup<MuCondFn>("5Mutex8LockWhenERKNS0_9ConditionE");
  real(this, cond);
  __tsan_acquire(this);
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  static const MuCondFn real =
      Lookup<MuCondFn>("5Mutex14ReaderLockWhenERKNS0_9ConditionE");
  real(this, cond);
  __tsan_acquire(this);
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  static const MuCondDurFn real = Lookup<MuCondDurFn>(
      "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  const bool met = real(this, cond, timeout);
  __tsan_acquire(this);  // Locked whether or not the condition holds.
  return met;
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  static const MuCondTimeFn real = Lookup<MuCondTimeFn>(
      "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  const bool met = real(this, cond, deadline);
  __tsan_acquire(this);
  return met;
}

bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, Duration timeout) {
  static const MuCondDurFn real = Lookup<MuCondDurFn>(
      "5Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  const bool met = real(this, cond, timeout);
  __tsan_acquire(this);
  return met;
}

bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, Time deadline) {
  static const MuCondTimeFn real = Lookup<MuCondTimeFn>(
      "5Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  const bool met = real(this, cond, deadline);
  __tsan_acquire(this);
  return met;
}

void CondVar::Wait(Mutex* mu) {
  static const CvFn real = Lookup<CvFn>("7CondVar4WaitEPNS0_5MutexE");
  __tsan_release(mu);
  real(this, mu);
  __tsan_acquire(mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  static const CvDurFn real =
      Lookup<CvDurFn>("7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  __tsan_release(mu);
  const bool timed_out = real(this, mu, timeout);
  __tsan_acquire(mu);
  return timed_out;
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  static const CvTimeFn real =
      Lookup<CvTimeFn>("7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  __tsan_release(mu);
  const bool timed_out = real(this, mu, deadline);
  __tsan_acquire(mu);
  return timed_out;
}

ABSL_NAMESPACE_END
}  // namespace absl
