#include "engine/coordinator.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "engine/agreement.h"

namespace terse {

Coordinator::Coordinator(int size) : size_(size), joined_(size, false) {}

absl::Status Coordinator::Add(int from, const proto::RequestList& list,
                              Clock::time_point now) {
  if (list.rank() != from) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", from, " sent a request list labelled rank ", list.rank()));
  }
  for (const proto::Request& request : list.requests()) {
    if (request.rank() != from) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", from, " sent a request labelled rank ",
                       request.rank(), " for '", request.name(), "'"));
    }
    absl::Status valid = ValidateRequest(request, size_);
    if (!valid.ok()) return valid;
    if (request.op() == proto::JOIN) {
      joined_[from] = true;
      last_joined_ = from;
      continue;
    }
    const double queued = std::max(0.0, request.queued_seconds());
    const Clock::time_point since =
        now - std::chrono::duration_cast<Clock::duration>(
                  std::chrono::duration<double>(std::min(queued, 1e9)));
    auto [it, inserted] = table_.try_emplace(request.name());
    Op& op = it->second;
    if (inserted) {
      op.by_rank.resize(size_);
      op.since = since;
      op.seq = next_seq_++;
      order_[op.seq] = request.name();
    }
    if (op.by_rank[from].has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", from, " requested '", request.name(), "' twice"));
    }
    op.by_rank[from] = request;
    op.since = std::min(op.since, since);
    ++op.received;
  }
  return absl::OkStatus();
}

void Coordinator::Complete(proto::ResponseList* out) {
  std::vector<int> joined_ranks = JoinedRanks();
  for (auto it = order_.begin(); it != order_.end();) {
    Op& op = table_.at(it->second);
    proto::OpType type = proto::ALLREDUCE;
    for (const auto& r : op.by_rank) {
      if (r.has_value()) {
        type = r->op();
        break;
      }
    }
    bool ready = true;
    std::vector<int> needed_joined;
    std::vector<const proto::Request*> requests(size_, nullptr);
    for (int r = 0; r < size_; ++r) {
      if (op.by_rank[r].has_value()) {
        requests[r] = &*op.by_rank[r];
      } else if (joined_[r]) {
        needed_joined.push_back(r);
      } else {
        ready = false;
      }
    }
    if (!ready) {
      ++it;
      continue;
    }
    if (type != proto::ALLREDUCE && !needed_joined.empty()) {
      proto::Response* response = out->add_responses();
      response->set_kind(proto::Response::ERROR);
      response->set_op(type);
      response->add_names(it->second);
      response->set_error(absl::StrCat(
          "tensor '", it->second, "': only allreduce can run while ranks ",
          "have joined, and rank", needed_joined.size() == 1 ? " " : "s ",
          RankList(needed_joined), needed_joined.size() == 1 ? " has" : " have",
          " joined"));
    } else {
      *out->add_responses() = BuildResponse(it->second, requests);
    }
    table_.erase(it->second);
    it = order_.erase(it);
  }
  if (static_cast<int>(joined_ranks.size()) == size_) {
    proto::Response* response = out->add_responses();
    response->set_kind(proto::Response::EXECUTE);
    response->set_op(proto::JOIN);
    response->set_last_joined_rank(last_joined_);
    std::fill(joined_.begin(), joined_.end(), false);
    last_joined_ = -1;
  }
}

std::vector<Coordinator::PendingOp> Coordinator::PendingOps() const {
  std::vector<PendingOp> ops;
  for (const auto& [seq, name] : order_) {
    const Op& op = table_.at(name);
    PendingOp p;
    p.name = name;
    p.since = op.since;
    for (int r = 0; r < size_; ++r) {
      if (op.by_rank[r].has_value()) p.submitted.push_back(r);
    }
    ops.push_back(std::move(p));
  }
  return ops;
}

std::vector<int> Coordinator::JoinedRanks() const {
  std::vector<int> ranks;
  for (int r = 0; r < size_; ++r) {
    if (joined_[r]) ranks.push_back(r);
  }
  return ranks;
}

}  // namespace terse
