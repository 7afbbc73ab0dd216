// Small value types shared by the engine's parts and its public API.
#ifndef TERSE_ENGINE_TYPES_H_
#define TERSE_ENGINE_TYPES_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/data_type.h"

namespace terse {

// Identifies one enqueued operation of an engine. Positive, never reused by
// the engine that issued it.
using Handle = int64_t;

// Completion callback of an operation. Runs on the engine's background
// thread, before Wait() on the handle returns; it must not block on other
// terse operations (it may enqueue new ones).
using DoneCallback = std::function<void(const absl::Status&)>;

// Monotonic clock for every duration the engine measures.
using Clock = std::chrono::steady_clock;

inline double SecondsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// A copy of `s` that shares nothing with it. absl::Status shares its
// message between copies through a reference count inside the (for
// ThreadSanitizer, uninstrumented) absl library; a status handed from one
// thread to another is detached so no two threads ever share one.
inline absl::Status Detached(const absl::Status& s) {
  return s.ok() ? absl::OkStatus() : absl::Status(s.code(), s.message());
}

// std::allocator, except that a resize() leaves the new elements
// default-initialised (for bytes: not written) instead of zeroing them: for
// a buffer a collective is about to overwrite whole, the zeroing is a
// wasted pass over memory (128 MiB for a 64 MiB allgather on 2 ranks).
template <typename T>
struct DefaultInitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  DefaultInitAllocator() = default;
  template <typename U>
  DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {}
  template <typename U>
  void construct(U* p) noexcept(
      std::is_nothrow_default_constructible<U>::value) {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

// Bytes a collective fills: resize() does not zero them.
using UninitializedBytes = std::vector<uint8_t, DefaultInitAllocator<uint8_t>>;

// The result of an allgather, owned by the caller once taken.
struct AllgatherResult {
  UninitializedBytes data;          // Packed, rank-major.
  std::vector<int64_t> first_dims;  // Per rank.
  std::vector<int64_t> shape;       // Sum of first dims, rest as the input.
  DataType dtype = DataType::kFloat32;
};

}  // namespace terse

#endif  // TERSE_ENGINE_TYPES_H_
