// Under mpirun: the registry's built-in backends end to end. The MPI control
// communicator is built at Create(); the NCCL one for cuda:local_rank on the
// first ForDevice(). With a device per local rank the conformance suite runs
// on device memory; with none, every rank must get the same clear
// FailedPrecondition and the control plane must stay usable. Exit 0 on
// success, 1 on a failed check.
#include <cstdio>
#include <string>
#include <vector>

#include "collectives/conformance.h"
#include "collectives/nccl/cuda_test_memory.h"
#include "collectives/registry.h"
#include "common/config.h"
#include "common/cuda_probe.h"

namespace terse {
namespace {

int Run() {
  auto registry = CommunicatorRegistry::Create(Config::Defaults());
  if (!registry.ok()) {
    std::fprintf(stderr, "FAIL registry: %s\n",
                 registry.status().ToString().c_str());
    return 1;
  }
  Communicator* control = (*registry)->control();
  const int devices = ProbeCuda().device_count;
  int64_t enough = devices >= control->local_size() ? 1 : 0;
  int64_t all_enough = enough;
  if (!control->Allreduce(&all_enough, 1, DataType::kInt64, ReduceOp::kMin)
           .ok()) {
    return 1;
  }
  auto nccl = (*registry)->ForDevice(Device::Cuda(control->local_rank()));
  std::vector<std::string> failures;
  if (devices == 0) {
    if (nccl.ok() ||
        nccl.status().code() != absl::StatusCode::kFailedPrecondition) {
      failures.push_back("no device: want FailedPrecondition, got " +
                         nccl.status().ToString());
    } else if (control->rank() == 0) {
      std::fprintf(stderr, "expected error: %s\n",
                   nccl.status().ToString().c_str());
    }
    // Asking again returns the remembered error without a collective.
    auto again = (*registry)->ForDevice(Device::Cuda(control->local_rank()));
    if (again.status() != nccl.status()) failures.push_back("error not kept");
  } else if (all_enough == 0) {
    std::fprintf(stderr, "SKIP: %d devices for %d local ranks\n", devices,
                 control->local_size());
  } else if (!nccl.ok()) {
    failures.push_back("ForDevice: " + nccl.status().ToString());
  } else {
    CudaTestMemory memory(control->local_rank());
    ConformanceOptions options;
    options.memory = &memory;
    options.half_partial_roundings = control->size() - 1;
    options.detects_count_mismatch = false;
    failures = RunConformance(**nccl, options);
  }
  // The control plane still works whatever happened above.
  if (!control->Barrier().ok()) failures.push_back("control barrier failed");
  for (const std::string& f : failures) {
    std::fprintf(stderr, "FAIL %s\n", f.c_str());
  }
  std::fprintf(stderr, "rank %d: %zu failures\n", control->rank(),
               failures.size());
  return failures.empty() ? 0 : 1;
}

}  // namespace
}  // namespace terse

int main() { return terse::Run(); }
