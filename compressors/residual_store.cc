#include "compressors/residual_store.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace terse {

std::string ResidualStore::KeyOf(const std::string& name, int64_t tensor_offset,
                                 int64_t count) {
  return absl::StrCat(name, "#", tensor_offset, "+", count);
}

absl::StatusOr<std::vector<Segment>> ResidualStore::SegmentsOf(
    const CompressContext& ctx, int64_t d) {
  std::vector<Segment> segments;
  if (ctx.segments.empty()) {
    Segment whole;
    whole.name = StateKey(ctx);
    whole.count = d;
    segments.push_back(std::move(whole));
    return segments;
  }
  segments.assign(ctx.segments.begin(), ctx.segments.end());
  for (const Segment& s : segments) {
    if (s.offset < 0 || s.count < 0 || s.offset > d || s.count > d - s.offset ||
        s.tensor_offset < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("segment '", s.name, "' [", s.offset, ", +", s.count,
                       ") is outside the bucket of ", d, " elements"));
    }
  }
  std::sort(
      segments.begin(), segments.end(),
      [](const Segment& a, const Segment& b) { return a.offset < b.offset; });
  for (size_t i = 1; i < segments.size(); ++i) {
    if (segments[i].offset < segments[i - 1].offset + segments[i - 1].count) {
      return absl::InvalidArgumentError("segments overlap");
    }
  }
  return segments;
}

void ResidualStore::AddTo(absl::Span<float> a,
                          const std::vector<Segment>& segments) const {
  absl::MutexLock lock(&mu_);
  for (const Segment& s : segments) {
    auto it = residuals_.find(KeyOf(s.name, s.tensor_offset, s.count));
    if (it == residuals_.end()) continue;
    const float* r = it->second.values.data();
    float* out = a.data() + s.offset;
    for (int64_t i = 0; i < s.count; ++i) out[i] += r[i];
  }
}

void ResidualStore::Store(const std::vector<Segment>& segments,
                          absl::Span<const float> a,
                          absl::Span<const float> sent) {
  absl::MutexLock lock(&mu_);
  for (const Segment& s : segments) {
    Entry& e = residuals_[KeyOf(s.name, s.tensor_offset, s.count)];
    e.name = s.name;
    e.tensor_offset = s.tensor_offset;
    e.values.resize(s.count);
    for (int64_t i = 0; i < s.count; ++i) {
      e.values[i] = a[s.offset + i] - sent[s.offset + i];
    }
  }
}

void ResidualStore::Accumulate(absl::Span<float> a,
                               const std::vector<Segment>& segments,
                               float decay) {
  absl::MutexLock lock(&mu_);
  for (const Segment& s : segments) {
    Entry& e = residuals_[KeyOf(s.name, s.tensor_offset, s.count)];
    float* x = a.data() + s.offset;
    if (e.values.empty()) {
      e.name = s.name;
      e.tensor_offset = s.tensor_offset;
      e.values.assign(x, x + s.count);
      continue;
    }
    float* r = e.values.data();
    for (int64_t i = 0; i < s.count; ++i) {
      r[i] = decay * r[i] + x[i];
      x[i] = r[i];
    }
  }
}

void ResidualStore::ClearSent(const std::vector<Segment>& segments,
                              absl::Span<const float> sent) {
  absl::MutexLock lock(&mu_);
  for (const Segment& s : segments) {
    auto it = residuals_.find(KeyOf(s.name, s.tensor_offset, s.count));
    if (it == residuals_.end()) continue;
    float* r = it->second.values.data();
    const float* x = sent.data() + s.offset;
    for (int64_t i = 0; i < s.count; ++i) {
      if (x[i] != 0.0f) r[i] = 0.0f;
    }
  }
}

void ResidualStore::Erase(const std::vector<Segment>& segments) {
  absl::MutexLock lock(&mu_);
  for (const Segment& s : segments) {
    residuals_.erase(KeyOf(s.name, s.tensor_offset, s.count));
  }
}

int64_t ResidualStore::EraseNames(const std::vector<std::string>& names) {
  if (names.empty()) return 0;
  const absl::flat_hash_set<std::string> drop(names.begin(), names.end());
  absl::MutexLock lock(&mu_);
  int64_t dropped = 0;
  for (auto it = residuals_.begin(); it != residuals_.end();) {
    if (drop.contains(it->second.name)) {
      residuals_.erase(it++);
      ++dropped;
    } else {
      ++it;
    }
  }
  return dropped;
}

std::vector<float> ResidualStore::Residual(const std::string& name,
                                           int64_t tensor_offset,
                                           int64_t count) const {
  absl::MutexLock lock(&mu_);
  auto it = residuals_.find(KeyOf(name, tensor_offset, count));
  if (it == residuals_.end()) return std::vector<float>(count, 0.0f);
  return it->second.values;
}

int64_t ResidualStore::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(residuals_.size());
}

void ResidualStore::Clear() {
  absl::MutexLock lock(&mu_);
  residuals_.clear();
}

std::vector<ResidualStore::Entry> ResidualStore::Export() const {
  absl::MutexLock lock(&mu_);
  std::vector<Entry> out;
  for (const auto& [key, entry] : residuals_) out.push_back(entry);
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.name, a.tensor_offset) <
           std::tie(b.name, b.tensor_offset);
  });
  return out;
}

void ResidualStore::Import(std::vector<Entry> entries) {
  absl::MutexLock lock(&mu_);
  residuals_.clear();
  for (Entry& e : entries) {
    std::string key =
        KeyOf(e.name, e.tensor_offset, static_cast<int64_t>(e.values.size()));
    residuals_[std::move(key)] = std::move(e);
  }
}

absl::Status ResidualStore::WithEntries(
    absl::FunctionRef<absl::Status(const std::vector<const Entry*>&)> fn)
    const {
  absl::MutexLock lock(&mu_);
  std::vector<const Entry*> out;
  out.reserve(residuals_.size());
  for (const auto& [key, entry] : residuals_) out.push_back(&entry);
  std::sort(out.begin(), out.end(), [](const Entry* a, const Entry* b) {
    return std::tie(a->name, a->tensor_offset) <
           std::tie(b->name, b->tensor_offset);
  });
  return fn(out);
}

}  // namespace terse
