// ResponseCache: the negotiated parameters of recently executed operations,
// one numbered slot each, so that a repeated op is announced by one bit.
//
// Every rank keeps an identical copy: the cache is changed only by Put,
// Touch and Erase calls that every rank makes in the same order (driven by
// the negotiated responses and the AND-reduced bit vectors), and every choice
// it makes (which slot, which entry to evict) is a function of that history.
// Eviction is least-recently-used.
//
// Not thread-safe; owned by the negotiator on the background thread.
#ifndef TERSE_ENGINE_RESPONSE_CACHE_H_
#define TERSE_ENGINE_RESPONSE_CACHE_H_

#include <cstdint>
#include <list>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/control.pb.h"

namespace terse {

class ResponseCache {
 public:
  // `capacity` slots (0 disables caching).
  explicit ResponseCache(int64_t capacity);

  int64_t capacity() const { return capacity_; }
  int64_t size() const { return static_cast<int64_t>(by_name_.size()); }

  // Whether a response of this kind may be cached: executed allreduces,
  // broadcasts and allgathers (join and barrier are rare; alltoall and
  // reducescatter carry per-call splits), not grouped ones (only the
  // coordinator answers a group as one).
  static bool Cacheable(const proto::Response& response);

  // The slot holding `name`, or -1.
  int64_t Find(const std::string& name) const;
  bool occupied(int64_t slot) const;
  // The cached response of an occupied slot.
  const proto::Response& response(int64_t slot) const;

  // True when `request` asks for exactly what the slot's response executed
  // (op, dtype, shape, reduce op, compression, root, scales, device
  // kind). An allgather matches when the dimensions after the first agree
  // and the request's first dimension is the one its rank gave
  // (tensor_sizes[request.rank()]): when every rank's matches, the gathered
  // layout is the cached one.
  bool Matches(int64_t slot, const proto::Request& request) const;

  // Caches a single-name Cacheable response, replacing an entry of the same
  // name; when full, evicts the least recently used slot and reports it in
  // *evicted (else -1). Returns the slot, or -1 if capacity is 0.
  int64_t Put(const proto::Response& response, int64_t* evicted);

  // Marks the slot most recently used.
  void Touch(int64_t slot);
  // Empties the slot (no-op when empty).
  void Erase(int64_t slot);

 private:
  struct Slot {
    bool occupied = false;
    proto::Response response;
    std::list<int64_t>::iterator lru;
  };

  const int64_t capacity_;
  std::vector<Slot> slots_;
  std::set<int64_t> free_;  // Lowest free slot first.
  std::list<int64_t> lru_;  // Front: least recently used.
  absl::flat_hash_map<std::string, int64_t> by_name_;
};

}  // namespace terse

#endif  // TERSE_ENGINE_RESPONSE_CACHE_H_
