// ForwardingCommunicator: a Communicator that passes every call to another
// one. Wrappers (a borrowed communicator, a loopback sub-group member, the
// fault-injecting communicators of tests) derive from it and override only
// what they change.
//
// Does not own `target`, which must outlive this object. Thread-safety and
// blocking are the target's.
#ifndef TERSE_COLLECTIVES_FORWARDING_COMMUNICATOR_H_
#define TERSE_COLLECTIVES_FORWARDING_COMMUNICATOR_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "collectives/communicator.h"

namespace terse {

class ForwardingCommunicator : public Communicator {
 public:
  explicit ForwardingCommunicator(Communicator* target) : target_(target) {}

  int rank() const override { return target_->rank(); }
  int size() const override { return target_->size(); }
  int local_rank() const override { return target_->local_rank(); }
  int local_size() const override { return target_->local_size(); }
  absl::string_view backend() const override { return target_->backend(); }
  absl::Status Allreduce(void* buffer, int64_t count, DataType dtype,
                         ReduceOp op) override {
    return target_->Allreduce(buffer, count, dtype, op);
  }
  absl::Status Allgather(const void* send, void* recv,
                         int64_t bytes_per_rank) override {
    return target_->Allgather(send, recv, bytes_per_rank);
  }
  absl::Status Allgatherv(const void* send, void* recv,
                          const std::vector<int64_t>& recv_bytes) override {
    return target_->Allgatherv(send, recv, recv_bytes);
  }
  absl::Status Broadcast(void* buffer, int64_t bytes, int root) override {
    return target_->Broadcast(buffer, bytes, root);
  }
  absl::Status Barrier() override { return target_->Barrier(); }
  absl::Status Alltoallv(const void* send,
                         const std::vector<int64_t>& send_bytes, void* recv,
                         const std::vector<int64_t>& recv_bytes) override {
    return target_->Alltoallv(send, send_bytes, recv, recv_bytes);
  }
  absl::Status ReduceScatter(const void* send, void* recv,
                             const std::vector<int64_t>& recv_counts,
                             DataType dtype, ReduceOp op) override {
    return target_->ReduceScatter(send, recv, recv_counts, dtype, op);
  }
  absl::Status BitwiseAnd(uint64_t* words, int64_t count) override {
    return target_->BitwiseAnd(words, count);
  }
  absl::Status BitwiseOr(uint64_t* words, int64_t count) override {
    return target_->BitwiseOr(words, count);
  }
  absl::Status Synchronize() override { return target_->Synchronize(); }
  bool UseStream(void* stream) override { return target_->UseStream(stream); }
  absl::StatusOr<std::unique_ptr<Communicator>> CreateSubgroup(
      const std::vector<int>& ranks) override {
    return target_->CreateSubgroup(ranks);
  }

 protected:
  Communicator* target() const { return target_; }

 private:
  Communicator* const target_;
};

}  // namespace terse

#endif  // TERSE_COLLECTIVES_FORWARDING_COMMUNICATOR_H_
