// PeerMonitor: which ranks this rank can still hear, over a channel of its
// own (UDP heartbeats), so that when a collective hangs inside the
// communicator (a link down: MPI over TCP waits for ever, and the engine's
// background thread with it) the message can name the unreachable rank.
//
// Every rank sends a small datagram to every other rank every `period`
// seconds, to each address the peer advertised (its IPv4 interface
// addresses, loopback included, and its port), and records when it last
// heard from each rank. Addresses are exchanged once, while the network is
// healthy: LocalAddresses() on every rank, then SetPeers() with every rank's
// string (an allgather). A datagram is 16 bytes (magic, sender rank, job
// size); anything else, or a rank outside [0, size), is ignored (peers are
// untrusted, and a stray datagram can only be dropped).
//
// Thread-safe. Owns one thread (after Start) and one socket; the destructor
// stops and joins the thread.
#ifndef TERSE_ENGINE_PEER_MONITOR_H_
#define TERSE_ENGINE_PEER_MONITOR_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "collectives/communicator.h"
#include "engine/types.h"

namespace terse {

class PeerMonitor {
 public:
  // Opens the socket (any address, a free port). Errors: a socket that
  // cannot be opened or bound; rank/size out of range; period <= 0.
  static absl::StatusOr<std::unique_ptr<PeerMonitor>> Create(
      int rank, int size, double period_seconds);

  // Collective over `comm` (every rank must call it, whatever its period,
  // so that ranks configured differently still issue the same calls):
  // creates a monitor, exchanges every rank's LocalAddresses (an allgather
  // of lengths, then of the strings) and starts it. period_seconds <= 0:
  // takes part with nothing to offer and returns null. Errors (a socket, the
  // exchange, a peer's address) come after the exchange; the caller may go
  // on without a monitor.
  static absl::StatusOr<std::unique_ptr<PeerMonitor>> Connect(
      Communicator* comm, double period_seconds);
  ~PeerMonitor();
  PeerMonitor(const PeerMonitor&) = delete;
  PeerMonitor& operator=(const PeerMonitor&) = delete;

  // "ip:port,ip:port,...": where peers reach this rank.
  std::string LocalAddresses() const;

  // Every rank's LocalAddresses(), indexed by rank (this rank's included,
  // not used). Errors name the rank and the entry that does not parse.
  // Before Start.
  absl::Status SetPeers(const std::vector<std::string>& addresses);

  // Starts sending and listening. Before it, every peer counts as heard at
  // the moment of Start.
  void Start();

  // Seconds since rank `peer` was last heard (0 for this rank).
  double SilentFor(int peer, Clock::time_point now) const;
  // Ranks not heard for more than `seconds`, ascending.
  std::vector<int> Silent(double seconds, Clock::time_point now) const;

  // Test hook: stop sending to `peer` (as if the link were cut one way).
  void MuteForTesting(int peer);

 private:
  struct Endpoint {
    uint32_t ip = 0;  // Network byte order.
    uint16_t port = 0;
  };

  PeerMonitor(int rank, int size, double period_seconds, int fd, int port);
  void Run();

  const int rank_;
  const int size_;
  const double period_;
  const int fd_;
  const int port_;
  std::vector<std::vector<Endpoint>> peers_;  // Set before Start.
  std::atomic<bool> stop_{false};
  std::thread thread_;

  mutable absl::Mutex mu_;
  std::vector<Clock::time_point> heard_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> muted_ ABSL_GUARDED_BY(mu_);
};

}  // namespace terse

#endif  // TERSE_ENGINE_PEER_MONITOR_H_
