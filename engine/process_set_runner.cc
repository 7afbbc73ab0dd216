#include "engine/process_set_runner.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status.h"
#include "compressors/registry.h"
#include "engine/exchange.h"

namespace terse {

std::vector<int> AllRanks(int size) {
  std::vector<int> ranks(std::max(size, 0));
  for (int i = 0; i < size; ++i) ranks[i] = i;
  return ranks;
}

absl::Status CheckProcessSets(const std::vector<std::vector<int>>& sets,
                              int size) {
  for (size_t i = 0; i < sets.size(); ++i) {
    absl::Status valid = CheckSubgroupRanks(sets[i], size);
    if (!valid.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("process set [", absl::StrJoin(sets[i], ","),
                       "]: ", valid.message()));
    }
    if (static_cast<int>(sets[i].size()) == size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "process set [", absl::StrJoin(sets[i], ","),
          "] holds every rank: that is the global process set, which always ",
          "exists"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (sets[j] == sets[i]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "process set [", absl::StrJoin(sets[i], ","), "] is given twice"));
      }
    }
  }
  return absl::OkStatus();
}

ProcessSetRunner::ProcessSetRunner(int32_t id, std::vector<int> world_ranks,
                                   Communicator* comm,
                                   std::unique_ptr<Communicator> owned,
                                   const RunnerContext* context,
                                   ProcessSetHost* host)
    : id_(id),
      world_ranks_(std::move(world_ranks)),
      owned_comm_(std::move(owned)),
      comm_(comm),
      rank_(comm->rank()),
      size_(comm->size()),
      context_(context),
      host_(host),
      negotiator_(comm_,
                  NegotiatorOptions{context->config->cache_capacity,
                                    context->config->stall_check_seconds,
                                    context->config->stall_shutdown_seconds}),
      buckets_(
          context->config->fusion_threshold_bytes, context->solo_bytes,
          [config = *context->config](const std::string& name,
                                      const std::string& spec) {
            // Tensors under different compression policies never share a
            // bucket, so each bucket has one policy (the per-call spec, when
            // given, else the name rules).
            const CompressionChoice c =
                ChooseCompressionFor(name, spec, config);
            return absl::StrCat(c.name, ":", c.cf);
          },
          [config = *context->config](const std::string& name,
                                      const std::string& spec) {
            // Dense tensors are reduced alone in place, and so are those of
            // GraVAC's portfolio, where dense is a candidate: when it is
            // chosen the bucket reduces in place, and a large tensor alone
            // overlaps the backward pass of the layers before it (fused,
            // the MLP's 7.4 MB bucket cost 12% a step over dense at an
            // unlimited rate). A static compressor copies into its buffer
            // anyway, and batches its tensors' rounds.
            const std::string policy =
                ChooseCompressionFor(name, spec, config).name;
            return policy == "none" || policy == "gravac";
          },
          context->config->forget_after_steps),
      reducer_(*context->config, rank_, size_),
      executor_(
          comm_, &reducer_, context->timeline,
          PipelineChunkFor(context->config->pipeline_chunk_bytes, *comm_)) {}

ProcessSetRunner::~ProcessSetRunner() = default;

void ProcessSetRunner::AwaitedNames(
    std::vector<std::pair<int32_t, std::string>>* out) const {
  absl::flat_hash_set<int> seen;
  for (const auto& [name, entry] : in_flight_) {
    if (entry.op != proto::ALLREDUCE) continue;
    const int id = buckets_.BucketOf(name);
    if (id < 0 || !buckets_.exists(id) || !seen.insert(id).second) continue;
    for (const BucketMember& m : buckets_.bucket(id).members) {
      if (!in_flight_.contains(m.name)) out->emplace_back(id_, m.name);
    }
  }
}

void ProcessSetRunner::Submit(TensorEntry entry) {
  absl::Status submitted =
      negotiator_.Submit(MakeRequest(entry, rank_), entry.enqueued);
  const std::string name = entry.name;
  in_flight_[name] = std::move(entry);
  if (!submitted.ok()) Finish(name, submitted);
}

absl::Status ProcessSetRunner::Cycle(bool shutdown,
                                     const absl::Status& local_error,
                                     CycleOutcome* outcome) {
  const std::string what =
      id_ == 0 ? std::string("negotiation")
               : absl::StrCat("negotiation of process set ", id_);
  absl::StatusOr<CycleOutcome> result = [&] {
    StallGuard::Phase phase(context_->stall_guard, what);
    return negotiator_.RunCycle(shutdown, local_error);
  }();
  if (!result.ok()) return result.status();
  *outcome = *std::move(result);
  if (!outcome->stall_warning.empty() && id_ != 0) {
    outcome->stall_warning = Labelled(outcome->stall_warning);
  }
  Execute(outcome->responses);
  return absl::OkStatus();
}

