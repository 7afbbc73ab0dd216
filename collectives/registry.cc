#include "collectives/registry.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/forwarding_communicator.h"
#include "collectives/mpi/mpi_communicator.h"
#include "collectives/nccl/nccl_communicator.h"
#include "common/status.h"

namespace terse {
namespace {

std::string KindName(Device::Kind kind) {
  switch (kind) {
    case Device::Kind::kCpu:
      return "CPU";
    case Device::Kind::kCuda:
      return "CUDA";
    case Device::Kind::kSim:
      return "simulated-device";
  }
  return Device::KindName(kind);
}

// The registry's control communicator when the caller owns it.
class BorrowedCommunicator : public ForwardingCommunicator {
 public:
  using ForwardingCommunicator::ForwardingCommunicator;
  // The target's own staging (ForwardingCommunicator leaves it to the base
  // class, so that wrappers overriding Allreduce see staged calls too).
  absl::Status AllreduceStaged(void* buffer, int64_t count, DataType dtype,
                               ReduceOp op, const Staging& staging) override {
    return target()->AllreduceStaged(buffer, count, dtype, op, staging);
  }
  // Likewise the target's own (MPI skips its size check).
  absl::Status AllgathervAgreedSizes(
      const void* send, void* recv,
      const std::vector<int64_t>& recv_bytes) override {
    return target()->AllgathervAgreedSizes(send, recv, recv_bytes);
  }
};

}  // namespace

absl::Status BackendTable::Register(const std::string& name, Device::Kind kind,
                                    BackendFactory factory) {
  if (name.empty() || name == "auto") {
    return absl::InvalidArgumentError(
        absl::StrCat("backend name \"", name, "\" is reserved"));
  }
  if (Find(name) != nullptr) {
    return absl::AlreadyExistsError(
        absl::StrCat("backend \"", name, "\" is already registered"));
  }
  entries_.push_back(Entry{name, kind, std::move(factory)});
  return absl::OkStatus();
}

const BackendTable::Entry* BackendTable::Find(absl::string_view name) const {
  for (const Entry& e : entries_) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

const BackendTable::Entry* BackendTable::FirstFor(Device::Kind kind) const {
  for (const Entry& e : entries_) {
    if (e.kind == kind) return &e;
  }
  return nullptr;
}

std::vector<std::string> BackendTable::Names() const {
  std::vector<std::string> names;
  for (const Entry& e : entries_) names.push_back(e.name);
  return names;
}

BackendTable BuiltinBackends(const WorldOptions& world, const Config& config) {
  // The handle is read now, so the factory holds no pointer into the
  // application's memory.
  MpiOptions mpi;
  if (world.mpi_comm != nullptr) {
    mpi.parent = *static_cast<const MPI_Comm*>(world.mpi_comm);
  }
  mpi.ranks = world.ranks;
  if (config.mpi_allreduce == "mpi") {
    mpi.allreduce_algorithm = MpiAllreduceAlgorithm::kLibrary;
  } else if (config.mpi_allreduce == "ring") {
    mpi.allreduce_algorithm = MpiAllreduceAlgorithm::kRing;
  }
  BackendTable table;
  table
      .Register("mpi", Device::Kind::kCpu,
                [mpi](Device, Communicator*)
                    -> absl::StatusOr<std::unique_ptr<Communicator>> {
                  TERSE_ASSIGN_OR_RETURN(std::unique_ptr<MpiCommunicator> c,
                                         MpiCommunicator::Create(mpi));
                  return std::unique_ptr<Communicator>(std::move(c));
                })
      .IgnoreError();  // Fresh table: the names cannot clash.
  table
      .Register("nccl", Device::Kind::kCuda,
                [](Device device, Communicator* control)
                    -> absl::StatusOr<std::unique_ptr<Communicator>> {
                  TERSE_ASSIGN_OR_RETURN(
                      std::unique_ptr<NcclCommunicator> c,
                      NcclCommunicator::Create(control, device.ordinal));
                  return std::unique_ptr<Communicator>(std::move(c));
                })
      .IgnoreError();
  return table;
}

CommunicatorRegistry::CommunicatorRegistry(const Config& config,
                                           BackendTable backends)
    : backend_(config.backend.empty() ? "auto" : config.backend),
      backends_(std::move(backends)) {}

CommunicatorRegistry::CommunicatorRegistry(std::string backend,
                                           BackendTable backends)
    : backend_(std::move(backend)), backends_(std::move(backends)) {}

absl::StatusOr<std::unique_ptr<CommunicatorRegistry>>
CommunicatorRegistry::ForSubgroup(Communicator* control) const {
  if (control == nullptr) {
    return absl::InvalidArgumentError(
        "CommunicatorRegistry::ForSubgroup: null control communicator");
  }
  std::unique_ptr<CommunicatorRegistry> sub(
      new CommunicatorRegistry(backend_, backends_));
  sub->control_ = BorrowCommunicator(control);
  // The same CPU backend, in the copy's own table.
  sub->control_entry_ = sub->backends_.Find(control_entry_->name);
  return sub;
}

CommunicatorRegistry::~CommunicatorRegistry() {
  absl::MutexLock lock(&mu_);
  devices_.clear();  // They may use control_, which goes last.
}

absl::StatusOr<std::unique_ptr<CommunicatorRegistry>>
CommunicatorRegistry::Create(const Config& config, const WorldOptions& world) {
  return Create(config, BuiltinBackends(world, config));
}

absl::StatusOr<std::unique_ptr<CommunicatorRegistry>>
CommunicatorRegistry::Create(const Config& config, BackendTable backends) {
  std::unique_ptr<CommunicatorRegistry> registry(
      new CommunicatorRegistry(config, std::move(backends)));
  const BackendTable& table = registry->backends_;
  const std::string& name = registry->backend_;
  const BackendTable::Entry* named = nullptr;
  if (name != "auto") {
    named = table.Find(name);
    if (named == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("TERSE_BACKEND=", name,
                       " is not a registered backend; accepted: "
                       "auto, ",
                       absl::StrJoin(table.Names(), ", ")));
    }
  }
  // The control plane always runs on a CPU backend, the named one if it is
  // one.
  const BackendTable::Entry* control =
      named != nullptr && named->kind == Device::Kind::kCpu
          ? named
          : table.FirstFor(Device::Kind::kCpu);
  if (control == nullptr) {
    return absl::FailedPreconditionError(
        "no CPU backend is registered; the control plane needs one");
  }
  TERSE_ASSIGN_OR_RETURN(registry->control_,
                         control->factory(Device::Cpu(), nullptr));
  if (registry->control_ == nullptr) {
    return absl::InternalError(absl::StrCat("backend \"", control->name,
                                            "\" returned no communicator"));
  }
  registry->control_entry_ = control;
  return registry;
}

absl::StatusOr<const BackendTable::Entry*> CommunicatorRegistry::Select(
    Device device) const {
  if (backend_ == "auto") {
    if (device.is_cpu()) return control_entry_;
    const BackendTable::Entry* entry = backends_.FirstFor(device.kind);
    if (entry == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "no backend serves tensors on ", device.ToString(),
          "; registered: ", absl::StrJoin(backends_.Names(), ", ")));
    }
    return entry;
  }
  const BackendTable::Entry* entry = backends_.Find(backend_);
  if (entry->kind != device.kind) {
    std::string why =
        device.is_cuda() ? " (its Open MPI is not CUDA-aware)" : "";
    return absl::InvalidArgumentError(
        absl::StrCat("TERSE_BACKEND=", backend_, " cannot move a tensor on ",
                     device.ToString(), ": backend \"", backend_, "\" serves ",
                     KindName(entry->kind), " tensors only", why,
                     "; set TERSE_BACKEND=auto to pick a backend per device"));
  }
  return entry;
}

