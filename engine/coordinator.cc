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
  // Pass 1: the response of every op that every rank has sent (or, for an
  // allreduce, that the joined ranks stand in for), and how many of each
  // group's ops are among them.
  struct Ready {
    std::string name;
    std::string group;  // Request.group of the first rank that sent it.
    int32_t group_size = 0;
    proto::Response response;
  };
  std::vector<Ready> ready;
  absl::flat_hash_map<std::string, int> group_ready;
  for (const auto& [seq, name] : order_) {
    const Op& op = table_.at(name);
    std::vector<int> needed_joined;
    std::vector<const proto::Request*> requests(size_, nullptr);
    const proto::Request* first = nullptr;
    bool complete = true;
    for (int r = 0; r < size_; ++r) {
      if (op.by_rank[r].has_value()) {
        requests[r] = &*op.by_rank[r];
        if (first == nullptr) first = requests[r];
      } else if (joined_[r]) {
        needed_joined.push_back(r);
      } else {
        complete = false;
      }
    }
    if (!complete || first == nullptr) continue;
    Ready done;
    done.name = name;
    if (first->op() != proto::ALLREDUCE && !needed_joined.empty()) {
      proto::Response& response = done.response;
      response.set_kind(proto::Response::ERROR);
      response.set_op(first->op());
      response.add_names(name);
      response.set_error(absl::StrCat(
          "tensor '", name, "': only allreduce can run while ranks ",
          "have joined, and rank", needed_joined.size() == 1 ? " " : "s ",
          RankList(needed_joined), needed_joined.size() == 1 ? " has" : " have",
          " joined"));
    } else {
      done.response = BuildResponse(name, requests);
    }
    done.group = first->group();
    done.group_size = first->group_size();
    if (!done.group.empty() &&
        done.response.kind() == proto::Response::EXECUTE) {
      ++group_ready[done.group];
    }
    ready.push_back(std::move(done));
  }
  // A group fails as one: once one of its ops cannot run, none does (those
  // not ready yet fail when they are).
  for (const Ready& done : ready) {
    if (done.group.empty() || done.response.kind() != proto::Response::ERROR ||
        failed_groups_.contains(done.group)) {
      continue;
    }
    failed_groups_[done.group] =
        FailedGroup{done.response.error(), done.group_size};
  }
  // Pass 2: answer in order of first request; a group's ops once all of
  // them are ready, so that they are answered in the same cycle.
  for (Ready& done : ready) {
    if (!done.group.empty()) {
      auto failed = failed_groups_.find(done.group);
      if (failed == failed_groups_.end()) {
        if (group_ready[done.group] < done.group_size) continue;  // Held.
      } else {
        if (done.response.kind() == proto::Response::EXECUTE) {
          const proto::OpType type = done.response.op();
          done.response.Clear();
          done.response.set_kind(proto::Response::ERROR);
          done.response.set_op(type);
          done.response.add_names(done.name);
          done.response.set_error(
              absl::StrCat("tensor '", done.name, "': its group '", done.group,
                           "' failed: ", failed->second.error));
        }
        if (--failed->second.remaining <= 0) failed_groups_.erase(failed);
      }
    }
    *out->add_responses() = std::move(done.response);
    order_.erase(table_.at(done.name).seq);
    table_.erase(done.name);
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
