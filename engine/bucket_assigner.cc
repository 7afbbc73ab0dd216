#include "engine/bucket_assigner.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "engine/tensor_entry.h"

namespace terse {
namespace {

int64_t ResponseCount(const proto::Response& r) {
  int64_t n = 1;
  for (int64_t d : r.shape()) {
    if (d < 0 || (d != 0 && n > INT64_MAX / d)) return -1;
    n *= d;
  }
  return n;
}

}  // namespace

BucketAssigner::BucketAssigner(int64_t threshold_bytes, int64_t solo_bytes,
                               GroupFunction group, SoloFilter solo,
                               int64_t forget_after_steps)
    : threshold_(threshold_bytes),
      solo_bytes_(solo_bytes),
      group_(std::move(group)),
      solo_filter_(std::move(solo)),
      forget_after_(forget_after_steps) {}

void BucketAssigner::CountStep(const std::string& name,
                               std::vector<int>* completed) {
  auto it = seen_.find(name);
  if (it == seen_.end() && recently_forgotten_.contains(name)) {
    // A name forgotten within the last kRecentlyForgotten comes back before
    // any repeat: the loop is longer than the steps of fresh names the
    // forgetting counts. Lengthen those steps so its names survive a pass;
    // a workload of fresh names never comes back here and keeps the bound.
    fresh_step_names_ = std::min(fresh_step_names_ * 2, kMaxFreshStepNames);
    recently_forgotten_.clear();
    recent_order_.clear();
  }
  if (it != seen_.end() && it->second.step >= run_start_) {
    // Ready twice since the last repeat: the step is over. The names since
    // then are the loop's working set, however many steps of fresh names
    // they spanned (a first step of more than kMinStepNames names does).
    working_set_ = run_names_;
    EndStep(completed);
    run_start_ = step_;
    run_names_ = 0;
  } else if (step_names_ >= std::max(fresh_step_names_, 2 * working_set_)) {
    // No name repeats: a step of fresh names is full. Twice the loop's
    // length, so a tensor that joins a loop for a step (a branch taken now
    // and then) does not cut the step in two.
    EndStep(completed);
  }
  seen_[name].step = step_;
  ++step_names_;
  ++run_names_;
}

void BucketAssigner::EndStep(std::vector<int>* completed) {
  ++step_;
  step_names_ = 0;
  if (forget_after_ <= 0) return;
  std::vector<std::string> stale;
  for (const auto& [name, seen] : seen_) {
    if (step_ - seen.step > forget_after_) stale.push_back(name);
  }
  // A fixed order, so the buckets change the same way on every rank.
  std::sort(stale.begin(), stale.end());
  for (const std::string& name : stale) {
    seen_.erase(name);
    forgotten_.push_back(name);
    if (recently_forgotten_.insert(name).second) recent_order_.push_back(name);
    if (recent_order_.size() > kRecentlyForgotten) {
      recently_forgotten_.erase(recent_order_.front());
      recent_order_.pop_front();
    }
    auto place = places_.find(name);
    if (place == places_.end()) continue;  // It failed and left already.
    const int id = place->second.bucket;
    Erase(id, place->second.index);
    auto b = buckets_.find(id);
    if (b != buckets_.end() && b->second.complete() &&
        b->second.ready_count > 0) {
      completed->push_back(id);
    }
  }
}

bool BucketAssigner::SameKey(const Bucket& b, const proto::Response& r) const {
  return static_cast<int32_t>(b.dtype) == r.dtype() &&
         b.cuda == (r.device() >= 0) && b.device_kind == r.device_kind() &&
         static_cast<int32_t>(b.reduce_op) == r.reduce_op() &&
         b.prescale == r.prescale() && b.postscale == r.postscale() &&
         b.compression == r.compression() && b.op_group == r.group() &&
         b.group == GroupOf(r.names(0), r.compression());
}

std::string BucketAssigner::GroupOf(const std::string& name,
                                    const std::string& compression) const {
  return group_ ? group_(name, compression) : std::string();
}

int BucketAssigner::NewBucket(const proto::Response& r) {
  const int id = next_id_++;
  Bucket& b = buckets_[id];
  b.id = id;
  b.dtype = static_cast<DataType>(r.dtype());
  b.cuda = r.device() >= 0;
  b.device_kind = r.device_kind();
  b.reduce_op = static_cast<ReduceOp>(r.reduce_op());
  b.prescale = r.prescale();
  b.compression = r.compression();
  b.op_group = r.group();
  b.group =
      r.names_size() > 0 ? GroupOf(r.names(0), r.compression()) : std::string();
  b.postscale = r.postscale();
  return id;
}

void BucketAssigner::Reindex(const Bucket& b) {
  for (int i = 0; i < static_cast<int>(b.members.size()); ++i) {
    places_[b.members[i].name] = Place{b.id, i};
  }
}

void BucketAssigner::Erase(int id, int index) {
  changed_.push_back(id);
  Bucket& b = buckets_.at(id);
  places_.erase(b.members[index].name);
  b.count -= b.members[index].count;
  b.bytes = b.count * static_cast<int64_t>(DataTypeSize(b.dtype));
  if (b.ready[index]) --b.ready_count;
  b.members.erase(b.members.begin() + index);
  b.ready.erase(b.ready.begin() + index);
  if (b.members.empty()) {
    buckets_.erase(id);
    return;
  }
  Reindex(b);
}

bool BucketAssigner::Regroup(int64_t threshold_bytes) {
  for (const auto& [id, b] : buckets_) {
    if (b.ready_count > 0) return false;
  }
  for (const auto& [id, b] : buckets_) changed_.push_back(id);
  buckets_.clear();
  places_.clear();
  threshold_ = threshold_bytes;
  return true;
}

int BucketAssigner::BucketOf(const std::string& name) const {
  auto it = places_.find(name);
  return it == places_.end() ? -1 : it->second.bucket;
}

bool BucketAssigner::MarkReady(const std::string& name) {
  const Place place = places_.at(name);
  Bucket& b = buckets_.at(place.bucket);
  if (b.ready[place.index]) return false;
  b.ready[place.index] = true;
  ++b.ready_count;
  b.stuck_cycles = 0;
  return b.complete();
}

std::vector<int> BucketAssigner::OnReady(
    const std::vector<const proto::Response*>& ready) {
  std::vector<int> completed;
  for (const proto::Response* r : ready) CountStep(r->names(0), &completed);
  // The bucket of each key opened last in this call (next fit).
  std::vector<int> open;
  for (const proto::Response* r : ready) {
    const std::string& name = r->names(0);
    const int64_t count = ResponseCount(*r);
    auto it = places_.find(name);
    if (it != places_.end()) {
      const Bucket& b = buckets_.at(it->second.bucket);
      if (SameKey(b, *r) && b.members[it->second.index].count == count) {
        continue;
      }
      // Changed parameters: leave the old bucket (which may now be complete).
      const int old = it->second.bucket;
      Erase(old, it->second.index);
      auto still = buckets_.find(old);
      if (still != buckets_.end() && still->second.complete() &&
          still->second.ready_count > 0) {
        completed.push_back(old);
      }
    }
    const int64_t bytes =
        count *
        static_cast<int64_t>(DataTypeSize(static_cast<DataType>(r->dtype())));
    // Adasum's dot products are per tensor: such a tensor is never fused.
    const bool solo = r->reduce_op() == proto::ADASUM ||
                      (solo_bytes_ > 0 && bytes >= solo_bytes_ &&
                       (!solo_filter_ || solo_filter_(name, r->compression())));
    int target = -1;
    if (!solo) {
      for (size_t k = 0; k < open.size(); ++k) {
        const Bucket& b = buckets_.at(open[k]);
        if (!SameKey(b, *r)) continue;
        if (b.bytes + bytes <= threshold_) {
          target = open[k];
        } else {
          target = NewBucket(*r);
          open[k] = target;
        }
        break;
      }
    }
    if (target < 0) {
      target = NewBucket(*r);
      if (!solo) open.push_back(target);
    }
    Bucket& b = buckets_.at(target);
    b.members.push_back(
        BucketMember{name, count, {r->shape().begin(), r->shape().end()}});
    b.ready.push_back(false);
    b.count += count;
    b.bytes += bytes;
    places_[name] = Place{target, static_cast<int>(b.members.size()) - 1};
  }
  for (const proto::Response* r : ready) {
    if (MarkReady(r->names(0))) {
      completed.push_back(places_.at(r->names(0)).bucket);
    }
  }
  return completed;
}

std::vector<int> BucketAssigner::Remove(const std::string& name) {
  auto it = places_.find(name);
  if (it == places_.end()) return {};
  const int id = it->second.bucket;
  Erase(id, it->second.index);
  auto b = buckets_.find(id);
  if (b != buckets_.end() && b->second.complete() &&
      b->second.ready_count > 0) {
    return {id};
  }
  return {};
}

std::vector<int> BucketAssigner::Tick(int64_t stuck_limit) {
  std::vector<int> split;
  std::vector<int> stuck;
  for (auto& [id, b] : buckets_) {
    if (b.ready_count == 0 || b.complete()) continue;
    if (++b.stuck_cycles >= stuck_limit) stuck.push_back(id);
  }
  for (int id : stuck) {
    Bucket& old = buckets_.at(id);
    std::vector<BucketMember> ready_members;
    std::vector<BucketMember> rest;
    for (size_t i = 0; i < old.members.size(); ++i) {
      (old.ready[i] ? ready_members : rest).push_back(old.members[i]);
    }
    proto::Response key;
    key.set_dtype(static_cast<int32_t>(old.dtype));
    key.set_device(old.cuda ? 0 : -1);
    key.set_device_kind(old.device_kind);
    key.set_reduce_op(static_cast<proto::ReduceOp>(old.reduce_op));
    key.set_prescale(old.prescale);
    key.set_postscale(old.postscale);
    key.set_compression(old.compression);
    const int fresh = NewBucket(key);
    Bucket& nb = buckets_.at(fresh);
    Bucket& ob = buckets_.at(id);
    nb.group = ob.group;
    const int64_t elem = static_cast<int64_t>(DataTypeSize(ob.dtype));
    nb.members = std::move(ready_members);
    nb.ready.assign(nb.members.size(), true);
    nb.ready_count = static_cast<int>(nb.members.size());
    for (const BucketMember& m : nb.members) nb.count += m.count;
    nb.bytes = nb.count * elem;
    ob.members = std::move(rest);
    ob.ready.assign(ob.members.size(), false);
    ob.ready_count = 0;
    ob.stuck_cycles = 0;
    ob.count = 0;
    for (const BucketMember& m : ob.members) ob.count += m.count;
    ob.bytes = ob.count * elem;
    Reindex(nb);
    Reindex(ob);
    changed_.push_back(id);
    split.push_back(fresh);
  }
  return split;
}

std::vector<int> BucketAssigner::TakeChanged() {
  std::vector<int> changed;
  changed.swap(changed_);
  return changed;
}

std::vector<std::string> BucketAssigner::TakeForgotten() {
  std::vector<std::string> forgotten;
  forgotten.swap(forgotten_);
  return forgotten;
}

void BucketAssigner::Reset(int id) {
  auto it = buckets_.find(id);
  if (it == buckets_.end()) return;
  Bucket& b = it->second;
  b.ready.assign(b.members.size(), false);
  b.ready_count = 0;
  b.stuck_cycles = 0;
}

}  // namespace terse
