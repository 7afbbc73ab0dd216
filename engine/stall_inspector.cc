#include "engine/stall_inspector.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/agreement.h"

namespace terse {
namespace {

constexpr int kMaxListed = 20;

std::string Label(const std::string& name) {
  if (absl::StartsWith(name, "__terse.barrier.")) return "barrier";
  if (absl::StartsWith(name, "__terse.")) return name.substr(8);
  return absl::StrCat("tensor '", name, "'");
}

}  // namespace

StallInspector::StallInspector(int size, double check_seconds,
                               double shutdown_seconds)
    : size_(size),
      check_seconds_(check_seconds),
      shutdown_seconds_(shutdown_seconds) {}

std::string StallInspector::Describe(
    const std::vector<Coordinator::PendingOp>& pending,
    const std::vector<int>& joined, Clock::time_point now,
    double threshold) const {
  std::string out;
  int listed = 0;
  int more = 0;
  for (const Coordinator::PendingOp& op : pending) {
    const double waited = SecondsBetween(op.since, now);
    if (waited < threshold) continue;
    std::vector<int> missing;
    for (int r = 0; r < size_; ++r) {
      if (!std::binary_search(op.submitted.begin(), op.submitted.end(), r) &&
          std::find(joined.begin(), joined.end(), r) == joined.end()) {
        missing.push_back(r);
      }
    }
    if (missing.empty()) continue;
    if (listed == kMaxListed) {
      ++more;
      continue;
    }
    ++listed;
    absl::StrAppend(&out, out.empty() ? "" : "; ", Label(op.name),
                    " submitted by rank", op.submitted.size() == 1 ? " " : "s ",
                    RankList(op.submitted), " but not by rank",
                    missing.size() == 1 ? " " : "s ", RankList(missing),
                    absl::StrFormat(" (waiting %.1f s)", waited));
  }
  if (more > 0) absl::StrAppend(&out, "; and ", more, " more");
  return out;
}

StallInspector::Verdict StallInspector::Inspect(
    const std::vector<Coordinator::PendingOp>& pending,
    const std::vector<int>& joined, Clock::time_point now) {
  Verdict verdict;
  if (pending.empty()) return verdict;
  if (shutdown_seconds_ > 0) {
    if (!Describe(pending, joined, now, shutdown_seconds_).empty()) {
      // Every pending op fails, so list all of them, whatever their age.
      const std::string list = Describe(pending, joined, now, 0);
      verdict.shutdown = absl::DeadlineExceededError(
          absl::StrCat("stalled for more than ", shutdown_seconds_,
                       " s (TERSE_STALL_SHUTDOWN_SECONDS): ", list));
    }
  }
  if (check_seconds_ > 0 &&
      (!warned_ || SecondsBetween(last_warning_, now) >= check_seconds_)) {
    std::string list = Describe(pending, joined, now, check_seconds_);
    if (!list.empty()) {
      verdict.warning = absl::StrCat(
          "stalled operations (waiting more than ", check_seconds_,
          " s; TERSE_STALL_CHECK_SECONDS): ", list,
          ". A rank may have failed, or ranks submit different tensors.");
      warned_ = true;
      last_warning_ = now;
    }
  }
  return verdict;
}

}  // namespace terse
