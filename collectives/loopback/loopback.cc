#include "collectives/loopback/loopback.h"

#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "collectives/forwarding_communicator.h"
#include "collectives/reduce.h"
#include "common/status.h"

namespace terse {

class LoopbackCommunicator : public Communicator {
 public:
  LoopbackCommunicator(LoopbackGroup* group, int rank, int local_size)
      : group_(group), rank_(rank), local_size_(local_size) {}

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  int local_rank() const override { return rank_ % local_size_; }
  int local_size() const override { return local_size_; }
  absl::string_view backend() const override { return "loopback"; }

  absl::Status Allreduce(void* buffer, int64_t count, DataType dtype,
                         ReduceOp op) override;
  absl::Status Allgather(const void* send, void* recv,
                         int64_t bytes_per_rank) override;
  absl::Status Allgatherv(const void* send, void* recv,
                          const std::vector<int64_t>& recv_bytes) override;
  absl::Status Broadcast(void* buffer, int64_t bytes, int root) override;
  absl::Status Barrier() override;
  absl::Status Alltoallv(const void* send,
                         const std::vector<int64_t>& send_bytes, void* recv,
                         const std::vector<int64_t>& recv_bytes) override;
  absl::Status ReduceScatter(const void* send, void* recv,
                             const std::vector<int64_t>& recv_counts,
                             DataType dtype, ReduceOp op) override;
  absl::Status BitwiseAnd(uint64_t* words, int64_t count) override;
  absl::Status BitwiseOr(uint64_t* words, int64_t count) override;
  absl::StatusOr<std::unique_ptr<Communicator>> CreateSubgroup(
      const std::vector<int>& ranks) override;

 private:
  absl::Status Bitwise(uint64_t* words, int64_t count, bool is_and);

  LoopbackGroup* const group_;
  const int rank_;
  const int local_size_;
  int64_t subgroups_made_ = 0;  // This rank's CreateSubgroup calls.
};

namespace {

// A member's communicator of a loopback sub-group: keeps the shared group
// alive and forwards to the member's communicator in it.
class SubgroupCommunicator : public ForwardingCommunicator {
 public:
  SubgroupCommunicator(std::shared_ptr<LoopbackGroup> group, int rank)
      : ForwardingCommunicator(group->communicator(rank)),
        group_(std::move(group)) {}

  absl::string_view backend() const override { return "loopback"; }

 private:
  std::shared_ptr<LoopbackGroup> group_;
};

}  // namespace

namespace {

absl::Status CheckBuffer(const void* p, int64_t n, absl::string_view what) {
  if (n < 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": negative count"));
  }
  if (p == nullptr && n > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": null buffer with count ", n));
  }
  return absl::OkStatus();
}

}  // namespace

std::string LoopbackGroup::Call::Describe() const {
  std::string s = absl::StrCat(kind, "(count=", count);
  if (dtype >= 0)
    absl::StrAppend(&s, ", dtype=", DataTypeName(static_cast<DataType>(dtype)));
  if (op >= 0)
    absl::StrAppend(&s, ", op=", ReduceOpName(static_cast<ReduceOp>(op)));
  if (root >= 0) absl::StrAppend(&s, ", root=", root);
  if (!sizes.empty())
    absl::StrAppend(&s, ", sizes=[", absl::StrJoin(sizes, ","), "]");
  return s + ")";
}

LoopbackGroup::LoopbackGroup(int size, int local_size) : size_(size) {
  if (local_size <= 0) local_size = size;
  calls_.resize(size);
  for (int r = 0; r < size; ++r) {
    communicators_.push_back(
        std::make_unique<LoopbackCommunicator>(this, r, local_size));
  }
}

LoopbackGroup::~LoopbackGroup() = default;

Communicator* LoopbackGroup::communicator(int rank) {
  return communicators_.at(rank).get();
}

void LoopbackGroup::Abort(absl::Status status) {
  std::vector<std::shared_ptr<LoopbackGroup>> subgroups;
  {
    absl::MutexLock lock(&mu_);
    if (abort_.ok()) abort_ = status;
    cv_.SignalAll();
    for (const auto& [seq, group] : subgroups_) subgroups.push_back(group);
  }
  for (const auto& group : subgroups) group->Abort(status);
}

