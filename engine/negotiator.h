// Negotiator: each rank's side of agreeing, cycle by cycle, which operations
// are ready on every rank, and in which order every rank executes them.
//
// One cycle (RunCycle, collective: every rank calls it in lockstep):
//  1. Each locally submitted op that is in the response cache with the same
//     parameters sets its slot's bit; one that is not (new, or changed) is
//     marked for the coordinator.
//  2. One bitwise-AND allreduce over [flags | ready bits | valid bits]. The
//     flags are stored inverted so that AND answers "does anyone ...": bit 0
//     "I have nothing for the coordinator", bit 1 "I am not shutting down",
//     bit 2 "I have no error to report", bit 3 "I have joined" (AND: every
//     rank has). A rank clears a valid bit to evict a slot everywhere (its
//     request no longer matches the cached one, or it has waited for half
//     the stall-check time, so that the coordinator can see who is missing).
//  3. Slots whose ready bit survived are executed from the cache, in slot
//     order. In the steady state this is the whole cycle.
//  4. Only when a flag asks for it (or a slot was invalidated): every rank
//     sends its RequestList (AllgathervUnknownSizes); rank 0's Coordinator
//     answers a ResponseList (ops complete on every rank, in first-request
//     order; mismatches as ERROR responses; shutdown; the first fatal error),
//     broadcast to every rank. Every EXECUTE of a cacheable op enters the
//     cache, identically on every rank.
// A joined rank sets the ready bit of every cached allreduce (it contributes
// zeros) until the JOIN response.
//
// Not thread-safe: owned and used by the engine's background thread only.
// Messages from peers are untrusted; a malformed one is a fatal error.
#ifndef TERSE_ENGINE_NEGOTIATOR_H_
#define TERSE_ENGINE_NEGOTIATOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "common/control.pb.h"
#include "engine/coordinator.h"
#include "engine/response_cache.h"
#include "engine/stall_inspector.h"
#include "engine/types.h"

namespace terse {

// Name of the JOIN request (reserved; user names may not start "__terse.").
inline constexpr char kJoinName[] = "__terse.join";

struct NegotiatorOptions {
  int64_t cache_capacity = 1024;
  double stall_check_seconds = 60;
  double stall_shutdown_seconds = 0;
};

struct CycleOutcome {
  // Every rank gets the same list; execute in this order.
  std::vector<proto::Response> responses;
  // Some rank asked to shut down: every rank stops after this cycle.
  bool shutdown = false;
  // A fatal error decided this cycle, the same on every rank.
  absl::Status error;
  // Rank 0: a stall warning to log (empty if none).
  std::string stall_warning;
};

class Negotiator {
 public:
  // `comm` is not owned and must outlive the negotiator.
  Negotiator(Communicator* comm, const NegotiatorOptions& options);
  ~Negotiator();

  // Registers a local op for negotiation (its name must not be pending).
  // A JOIN request marks this rank joined until the JOIN response.
  absl::Status Submit(proto::Request request, Clock::time_point enqueued);

  // One cycle (see above). `shutdown`: this rank wants to stop.
  // `local_error`: a fatal error this rank wants every rank to learn.
  // An error return means this rank cannot negotiate any more (a collective
  // failed or a peer sent garbage); the outcome's `error` is the agreed one.
  absl::StatusOr<CycleOutcome> RunCycle(bool shutdown,
                                        const absl::Status& local_error);

  int64_t cycles() const { return cycles_; }
  int64_t coordinator_rounds() const { return coordinator_rounds_; }
  // Requests this rank has sent through the coordinator (cache misses).
  int64_t requests_sent() const { return requests_sent_; }
  const ResponseCache& cache() const { return cache_; }
  int64_t pending() const { return static_cast<int64_t>(local_.size()); }

 private:
  enum class State { kNew, kCached, kToSend, kSent };
  struct Local {
    proto::Request request;
    Clock::time_point enqueued;
    State state = State::kNew;
    int64_t slot = -1;
    Clock::time_point cached_since;
  };

  // Moves the local op cached in `slot` (if any) to the coordinator path.
  void Uncache(int64_t slot);
  // Step 4; appends to `outcome`.
  absl::Status CoordinatorRound(bool shutdown, const absl::Status& error,
                                Clock::time_point now, CycleOutcome* outcome);
  // Rank 0: builds the serialized ResponseList from every rank's list.
  std::string Coordinate(const std::vector<uint8_t>& lists,
                         const std::vector<int64_t>& sizes,
                         Clock::time_point now);

  Communicator* const comm_;
  const NegotiatorOptions options_;
  const int rank_;
  const int size_;
  const int64_t words_;  // Ready-bit words (= valid-bit words).

  ResponseCache cache_;
  std::unique_ptr<Coordinator> coordinator_;   // Rank 0 only.
  std::unique_ptr<StallInspector> inspector_;  // Rank 0 only.
  Clock::time_point next_inspection_;
  absl::Status stall_error_;  // Rank 0: to broadcast.

  absl::flat_hash_map<std::string, Local> local_;
  std::vector<std::string> new_;      // kNew, in submit order.
  std::vector<std::string> to_send_;  // kToSend, in order.
  absl::flat_hash_map<int64_t, std::string> slot_owner_;  // kCached.
  bool joined_ = false;

  int64_t cycles_ = 0;
  int64_t coordinator_rounds_ = 0;
  int64_t requests_sent_ = 0;
};

}  // namespace terse

#endif  // TERSE_ENGINE_NEGOTIATOR_H_
