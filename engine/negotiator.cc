#include "engine/negotiator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace terse {
namespace {

constexpr uint64_t kNothingToSend = 1u << 0;
constexpr uint64_t kNotShuttingDown = 1u << 1;
constexpr uint64_t kNoError = 1u << 2;
constexpr uint64_t kJoined = 1u << 3;

// How often rank 0 looks for stalled ops.
constexpr double kInspectionSeconds = 0.1;

// Grouped ops always go to the coordinator, which answers a group as one.
bool Cacheable(const proto::Request& request) {
  return (request.op() == proto::ALLREDUCE ||
          request.op() == proto::BROADCAST ||
          request.op() == proto::ALLGATHER) &&
         request.group().empty();
}

absl::Status StatusFrom(int32_t code, const std::string& message) {
  absl::StatusCode c = static_cast<absl::StatusCode>(code);
  if (c == absl::StatusCode::kOk || code < 0 || code > 16) {
    c = absl::StatusCode::kUnknown;
  }
  return absl::Status(c, message);
}

}  // namespace

Negotiator::Negotiator(Communicator* comm, const NegotiatorOptions& options)
    : comm_(comm),
      options_(options),
      rank_(comm->rank()),
      size_(comm->size()),
      words_((std::max<int64_t>(options.cache_capacity, 0) + 63) / 64),
      cache_(options.cache_capacity) {
  if (rank_ == 0) {
    coordinator_ = std::make_unique<Coordinator>(size_);
    inspector_ = std::make_unique<StallInspector>(
        size_, options.stall_check_seconds, options.stall_shutdown_seconds);
  }
}

Negotiator::~Negotiator() = default;

absl::Status Negotiator::Submit(proto::Request request,
                                Clock::time_point enqueued) {
  const std::string name = request.name();
  if (local_.contains(name)) {
    return absl::InternalError(
        absl::StrCat("negotiator: '", name, "' submitted twice"));
  }
  if (request.op() == proto::JOIN) joined_ = true;
  Local& local = local_[name];
  local.request = std::move(request);
  local.enqueued = enqueued;
  new_.push_back(name);
  return absl::OkStatus();
}

void Negotiator::Uncache(int64_t slot) {
  auto it = slot_owner_.find(slot);
  if (it == slot_owner_.end()) return;
  Local& local = local_.at(it->second);
  local.state = State::kToSend;
  local.slot = -1;
  to_send_.push_back(it->second);
  slot_owner_.erase(it);
}

absl::StatusOr<CycleOutcome> Negotiator::RunCycle(
    bool shutdown, const absl::Status& local_error) {
  ++cycles_;
  const Clock::time_point now = Clock::now();
  CycleOutcome outcome;

  if (inspector_ != nullptr && now >= next_inspection_) {
    next_inspection_ =
        now + std::chrono::duration_cast<Clock::duration>(
                  std::chrono::duration<double>(kInspectionSeconds));
    StallInspector::Verdict verdict = inspector_->Inspect(
        coordinator_->PendingOps(), coordinator_->JoinedRanks(), now);
    outcome.stall_warning = std::move(verdict.warning);
    if (!verdict.shutdown.ok() && stall_error_.ok()) {
      stall_error_ = verdict.shutdown;
    }
  }
  const absl::Status error = !local_error.ok() ? local_error : stall_error_;

  // 1. Classify newly submitted ops.
  std::vector<int64_t> invalid;
  for (const std::string& name : new_) {
    Local& local = local_.at(name);
    if (Cacheable(local.request)) {
      const int64_t slot = cache_.Find(name);
      if (slot >= 0 && cache_.Matches(slot, local.request)) {
        local.state = State::kCached;
        local.slot = slot;
        local.cached_since = now;
        slot_owner_[slot] = name;
        continue;
      }
      if (slot >= 0) invalid.push_back(slot);
    }
    local.state = State::kToSend;
    to_send_.push_back(name);
  }
  new_.clear();
  if (options_.stall_check_seconds > 0) {
    // Half the check time, so that the op is in the coordinator's table (with
    // its age) when the stall inspector looks.
    for (const auto& [slot, name] : slot_owner_) {
      if (SecondsBetween(local_.at(name).cached_since, now) >
          options_.stall_check_seconds / 2) {
        invalid.push_back(slot);
      }
    }
  }

  // 2. One AND over flags, ready bits and valid bits.
  std::vector<uint64_t> words(1 + 2 * words_, 0);
  uint64_t* ready = words.data() + 1;
  uint64_t* valid = ready + words_;
  words[0] = (to_send_.empty() ? kNothingToSend : 0) |
             (shutdown ? 0 : kNotShuttingDown) | (error.ok() ? kNoError : 0) |
             (joined_ ? kJoined : 0);
  for (const auto& [slot, name] : slot_owner_) {
    ready[slot / 64] |= uint64_t{1} << (slot % 64);
  }
  if (joined_) {
    for (int64_t slot = 0; slot < cache_.capacity(); ++slot) {
      if (cache_.occupied(slot) &&
          cache_.response(slot).op() == proto::ALLREDUCE) {
        ready[slot / 64] |= uint64_t{1} << (slot % 64);
      }
    }
  }
  std::fill(valid, valid + words_, ~uint64_t{0});
  for (int64_t slot : invalid)
    valid[slot / 64] &= ~(uint64_t{1} << (slot % 64));
  TERSE_RETURN_IF_ERROR(
      comm_->BitwiseAnd(words.data(), static_cast<int64_t>(words.size())));

  // 3. Evict invalidated slots, then execute the ready ones from the cache.
  bool any_invalid = false;
  for (int64_t w = 0; w < words_; ++w) {
    uint64_t cleared = ~valid[w];
    while (cleared != 0) {
      const int bit = __builtin_ctzll(cleared);
      cleared &= cleared - 1;
      const int64_t slot = w * 64 + bit;
      if (slot >= cache_.capacity()) continue;
      any_invalid = true;
      Uncache(slot);
      cache_.Erase(slot);
    }
  }
  outcome.responses.reserve(slot_owner_.size());
  if ((words[0] & kJoined) == 0) {  // Not every rank has joined.
    for (int64_t w = 0; w < words_; ++w) {
      uint64_t bits = ready[w] & valid[w];
      while (bits != 0) {
        const int bit = __builtin_ctzll(bits);
        bits &= bits - 1;
        const int64_t slot = w * 64 + bit;
        if (!cache_.occupied(slot)) continue;
        cache_.Touch(slot);
        outcome.responses.push_back(cache_.response(slot));
        auto owner = slot_owner_.find(slot);
        if (owner != slot_owner_.end()) {
          local_.erase(owner->second);
          slot_owner_.erase(owner);
        }
      }
    }
  }

  // 4. The coordinator, only when someone needs it.
  const uint64_t needed = kNothingToSend | kNotShuttingDown | kNoError;
  if ((words[0] & needed) != needed || any_invalid) {
    TERSE_RETURN_IF_ERROR(CoordinatorRound(shutdown, error, now, &outcome));
  }
  return outcome;
}