std::shared_ptr<LoopbackGroup> LoopbackGroup::Subgroup(int64_t seq, int size) {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<LoopbackGroup>& group = subgroups_[seq];
  if (group == nullptr) {
    group = std::make_shared<LoopbackGroup>(size);
    if (!abort_.ok()) group->Abort(abort_);
  }
  return group;
}

absl::Status LoopbackGroup::WaitForAll(int phase) {
  if (!abort_.ok()) return abort_;
  const int64_t generation = generation_[phase];
  if (++arrived_[phase] == size_) {
    arrived_[phase] = 0;
    ++generation_[phase];
    cv_.SignalAll();
    return absl::OkStatus();
  }
  while (generation_[phase] == generation && abort_.ok()) cv_.Wait(&mu_);
  return abort_;
}

absl::Status LoopbackGroup::Arrive(int rank, const Call& call,
                                   std::vector<Call>* all) {
  absl::MutexLock lock(&mu_);
  calls_[rank] = call;
  TERSE_RETURN_IF_ERROR(WaitForAll(0));
  *all = calls_;
  // Every rank sees the same calls, so every rank reaches the same verdict.
  const Call& first = calls_[0];
  for (int r = 1; r < size_; ++r) {
    const Call& c = calls_[r];
    if (c.kind != first.kind || c.count != first.count ||
        c.dtype != first.dtype || c.op != first.op || c.root != first.root ||
        c.sizes != first.sizes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "loopback: mismatched collective calls: rank 0 called ",
          first.Describe(), ", rank ", r, " called ", c.Describe()));
    }
  }
  return absl::OkStatus();
}

absl::Status LoopbackGroup::Depart(int rank) {
  (void)rank;
  absl::MutexLock lock(&mu_);
  return WaitForAll(1);
}

namespace {

// Elements [offset, offset + count) of every rank's input (all[r].in)
// reduced into `out`: f16/bf16 accumulated in fp32 and rounded once,
// integers wrap; Average divides by the number of ranks. Not Adasum.
void ReduceBlock(const std::vector<LoopbackGroup::Call>& all, int64_t offset,
                 int64_t count, DataType dtype, ReduceOp op, uint8_t* out) {
  const int size = static_cast<int>(all.size());
  const size_t elem = DataTypeSize(dtype);
  auto in = [&](int r) {
    return static_cast<const uint8_t*>(all[r].in) + offset * elem;
  };
  if (dtype == DataType::kFloat16 || dtype == DataType::kBFloat16) {
    std::vector<float> acc(count, 0.0f);
    HalfToFloatInto(in(0), acc.data(), count, dtype);
    for (int r = 1; r < size; ++r) {
      AccumulateHalfToFloat(acc.data(), in(r), count, dtype, op);
    }
    if (op == ReduceOp::kAverage) {
      for (float& v : acc) v /= static_cast<float>(size);
    }
    FloatToHalfInto(acc.data(), out, count, dtype);
    return;
  }
  if (count > 0) std::memcpy(out, in(0), count * elem);
  for (int r = 1; r < size; ++r) ReduceInPlace(out, in(r), count, dtype, op);
  if (op == ReduceOp::kAverage) DivideInPlace(out, count, dtype, size);
}

}  // namespace

