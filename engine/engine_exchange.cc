// Engine's alltoall and reducescatter enqueue (engine.h); the checks are
// engine/exchange.h's CheckExchange, run by Enqueue once the process set's
// size is known.
#include <utility>

#include "engine/engine.h"

namespace terse {

absl::StatusOr<Handle> Engine::AlltoallAsync(const std::string& name,
                                             TensorView in,
                                             const std::vector<int64_t>& shape,
                                             const std::vector<int64_t>& splits,
                                             DoneCallback callback,
                                             int32_t process_set) {
  TensorEntry e;
  e.process_set = process_set;
  e.name = name;
  e.op = proto::ALLTOALL;
  e.input = in;
  e.shape = shape;
  e.splits = splits;
  e.callback = std::move(callback);
  return Enqueue(std::move(e));
}

absl::StatusOr<Handle> Engine::ReducescatterAsync(
    const std::string& name, TensorView in, const std::vector<int64_t>& shape,
    ReduceOp op, double prescale, double postscale, DoneCallback callback,
    int32_t process_set) {
  TensorEntry e;
  e.process_set = process_set;
  e.name = name;
  e.op = proto::REDUCESCATTER;
  e.input = in;
  e.shape = shape;
  e.reduce_op = op;
  e.prescale = prescale;
  e.postscale = postscale;
  e.callback = std::move(callback);
  return Enqueue(std::move(e));
}

}  // namespace terse