absl::Status ProcessSetRunner::TakeLocalError() {
  absl::Status error = std::move(local_error_);
  local_error_ = absl::OkStatus();
  return error;
}

void ProcessSetRunner::NoteError(const absl::Status& status) {
  if (!status.ok() && local_error_.ok()) local_error_ = status;
}

std::string ProcessSetRunner::Labelled(const std::string& error) const {
  const std::vector<int> set_ranks = AllRanks(size_);
  return absl::StrCat(
      "process set ", id_, " (world ranks ", absl::StrJoin(world_ranks_, ","),
      "; the ranks below are ", "ranks within the set, ",
      absl::StrJoin(set_ranks, ","), " in that order): ", error);
}

void ProcessSetRunner::FailAll(const absl::Status& status) {
  std::vector<std::string> names;
  names.reserve(in_flight_.size());
  for (const auto& [name, entry] : in_flight_) names.push_back(name);
  FinishAll(names, status);
}

void ProcessSetRunner::Execute(const std::vector<proto::Response>& responses) {
  const Clock::time_point ready_at = Clock::now();
  std::vector<const proto::Response*> ready;
  std::vector<const proto::Response*> others;
  std::vector<int> complete;
  for (const proto::Response& r : responses) {
    if (r.op() != proto::JOIN && r.names_size() != 1) {
      // Every response this engine's coordinator builds names one op.
      NoteError(absl::DataLossError(
          "negotiation: a response from rank 0 does not name one op"));
      continue;
    }
    if (r.kind() == proto::Response::ERROR) {
      for (const std::string& name : r.names()) {
        Finish(name, absl::InvalidArgumentError(
                         id_ == 0 ? r.error() : Labelled(r.error())));
        for (int id : buckets_.Remove(name)) complete.push_back(id);
      }
    } else if (r.op() == proto::ALLREDUCE) {
      std::vector<int64_t> shape(r.shape().begin(), r.shape().end());
      if (ShapeElements(shape) < 0 || !IsValidDataType(r.dtype())) {
        NoteError(absl::DataLossError(
            "negotiation: malformed allreduce response from rank 0"));
        continue;
      }
      ready.push_back(&r);
    } else {
      others.push_back(&r);
    }
  }
  for (int id : buckets_.OnReady(ready)) complete.push_back(id);
  for (int id : buckets_.Tick(context_->stuck_limit)) complete.push_back(id);
  for (int id : buckets_.TakeChanged()) {
    executor_.Forget(id);
    if (device_ != nullptr) device_->Forget(id);
  }
  executor_.ForgetTensors(buckets_.TakeForgotten());
  if (id_ == 0) host_->BeforeCompletions(*this);
  std::vector<int> seen;
  for (int id : complete) {
    // A bucket may be reported twice (a member failed, then the rest became
    // ready) or have changed since; run each complete bucket once.
    if (std::find(seen.begin(), seen.end(), id) != seen.end() ||
        !buckets_.exists(id) || !buckets_.bucket(id).complete()) {
      continue;
    }
    seen.push_back(id);
    RunBucket(id, ready_at);
  }
  for (const proto::Response* r : others) {
    switch (r->op()) {
      case proto::BROADCAST:
        RunBroadcast(*r, ready_at);
        break;
      case proto::ALLGATHER:
        RunAllgather(*r, ready_at);
        break;
      case proto::ALLTOALL:
      case proto::REDUCESCATTER:
        RunExchange(*r, ready_at);
        break;
      case proto::BARRIER:
        if (id_ == 0 && r->names(0).rfind("__terse.process_set.", 0) == 0) {
          host_->ProcessSetChange(*r);
        }
        Finish(r->names(0), absl::OkStatus());
        break;
      case proto::JOIN:
        host_->Joined(r->last_joined_rank());
        Finish(kJoinName, absl::OkStatus());
        break;
      default:
        break;
    }
  }
}