absl::Status LoopbackCommunicator::Allreduce(void* buffer, int64_t count,
                                             DataType dtype, ReduceOp op) {
  TERSE_RETURN_IF_ERROR(CheckBuffer(buffer, count, "allreduce"));
  TERSE_RETURN_IF_ERROR(CheckReduceSupported(dtype, op));
  TERSE_RETURN_IF_ERROR(CheckAdasumRanks(op, size(), "loopback"));
  LoopbackGroup::Call call{"allreduce", count, static_cast<int32_t>(dtype),
                           static_cast<int32_t>(op)};
  call.in = buffer;
  std::vector<LoopbackGroup::Call> all;
  absl::Status arrived = group_->Arrive(rank_, call, &all);
  if (!arrived.ok()) {
    // A mismatch is seen by every rank; still depart so nobody is left behind.
    group_->Depart(rank_).IgnoreError();
    return arrived;
  }
  const size_t bytes = static_cast<size_t>(count) * DataTypeSize(dtype);
  std::vector<uint8_t> result(bytes);
  if (op == ReduceOp::kAdasum) {
    // The tree MPI's recursive doubling forms: (0,1), (2,3), ..., then the
    // pairs' results pairwise; the lower rank's vector is `a`.
    std::vector<std::vector<uint8_t>> level(size());
    for (int r = 0; r < size(); ++r) {
      const uint8_t* in = static_cast<const uint8_t*>(all[r].in);
      level[r].assign(in, in + bytes);
    }
    for (int d = 1; d < size(); d <<= 1) {
      for (int r = 0; r + d < size(); r += 2 * d) {
        AdasumCombine(level[r].data(), level[r + d].data(), count, dtype);
      }
    }
    result = std::move(level[0]);
  } else {
    ReduceBlock(all, 0, count, dtype, op, result.data());
  }
  TERSE_RETURN_IF_ERROR(group_->Depart(rank_));
  if (bytes > 0) std::memcpy(buffer, result.data(), bytes);
  return absl::OkStatus();
}

absl::Status LoopbackCommunicator::Allgather(const void* send, void* recv,
                                             int64_t bytes_per_rank) {
  TERSE_RETURN_IF_ERROR(CheckBuffer(send, bytes_per_rank, "allgather send"));
  TERSE_RETURN_IF_ERROR(CheckBuffer(recv, bytes_per_rank, "allgather recv"));
  LoopbackGroup::Call call{"allgather", bytes_per_rank};
  call.in = send;
  std::vector<LoopbackGroup::Call> all;
  absl::Status arrived = group_->Arrive(rank_, call, &all);
  if (arrived.ok()) {
    uint8_t* out = static_cast<uint8_t*>(recv);
    for (int r = 0; r < size() && bytes_per_rank > 0; ++r) {
      std::memcpy(out + r * bytes_per_rank, all[r].in, bytes_per_rank);
    }
  }
  absl::Status departed = group_->Depart(rank_);
  return arrived.ok() ? departed : arrived;
}

absl::Status LoopbackCommunicator::Allgatherv(
    const void* send, void* recv, const std::vector<int64_t>& recv_bytes) {
  if (static_cast<int>(recv_bytes.size()) != size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("allgatherv: recv_bytes has ", recv_bytes.size(),
                     " entries for ", size(), " ranks"));
  }
  int64_t total = 0;
  for (int64_t b : recv_bytes) {
    if (b < 0) return absl::InvalidArgumentError("allgatherv: negative size");
    total += b;
  }
  TERSE_RETURN_IF_ERROR(
      CheckBuffer(send, recv_bytes[rank_], "allgatherv send"));
  TERSE_RETURN_IF_ERROR(CheckBuffer(recv, total, "allgatherv recv"));
  LoopbackGroup::Call call{"allgatherv", total};
  call.sizes = recv_bytes;
  call.in = send;
  std::vector<LoopbackGroup::Call> all;
  absl::Status arrived = group_->Arrive(rank_, call, &all);
  if (arrived.ok()) {
    uint8_t* out = static_cast<uint8_t*>(recv);
    for (int r = 0; r < size(); ++r) {
      // In place, this rank's part is already where it goes, and the other
      // ranks are reading it: no write.
      if (recv_bytes[r] > 0 && out != all[r].in) {
        std::memcpy(out, all[r].in, recv_bytes[r]);
      }
      out += recv_bytes[r];
    }
  }
  absl::Status departed = group_->Depart(rank_);
  return arrived.ok() ? departed : arrived;
}

