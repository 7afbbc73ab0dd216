#include "engine/response_cache.h"

#include <algorithm>

namespace terse {

ResponseCache::ResponseCache(int64_t capacity)
    : capacity_(std::max<int64_t>(capacity, 0)), slots_(capacity_) {
  for (int64_t i = 0; i < capacity_; ++i) free_.insert(i);
}

bool ResponseCache::Cacheable(const proto::Response& response) {
  if (response.kind() != proto::Response::EXECUTE ||
      response.names_size() != 1 || !response.group().empty()) {
    return false;
  }
  switch (response.op()) {
    case proto::ALLREDUCE:
    case proto::BROADCAST:
      return true;
    case proto::ALLGATHER:
      // Only with the gathered shape and every rank's first dimension
      // (Matches compares a request against its rank's).
      return response.shape_size() >= 1 && response.tensor_sizes_size() >= 1;
    default:
      return false;
  }
}

int64_t ResponseCache::Find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? -1 : it->second;
}

bool ResponseCache::occupied(int64_t slot) const {
  return slot >= 0 && slot < capacity_ && slots_[slot].occupied;
}

const proto::Response& ResponseCache::response(int64_t slot) const {
  return slots_[slot].response;
}

bool ResponseCache::Matches(int64_t slot, const proto::Request& request) const {
  if (!occupied(slot)) return false;
  const proto::Response& r = slots_[slot].response;
  if (r.op() != request.op() || r.dtype() != request.dtype() ||
      r.names(0) != request.name() || r.shape_size() != request.shape_size() ||
      r.prescale() != request.prescale() ||
      r.postscale() != request.postscale() ||
      (r.device() < 0) != (request.device() < 0) ||
      r.device_kind() != request.device_kind()) {
    return false;
  }
  // An allgather's response holds the gathered shape: its first dimension
  // is the sum of every rank's, each rank's in tensor_sizes.
  const bool gather = r.op() == proto::ALLGATHER;
  for (int i = gather ? 1 : 0; i < r.shape_size(); ++i) {
    if (r.shape(i) != request.shape(i)) return false;
  }
  if (gather) {
    const int rank = request.rank();
    return r.shape_size() >= 1 && rank >= 0 && rank < r.tensor_sizes_size() &&
           r.tensor_sizes(rank) == request.shape(0);
  }
  if (r.op() == proto::ALLREDUCE) {
    return r.reduce_op() == request.reduce_op() &&
           r.compression() == request.compression();
  }
  return r.root_rank() == request.root_rank();
}

int64_t ResponseCache::Put(const proto::Response& response, int64_t* evicted) {
  *evicted = -1;
  if (capacity_ == 0) return -1;
  const std::string& name = response.names(0);
  int64_t slot = Find(name);
  if (slot < 0) {
    if (free_.empty()) {
      slot = lru_.front();
      Erase(slot);
      *evicted = slot;
    }
    slot = *free_.begin();
    free_.erase(free_.begin());
    slots_[slot].occupied = true;
    slots_[slot].lru = lru_.insert(lru_.end(), slot);
    by_name_[name] = slot;
  }
  slots_[slot].response = response;
  Touch(slot);
  return slot;
}

void ResponseCache::Touch(int64_t slot) {
  if (!occupied(slot)) return;
  lru_.splice(lru_.end(), lru_, slots_[slot].lru);
}

void ResponseCache::Erase(int64_t slot) {
  if (!occupied(slot)) return;
  Slot& s = slots_[slot];
  by_name_.erase(s.response.names(0));
  lru_.erase(s.lru);
  s.occupied = false;
  s.response.Clear();
  free_.insert(slot);
}

}  // namespace terse