void ProcessSetRunner::RunBucket(int id, Clock::time_point ready_at) {
  host_->CountBucketRun();  // Before the ops complete (see Execute).
  const Bucket& bucket = buckets_.bucket(id);
  std::vector<const TensorEntry*> entries(bucket.members.size(), nullptr);
  for (size_t i = 0; i < entries.size(); ++i) {
    auto it = in_flight_.find(bucket.members[i].name);
    if (it != in_flight_.end() && it->second.op == proto::ALLREDUCE &&
        it->second.input.count == bucket.members[i].count &&
        it->second.input.dtype == bucket.dtype) {
      entries[i] = &it->second;
    }
  }
  // Even after a local error this rank takes part, so that no peer blocks in
  // the collective; the error reaches every rank in the next cycle.
  std::shared_ptr<Event> done;
  const std::string subject =
      id_ == 0 ? absl::StrCat(id) : absl::StrCat(id, " of process set ", id_);
  absl::Status status = [&] {
    StallGuard::Phase phase(context_->stall_guard, "allreduce of bucket ",
                            subject);
    if (bucket.device_kind == static_cast<int32_t>(Device::Kind::kCpu)) {
      return executor_.Run(bucket, entries, ready_at);
    }
    if (device_ == nullptr) {
      return absl::InternalError(absl::StrCat(
          "process set ", id_, ": a device bucket on a non-global set"));
    }
    return device_->RunBucket(bucket, entries, ready_at, context_->timeline,
                              &done);
  }();
  NoteError(status);
  std::vector<std::string> names;
  names.reserve(bucket.members.size());
  for (const BucketMember& m : bucket.members) names.push_back(m.name);
  buckets_.Reset(id);
  FinishAll(names, status, std::move(done));
}

void ProcessSetRunner::RunBroadcast(const proto::Response& r,
                                    Clock::time_point ready_at) {
  const std::string& name = r.names(0);
  StallGuard::Phase phase(context_->stall_guard, "broadcast of ", name);
  const Clock::time_point start = Clock::now();
  std::vector<int64_t> shape(r.shape().begin(), r.shape().end());
  const int64_t count = ShapeElements(shape);
  if (count < 0 || !IsValidDataType(r.dtype()) || r.root_rank() < 0 ||
      r.root_rank() >= size_) {
    Finish(name, absl::DataLossError(absl::StrCat(
                     "tensor '", name, "': malformed broadcast response")));
    return;
  }
  const int64_t bytes =
      count *
      static_cast<int64_t>(DataTypeSize(static_cast<DataType>(r.dtype())));
  auto it = in_flight_.find(name);
  const bool local = it != in_flight_.end() &&
                     it->second.input.bytes() == bytes &&
                     it->second.op == proto::BROADCAST;
  if (r.device_kind() != static_cast<int32_t>(Device::Kind::kCpu)) {
    std::shared_ptr<Event> done;
    absl::Status status =
        device_ == nullptr
            ? absl::InternalError("a device broadcast on a non-global set")
            : device_->RunBroadcast(static_cast<Device::Kind>(r.device_kind()),
                                    local ? &it->second : nullptr, bytes,
                                    r.root_rank(), &done);
    NoteError(status);
    Finish(name, status, {}, std::move(done));
    return;
  }
  std::vector<uint8_t> scratch;
  void* buffer = nullptr;
  if (it != in_flight_.end() && it->second.input.bytes() == bytes) {
    buffer = it->second.input.data;
  } else {
    scratch.resize(bytes);  // No local op: take part without one.
    buffer = scratch.data();
  }
  absl::Status status = comm_->Broadcast(buffer, bytes, r.root_rank());
  NoteError(status);
  if (context_->timeline != nullptr) {
    const std::string track = absl::StrCat("broadcast ", name);
    const Clock::time_point enqueued =
        it != in_flight_.end() ? it->second.enqueued : ready_at;
    context_->timeline->Record(track, "NEGOTIATE", enqueued, ready_at);
    context_->timeline->Record(track, "QUEUE", ready_at, start);
    context_->timeline->Record(track, "COMMUNICATE", start, Clock::now(),
                               {{"bytes", absl::StrCat(bytes)},
                                {"root", absl::StrCat(r.root_rank())}});
  }
  Finish(name, status);
}