absl::Status LoopbackCommunicator::Broadcast(void* buffer, int64_t bytes,
                                             int root) {
  TERSE_RETURN_IF_ERROR(CheckBuffer(buffer, bytes, "broadcast"));
  if (root < 0 || root >= size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("broadcast: root ", root, " outside [0, ", size(), ")"));
  }
  LoopbackGroup::Call call{"broadcast", bytes};
  call.root = root;
  call.in = buffer;
  std::vector<LoopbackGroup::Call> all;
  absl::Status arrived = group_->Arrive(rank_, call, &all);
  if (arrived.ok() && rank_ != root && bytes > 0) {
    std::memcpy(buffer, all[root].in, bytes);  // Only the root's is read.
  }
  absl::Status departed = group_->Depart(rank_);
  return arrived.ok() ? departed : arrived;
}

absl::Status LoopbackCommunicator::Barrier() {
  std::vector<LoopbackGroup::Call> all;
  absl::Status arrived = group_->Arrive(rank_, {"barrier"}, &all);
  absl::Status departed = group_->Depart(rank_);
  return arrived.ok() ? departed : arrived;
}

absl::Status LoopbackCommunicator::Alltoallv(
    const void* send, const std::vector<int64_t>& send_bytes, void* recv,
    const std::vector<int64_t>& recv_bytes) {
  if (static_cast<int>(send_bytes.size()) != size() ||
      static_cast<int>(recv_bytes.size()) != size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "alltoallv: send_bytes has ", send_bytes.size(), " and recv_bytes ",
        recv_bytes.size(), " entries for ", size(), " ranks"));
  }
  int64_t sent = 0, received = 0;
  for (int r = 0; r < size(); ++r) {
    if (send_bytes[r] < 0 || recv_bytes[r] < 0) {
      return absl::InvalidArgumentError("alltoallv: negative size");
    }
    sent += send_bytes[r];
    received += recv_bytes[r];
  }
  TERSE_RETURN_IF_ERROR(CheckBuffer(send, sent, "alltoallv send"));
  TERSE_RETURN_IF_ERROR(CheckBuffer(recv, received, "alltoallv recv"));
  LoopbackGroup::Call call{"alltoallv"};
  call.own = send_bytes;
  call.own.insert(call.own.end(), recv_bytes.begin(), recv_bytes.end());
  call.in = send;
  std::vector<LoopbackGroup::Call> all;
  absl::Status arrived = group_->Arrive(rank_, call, &all);
  // Every rank sees every rank's sizes: each finds the same first mismatch.
  const int n = size();
  for (int i = 0; arrived.ok() && i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (all[i].own[j] != all[j].own[n + i]) {
        arrived = absl::InvalidArgumentError(absl::StrCat(
            "alltoallv: rank ", i, " sends ", all[i].own[j],
            " bytes to rank ", j, ", which expects ", all[j].own[n + i]));
        break;
      }
    }
  }
  if (arrived.ok()) {
    uint8_t* out = static_cast<uint8_t*>(recv);
    for (int j = 0; j < n; ++j) {
      int64_t offset = 0;  // Where rank j's bytes for this rank start.
      for (int k = 0; k < rank_; ++k) offset += all[j].own[k];
      if (recv_bytes[j] > 0) {
        std::memcpy(out, static_cast<const uint8_t*>(all[j].in) + offset,
                    recv_bytes[j]);
      }
      out += recv_bytes[j];
    }
  }
  absl::Status departed = group_->Depart(rank_);
  return arrived.ok() ? departed : arrived;
}

absl::Status LoopbackCommunicator::ReduceScatter(
    const void* send, void* recv, const std::vector<int64_t>& recv_counts,
    DataType dtype, ReduceOp op) {
  if (static_cast<int>(recv_counts.size()) != size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("reduce-scatter: recv_counts has ", recv_counts.size(),
                     " entries for ", size(), " ranks"));
  }
  if (op == ReduceOp::kAdasum) {
    return absl::InvalidArgumentError(
        "reduce-scatter: Adasum is not element-wise and cannot be scattered");
  }
  TERSE_RETURN_IF_ERROR(CheckReduceSupported(dtype, op));
  int64_t total = 0, offset = 0;
  for (int r = 0; r < size(); ++r) {
    if (recv_counts[r] < 0) {
      return absl::InvalidArgumentError("reduce-scatter: negative count");
    }
    if (r == rank_) offset = total;
    total += recv_counts[r];
  }
  TERSE_RETURN_IF_ERROR(CheckBuffer(send, total, "reduce-scatter send"));
  TERSE_RETURN_IF_ERROR(
      CheckBuffer(recv, recv_counts[rank_], "reduce-scatter recv"));
  LoopbackGroup::Call call{"reducescatter", total, static_cast<int32_t>(dtype),
                           static_cast<int32_t>(op)};
  call.sizes = recv_counts;
  call.in = send;
  std::vector<LoopbackGroup::Call> all;
  absl::Status arrived = group_->Arrive(rank_, call, &all);
  if (arrived.ok()) {
    ReduceBlock(all, offset, recv_counts[rank_], dtype, op,
                static_cast<uint8_t*>(recv));
  }
  absl::Status departed = group_->Depart(rank_);
  return arrived.ok() ? departed : arrived;
}

