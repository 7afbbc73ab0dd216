// CommunicatorRegistry: which Communicator moves a tensor, by its device.
//
// Backends register by name with a factory and the device kind they serve
// (BackendTable). The built-in table (BuiltinBackends) has "mpi" for CPU
// tensors and "nccl" for CUDA tensors. TERSE_BACKEND (Config::backend)
// chooses:
//   auto  CPU tensors -> the first CPU backend (mpi), CUDA tensors -> the
//         first CUDA backend (nccl);
//   NAME  every tensor must be on a device kind backend NAME serves: with
//         `nccl` a CPU tensor is an error, with `mpi` a CUDA tensor is an
//         error (the Open MPI here is not CUDA-aware).
// Whatever TERSE_BACKEND says, the registry always builds a CPU backend at
// Create(): control() is the communicator for the engine's control plane
// (negotiation, error broadcast) and the one CUDA backends bootstrap from
// (NCCL's unique id, its bitwise ops).
//
// Device communicators (CUDA, simulated) are built lazily, one per device
// kind and ordinal, on the first
// ForDevice() call for that device. Building one is collective (every rank
// must ask for its device at the same point of the call sequence, as the
// engine's agreed response order guarantees); a failure is remembered and
// returned again by later calls for that device.
//
// Ownership: the registry owns every communicator it builds and destroys the
// CUDA ones before control(). Thread-safety: every method may be called from
// any thread; the communicators themselves are single-threaded
// (communicator.h).
#ifndef TERSE_COLLECTIVES_REGISTRY_H_
#define TERSE_COLLECTIVES_REGISTRY_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "collectives/communicator.h"
#include "common/config.h"
#include "common/tensor_view.h"

namespace terse {

// Builds the communicator for `device`. `control` is the registry's control
// communicator, or null while the control communicator itself is being built
// (CPU backends). May block in collective set-up.
using BackendFactory =
    std::function<absl::StatusOr<std::unique_ptr<Communicator>>(
        Device device, Communicator* control)>;

class BackendTable {
 public:
  struct Entry {
    std::string name;
    Device::Kind kind;
    BackendFactory factory;
  };

  // AlreadyExists when `name` is taken; InvalidArgument for "auto" or an
  // empty name.
  absl::Status Register(const std::string& name, Device::Kind kind,
                        BackendFactory factory);

  // Null when absent.
  const Entry* Find(absl::string_view name) const;
  // The first registered backend serving `kind`, or null.
  const Entry* FirstFor(Device::Kind kind) const;
  std::vector<std::string> Names() const;

 private:
  std::vector<Entry> entries_;
};

// Which processes terse runs on (Horovod's init(comm=...)); the default is
// every process of MPI_COMM_WORLD. Only the built-in "mpi" backend reads it;
// the CUDA backends bootstrap from the control communicator, so they span
// the same processes.
struct WorldOptions {
  // The address of the application's MPI_Comm to duplicate (an `MPI_Comm*`,
  // opaque so that this header needs no mpi.h); null: MPI_COMM_WORLD. Read
  // by BuiltinBackends() only; the application keeps the communicator and
  // may free it once the registry is created.
  const void* mpi_comm = nullptr;
  // Ranks of that communicator to run on (MpiOptions::ranks: any order, rank
  // i of terse is ranks[i]; a process not listed fails to create the
  // registry); empty: all of them.
  std::vector<int> ranks;
};

// "mpi" (MpiCommunicator, CPU, over `world`) and "nccl" (NcclCommunicator,
// CUDA).
// `config` gives the MPI backend's allreduce algorithm
// (Config::mpi_allreduce).
BackendTable BuiltinBackends(const WorldOptions& world = WorldOptions(),
                             const Config& config = Config::Defaults());

class CommunicatorRegistry {
 public:
  // With the built-in backends over `world`. Collective over the processes
  // of that world (MpiCommunicator::Create).
  static absl::StatusOr<std::unique_ptr<CommunicatorRegistry>> Create(
      const Config& config, const WorldOptions& world = WorldOptions());
  // With caller-chosen backends (tests: a loopback rank via
  // BorrowCommunicator). InvalidArgument when config.backend is neither
  // "auto" nor a registered name; FailedPrecondition when no CPU backend is
  // registered; otherwise the CPU backend factory's error.
  static absl::StatusOr<std::unique_ptr<CommunicatorRegistry>> Create(
      const Config& config, BackendTable backends);

  ~CommunicatorRegistry();
  CommunicatorRegistry(const CommunicatorRegistry&) = delete;
  CommunicatorRegistry& operator=(const CommunicatorRegistry&) = delete;

  // The control-plane communicator (a CPU backend); never null.
  Communicator* control() const { return control_.get(); }

  // The communicator for tensors on `device` (see the file comment).
  // InvalidArgument when TERSE_BACKEND excludes the device or no backend
  // serves it; the factory's error when building fails.
  absl::StatusOr<Communicator*> ForDevice(Device device);

  // A registry over `control` (a sub-group of this one's control(), e.g. a
  // process set's; not owned, must outlive the result) with this one's
  // backends and TERSE_BACKEND: its device communicators (NCCL, the
  // simulated device's) are built lazily over `control`'s ranks, so they
  // span the sub-group only. Local: builds nothing now. InvalidArgument for
  // a null `control`.
  absl::StatusOr<std::unique_ptr<CommunicatorRegistry>> ForSubgroup(
      Communicator* control) const;

 private:
  CommunicatorRegistry(const Config& config, BackendTable backends);
  CommunicatorRegistry(std::string backend, BackendTable backends);

  // The backend that serves `kind` under config_.backend, or an error.
  absl::StatusOr<const BackendTable::Entry*> Select(Device device) const;

  const std::string backend_;  // Config::backend.
  const BackendTable backends_;
  std::unique_ptr<Communicator> control_;
  const BackendTable::Entry* control_entry_ = nullptr;

  absl::Mutex mu_;
  // Device communicators (or the error building them) by kind and ordinal.
  std::map<std::pair<Device::Kind, int>,
           absl::StatusOr<std::unique_ptr<Communicator>>>
      devices_ ABSL_GUARDED_BY(mu_);
};

// A Communicator that forwards every call to `target` without owning it
// (`target` must outlive it). Lets a registry use a communicator owned
// elsewhere, e.g. a LoopbackGroup's.
std::unique_ptr<Communicator> BorrowCommunicator(Communicator* target);

}  // namespace terse

#endif  // TERSE_COLLECTIVES_REGISTRY_H_