void ProcessSetRunner::RunAllgather(const proto::Response& r,
                                    Clock::time_point ready_at) {
  const std::string& name = r.names(0);
  StallGuard::Phase phase(context_->stall_guard, "allgather of ", name);
  const Clock::time_point start = Clock::now();
  auto malformed = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat(
        "tensor '", name, "': malformed allgather response: ", why));
  };
  if (r.tensor_sizes_size() != size_ || r.shape_size() == 0 ||
      !IsValidDataType(r.dtype())) {
    Finish(name, malformed("sizes"));
    return;
  }
  std::vector<int64_t> row_shape(r.shape().begin() + 1, r.shape().end());
  const int64_t row = ShapeElements(row_shape);
  const DataType dtype = static_cast<DataType>(r.dtype());
  const int64_t elem = static_cast<int64_t>(DataTypeSize(dtype));
  std::vector<int64_t> recv_bytes(size_);
  int64_t total = 0;
  for (int i = 0; i < size_; ++i) {
    const int64_t d = r.tensor_sizes(i);
    if (row < 0 || d < 0 || (row > 0 && d > (int64_t{1} << 40) / row / elem)) {
      Finish(name, malformed("first dimensions"));
      return;
    }
    recv_bytes[i] = d * row * elem;
    total += recv_bytes[i];
  }
  AllgatherResult result;
  result.data.resize(total);
  result.dtype = dtype;
  result.shape.assign(r.shape().begin(), r.shape().end());
  result.first_dims.assign(r.tensor_sizes().begin(), r.tensor_sizes().end());
  auto it = in_flight_.find(name);
  std::vector<uint8_t> scratch;
  const void* send = nullptr;
  const bool local =
      it != in_flight_.end() && it->second.input.bytes() == recv_bytes[rank_];
  if (local) {
    send = it->second.input.data;
  } else {
    scratch.resize(recv_bytes[rank_]);  // Take part without a local op.
    send = scratch.data();
  }
  absl::Status status;
  if (r.device_kind() != static_cast<int32_t>(Device::Kind::kCpu)) {
    status =
        device_ == nullptr
            ? absl::InternalError("a device allgather on a non-global set")
            : device_->RunAllgather(static_cast<Device::Kind>(r.device_kind()),
                                    local ? &it->second : nullptr, recv_bytes,
                                    result.data.data());
  } else {
    // The sizes come from the negotiated response, alike on every rank.
    status = comm_->AllgathervAgreedSizes(send, result.data.data(), recv_bytes);
  }
  NoteError(status);
  if (context_->timeline != nullptr) {
    const std::string track = absl::StrCat("allgather ", name);
    const Clock::time_point enqueued =
        it != in_flight_.end() ? it->second.enqueued : ready_at;
    context_->timeline->Record(track, "NEGOTIATE", enqueued, ready_at);
    context_->timeline->Record(track, "QUEUE", ready_at, start);
    context_->timeline->Record(track, "COMMUNICATE", start, Clock::now(),
                               {{"bytes", absl::StrCat(total)}});
  }
  Finish(name, status, std::move(result));
}

void ProcessSetRunner::RunExchange(const proto::Response& r,
                                   Clock::time_point ready_at) {
  const std::string& name = r.names(0);
  const bool alltoall = r.op() == proto::ALLTOALL;
  const char* op = alltoall ? "alltoall" : "reducescatter";
  StallGuard::Phase phase(context_->stall_guard, absl::StrCat(op, " of "),
                          name);
  const Clock::time_point start = Clock::now();
  auto it = in_flight_.find(name);
  const TensorEntry* entry =
      it != in_flight_.end() && it->second.op == r.op() ? &it->second : nullptr;
  absl::StatusOr<AllgatherResult> result =
      r.device_kind() != static_cast<int32_t>(Device::Kind::kCpu)
          ? absl::InternalError(absl::StrCat("tensor '", name, "': a device ",
                                             op, " reached the runner"))
      : alltoall ? RunAlltoall(comm_, r, entry)
                 : RunReducescatter(comm_, r, entry);
  // A malformed response fails before any communication; only a failed
  // collective is this rank's error for every rank.
  if (!result.ok() && !absl::IsDataLoss(result.status())) {
    NoteError(result.status());
  }
  if (context_->timeline != nullptr) {
    const std::string track = absl::StrCat(op, " ", name);
    const Clock::time_point enqueued =
        entry != nullptr ? entry->enqueued : ready_at;
    context_->timeline->Record(track, "NEGOTIATE", enqueued, ready_at);
    context_->timeline->Record(track, "QUEUE", ready_at, start);
    context_->timeline->Record(
        track, "COMMUNICATE", start, Clock::now(),
        {{"bytes", absl::StrCat(result.ok() ? result->data.size() : 0)}});
  }
  if (!result.ok()) {
    Finish(name, result.status());
    return;
  }
  Finish(name, absl::OkStatus(), *std::move(result));
}

void ProcessSetRunner::Finish(const std::string& name,
                              const absl::Status& status,
                              AllgatherResult result,
                              std::shared_ptr<Event> done) {
  auto node = in_flight_.extract(name);
  if (node.empty()) return;
  std::vector<TensorEntry> entries;
  entries.push_back(std::move(node.mapped()));
  std::vector<AllgatherResult> results;
  results.push_back(std::move(result));
  host_->Complete(id_, std::move(entries), status, std::move(results),
                  std::move(done));
}

void ProcessSetRunner::FinishAll(const std::vector<std::string>& names,
                                 const absl::Status& status,
                                 std::shared_ptr<Event> done) {
  std::vector<TensorEntry> entries;
  entries.reserve(names.size());
  for (const std::string& name : names) {
    auto node = in_flight_.extract(name);
    if (!node.empty()) entries.push_back(std::move(node.mapped()));
  }
  if (entries.empty()) return;
  host_->Complete(id_, std::move(entries), status, {}, std::move(done));
}

}  // namespace terse