absl::Status LoopbackCommunicator::Bitwise(uint64_t* words, int64_t count,
                                           bool is_and) {
  TERSE_RETURN_IF_ERROR(CheckBuffer(words, count, "bitwise"));
  LoopbackGroup::Call call{is_and ? "bitwise_and" : "bitwise_or", count};
  call.in = words;
  std::vector<LoopbackGroup::Call> all;
  absl::Status arrived = group_->Arrive(rank_, call, &all);
  std::vector<uint64_t> result;
  if (arrived.ok()) {
    result.assign(words, words + count);
    for (int r = 0; r < size(); ++r) {
      const uint64_t* in = static_cast<const uint64_t*>(all[r].in);
      for (int64_t i = 0; i < count; ++i) {
        result[i] = is_and ? (result[i] & in[i]) : (result[i] | in[i]);
      }
    }
  }
  absl::Status departed = group_->Depart(rank_);
  if (!arrived.ok()) return arrived;
  TERSE_RETURN_IF_ERROR(departed);
  std::copy(result.begin(), result.end(), words);
  return absl::OkStatus();
}

absl::Status LoopbackCommunicator::BitwiseAnd(uint64_t* words, int64_t count) {
  return Bitwise(words, count, /*is_and=*/true);
}

absl::Status LoopbackCommunicator::BitwiseOr(uint64_t* words, int64_t count) {
  return Bitwise(words, count, /*is_and=*/false);
}

absl::StatusOr<std::unique_ptr<Communicator>>
LoopbackCommunicator::CreateSubgroup(const std::vector<int>& ranks) {
  TERSE_RETURN_IF_ERROR(CheckSubgroupRanks(ranks, size()));
  LoopbackGroup::Call call{"subgroup", static_cast<int64_t>(ranks.size())};
  call.sizes.assign(ranks.begin(), ranks.end());
  std::vector<LoopbackGroup::Call> all;
  absl::Status arrived = group_->Arrive(rank_, call, &all);
  if (!arrived.ok()) {
    group_->Depart(rank_).IgnoreError();
    return arrived;
  }
  std::shared_ptr<LoopbackGroup> sub =
      group_->Subgroup(subgroups_made_++, static_cast<int>(ranks.size()));
  TERSE_RETURN_IF_ERROR(group_->Depart(rank_));
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] == rank_) {
      return std::unique_ptr<Communicator>(
          new SubgroupCommunicator(std::move(sub), static_cast<int>(i)));
    }
  }
  return std::unique_ptr<Communicator>();
}

absl::Status RunLoopbackRanks(
    int size, const std::function<absl::Status(int, Communicator*)>& body) {
  LoopbackGroup group(size);
  // The first rank to fail is the cause; the others may fail only because
  // the group was aborted, so the cause is recorded under a lock in the
  // order the failures happen, not in rank order.
  absl::Mutex mu;
  absl::Status first_error;
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      absl::Status result = body(r, group.communicator(r));
      if (result.ok()) return;
      {
        absl::MutexLock lock(&mu);
        if (first_error.ok()) first_error = result;
      }
      group.Abort(absl::AbortedError(
          absl::StrCat("loopback: rank ", r, " failed: ", result.message())));
    });
  }
  for (std::thread& t : threads) t.join();
  absl::MutexLock lock(&mu);
  return first_error;
}

}  // namespace terse