absl::StatusOr<Communicator*> CommunicatorRegistry::ForDevice(Device device) {
  TERSE_ASSIGN_OR_RETURN(const BackendTable::Entry* entry, Select(device));
  if (device.is_cpu()) return control_.get();
  if (device.ordinal < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid device ", device.ToString()));
  }
  absl::MutexLock lock(&mu_);
  const auto key = std::make_pair(device.kind, device.ordinal);
  auto it = devices_.find(key);
  if (it == devices_.end()) {
    absl::StatusOr<std::unique_ptr<Communicator>> built =
        entry->factory(device, control_.get());
    if (built.ok() && *built == nullptr) {
      built = absl::InternalError(absl::StrCat("backend \"", entry->name,
                                               "\" returned no communicator"));
    }
    if (!built.ok()) {
      built = absl::Status(
          built.status().code(),
          absl::StrCat("building the ", entry->name, " communicator for ",
                       device.ToString(), ": ", built.status().message()));
    }
    it = devices_.emplace(key, std::move(built)).first;
  }
  if (!it->second.ok()) return it->second.status();
  return it->second->get();
}

std::unique_ptr<Communicator> BorrowCommunicator(Communicator* target) {
  return std::make_unique<BorrowedCommunicator>(target);
}

}  // namespace terse
