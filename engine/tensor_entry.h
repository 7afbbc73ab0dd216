// TensorEntry: one operation a framework thread handed to the engine, from
// enqueue until its completion callback.
//
// Plain value; after enqueue it belongs to the engine's background thread.
// The buffers it points to are owned by the caller (see engine.h).
#ifndef TERSE_ENGINE_TENSOR_ENTRY_H_
#define TERSE_ENGINE_TENSOR_ENTRY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "common/control.pb.h"
#include "common/tensor_view.h"
#include "device/runtime.h"
#include "engine/types.h"

namespace terse {

struct TensorEntry {
  Handle handle = 0;
  std::string name;
  proto::OpType op = proto::ALLREDUCE;
  TensorView input;   // Broadcast: the buffer (in place).
  TensorView output;  // Allreduce only; may equal input.
  std::vector<int64_t> shape;
  ReduceOp reduce_op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  // Broadcast: the root's rank within the process set (the engine
  // translates the caller's world rank at enqueue).
  int root_rank = 0;
  // The process set (0: every rank). Names are unique per set.
  int32_t process_set = 0;
  // Alltoall: the rows sent to each rank of the set, in set-rank order
  // (the engine fills equal parts when the caller gave none).
  std::vector<int64_t> splits;
  // Allreduce: canonical compression spec; empty = the engine's policy.
  std::string compression;
  // Grouped ops (Engine::GroupStart): the group's name and its number of
  // ops; empty group: not grouped. See Request.group.
  std::string group;
  int32_t group_size = 0;
  // Non-empty: this rank refuses the op for this reason; negotiation fails
  // it on every rank (Request.refused).
  std::string refused;
  DoneCallback callback;
  Clock::time_point enqueued;
  // Device tensors: recorded on the producer's stream after the input was
  // written; the engine's stream waits on it. Null: ready now.
  std::shared_ptr<Event> ready;
};

// The request `rank` sends for `entry`.
proto::Request MakeRequest(const TensorEntry& entry, int rank);

// Product of `shape` (1 for a scalar); -1 if a dimension is negative or the
// product overflows int64.
int64_t ShapeElements(const std::vector<int64_t>& shape);

// "[4, 5]".
std::string ShapeString(const std::vector<int64_t>& shape);

}  // namespace terse

#endif  // TERSE_ENGINE_TENSOR_ENTRY_H_