absl::Status Negotiator::CoordinatorRound(bool shutdown,
                                          const absl::Status& error,
                                          Clock::time_point now,
                                          CycleOutcome* outcome) {
  ++coordinator_rounds_;
  proto::RequestList list;
  list.set_rank(rank_);
  for (const std::string& name : to_send_) {
    Local& local = local_.at(name);
    proto::Request* request = list.add_requests();
    *request = local.request;
    request->set_queued_seconds(SecondsBetween(local.enqueued, now));
    local.state = State::kSent;
    ++requests_sent_;
  }
  to_send_.clear();
  list.set_shutdown(shutdown);
  if (!error.ok()) {
    list.set_error(std::string(error.message()));
    list.set_error_code(static_cast<int32_t>(error.code()));
  }
  const std::string mine = list.SerializeAsString();
  std::vector<uint8_t> lists;
  std::vector<int64_t> sizes;
  TERSE_RETURN_IF_ERROR(comm_->AllgathervUnknownSizes(
      mine.data(), static_cast<int64_t>(mine.size()), &lists, &sizes));

  std::string wire;
  if (rank_ == 0) wire = Coordinate(lists, sizes, now);
  int64_t wire_size = static_cast<int64_t>(wire.size());
  TERSE_RETURN_IF_ERROR(comm_->Broadcast(&wire_size, sizeof(wire_size), 0));
  if (wire_size < 0 || wire_size > (int64_t{1} << 34)) {
    return absl::DataLossError(
        absl::StrCat("negotiation: rank 0 announced a response list of ",
                     wire_size, " bytes"));
  }
  wire.resize(static_cast<size_t>(wire_size));
  TERSE_RETURN_IF_ERROR(comm_->Broadcast(wire.data(), wire_size, 0));
  proto::ResponseList responses;
  if (!responses.ParseFromString(wire)) {
    return absl::DataLossError(
        "negotiation: malformed response list from rank 0");
  }

  for (proto::Response& response : *responses.mutable_responses()) {
    if (ResponseCache::Cacheable(response)) {
      int64_t evicted = -1;
      cache_.Put(response, &evicted);
      if (evicted >= 0) Uncache(evicted);
    }
    if (response.op() == proto::JOIN &&
        response.kind() == proto::Response::EXECUTE) {
      joined_ = false;
      local_.erase(kJoinName);
    }
    for (const std::string& name : response.names()) {
      auto it = local_.find(name);
      if (it != local_.end() && it->second.state == State::kSent) {
        local_.erase(it);
      }
    }
    outcome->responses.push_back(std::move(response));
  }
  outcome->shutdown = responses.shutdown();
  if (!responses.error().empty()) {
    outcome->error = StatusFrom(responses.error_code(), responses.error());
  }
  return absl::OkStatus();
}

std::string Negotiator::Coordinate(const std::vector<uint8_t>& lists,
                                   const std::vector<int64_t>& sizes,
                                   Clock::time_point now) {
  proto::ResponseList out;
  absl::Status first_error;
  int64_t offset = 0;
  for (int r = 0; r < size_; ++r) {
    proto::RequestList list;
    const bool parsed =
        list.ParseFromArray(lists.data() + offset, static_cast<int>(sizes[r]));
    offset += sizes[r];
    absl::Status status;
    if (!parsed) {
      status = absl::DataLossError(
          absl::StrCat("rank ", r, " sent a malformed request list"));
    } else {
      if (list.shutdown()) out.set_shutdown(true);
      if (!list.error().empty()) {
        status = StatusFrom(list.error_code(), list.error());
      } else {
        status = coordinator_->Add(r, list, now);
      }
    }
    if (!status.ok() && first_error.ok()) first_error = status;
  }
  coordinator_->Complete(&out);
  if (!first_error.ok()) {
    out.set_error(std::string(first_error.message()));
    out.set_error_code(static_cast<int32_t>(first_error.code()));
  }
  return out.SerializeAsString();
}

}  // namespace terse
