// The compression scenarios of the device path (device_scenarios.h):
// device buckets compressed on the simulated device against the same
// tensors on the CPU, and checkpoints of their state loaded across device
// kinds.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "engine/checkpoint_format.h"
#include "engine/checkpoint_io.h"
#include "engine/device_scenarios_internal.h"
#include "engine/engine_testing.h"

namespace terse {
namespace testing {
namespace device_scenarios_internal {
namespace {

// Values of step `step` (deterministic, rank-dependent, not small integers:
// compression rounds them).
std::vector<double> Gradient(int rank, int step, int64_t n) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) {
    v[i] = std::sin(0.37 * i + 1.3 * rank + 0.71 * step) * (1 + i % 7);
  }
  return v;
}

// Allreduces the same values as a simulated-device tensor and as a CPU
// tensor, each in its own bucket with compression `spec`; returns both
// results (the CPU path is the reference).
absl::Status StepBoth(RankDevice& d, Engine& engine, const std::string& spec,
                      const std::string& dev_name, const std::string& cpu_name,
                      const std::vector<double>& v, std::vector<double>* dev,
                      std::vector<float>* cpu,
                      std::vector<int64_t> shape = {}) {
  const int64_t n = static_cast<int64_t>(v.size());
  if (shape.empty()) shape = {n};
  TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Uploaded> u,
                         Upload(d, DataType::kFloat32, v));
  cpu->assign(v.begin(), v.end());
  TensorView cv(cpu->data(), n, DataType::kFloat32);
  TERSE_ASSIGN_OR_RETURN(
      Handle hd,
      engine.AllreduceAsync(dev_name, u->view, u->view, shape, ReduceOp::kSum,
                            1.0, 1.0, nullptr, spec, u->ready));
  TERSE_ASSIGN_OR_RETURN(
      Handle hc, engine.AllreduceAsync(cpu_name, cv, cv, shape, ReduceOp::kSum,
                                       1.0, 1.0, nullptr, spec));
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Event> done, engine.WaitIssued(hd));
  TERSE_RETURN_IF_ERROR(engine.Wait(hc));
  TERSE_ASSIGN_OR_RETURN(*dev, Download(d, done.get(), *u));
  return absl::OkStatus();
}

absl::Status ExpectSame(const std::vector<double>& dev,
                        const std::vector<float>& cpu,
                        const std::string& what) {
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (static_cast<float>(dev[i]) != cpu[i]) {
      return absl::InternalError(
          absl::StrCat(what, "[", i, "]: device ", dev[i], ", cpu ", cpu[i]));
    }
  }
  return absl::OkStatus();
}

// Every bucket's report: its step count and its policy's description with
// the measured throughputs ("T_c=...") left out.
std::map<int, std::pair<int64_t, std::string>> Policies(Engine& engine) {
  std::map<int, std::pair<int64_t, std::string>> out;
  for (const BucketReport& r : engine.compression().Reports()) {
    std::string p = r.policy;
    for (size_t at = 0; (at = p.find("T_c=", at)) != std::string::npos;) {
      at += 4;
      p.erase(at, p.find_first_of(" ]", at) - at);
    }
    out[r.bucket] = {r.steps, p};
  }
  return out;
}

// The descriptions of the buckets that stepped between two Policies(),
// sorted (a tensor's bucket id may change when the order of submission
// does).
std::vector<std::string> Stepped(
    const std::map<int, std::pair<int64_t, std::string>>& before,
    const std::map<int, std::pair<int64_t, std::string>>& after) {
  std::vector<std::string> out;
  for (const auto& [bucket, report] : after) {
    auto it = before.find(bucket);
    if (it == before.end() || it->second.first != report.first) {
      out.push_back(report.second);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A checkpoint of a simulated-device bucket's compression state loads for
// the same tensor on the CPU (and the CPU's for the device): the step after
// the load equals the step the saving engine took, its results and its
// policy's state (the pending decision observed). `spec` on tensors of
// `shape` (top-k: residuals; PowerSGD on a matrix: residuals and warm
// starts).
absl::Status CheckpointAcross(SimRuntime* sim, Engine& engine,
                              const std::string& spec, int rank,
                              std::vector<int64_t> shape,
                              const std::string& prefix = "") {
  TERSE_ASSIGN_OR_RETURN(RankDevice d, MakeDevice(sim, engine));
  int64_t n = 1;
  for (int64_t dim : shape) n *= dim;
  const std::string a = prefix + "a." + spec, b = prefix + "b." + spec;
  std::vector<double> dev;
  std::vector<float> cpu;
  for (int step = 0; step < 2; ++step) {
    TERSE_RETURN_IF_ERROR(StepBoth(d, engine, spec, a, b,
                                   Gradient(rank, step, n), &dev, &cpu, shape));
  }
  TERSE_ASSIGN_OR_RETURN(std::string saved, engine.compression().SaveState());
  const auto at_save = Policies(engine);
  // Step 2 as the saving engine takes it: a on the device, b on the CPU.
  TERSE_RETURN_IF_ERROR(
      StepBoth(d, engine, spec, a, b, Gradient(rank, 2, n), &dev, &cpu, shape));
  const std::vector<double> a_on_device = dev;
  const std::vector<float> b_on_cpu = cpu;
  const auto saving = Policies(engine);
  // Back to the checkpoint, then step 2 with the kinds swapped.
  TERSE_RETURN_IF_ERROR(engine.compression().LoadState(saved));
  TERSE_RETURN_IF_ERROR(
      StepBoth(d, engine, spec, b, a, Gradient(rank, 2, n), &dev, &cpu, shape));
  // The policies' states after the step (the restored pending decision
  // observed) are the saving engine's, tensor for tensor.
  const std::vector<std::string> want = Stepped(at_save, saving);
  const std::vector<std::string> got = Stepped(saving, Policies(engine));
  TERSE_RETURN_IF_ERROR(
      Expect(want == got, absl::StrCat(spec, ": the policies after the load [",
                                       absl::StrJoin(got, " | "), "], saving [",
                                       absl::StrJoin(want, " | "), "]")));
  TERSE_RETURN_IF_ERROR(
      ExpectSame(dev, b_on_cpu, spec + " b: saved on cpu, on sim"));
  std::vector<float> a_device_f(a_on_device.begin(), a_on_device.end());
  std::vector<double> cpu_d(cpu.begin(), cpu.end());
  return ExpectSame(cpu_d, a_device_f, spec + " a: saved on sim, on cpu");
}

}  // namespace

// Each compressor on simulated-device buckets equals the CPU path bit for
// bit over several steps (residuals carried between steps): fp16, bf16,
// topk, dgc, efsignsgd and powersgd run on the device (DeviceCompression;
// dgc's buckets are below its sampling size, so both select exactly),
// accordion (its default: PowerSGD at the critical rank) on the device
// under the policy, and threshold (selected on the device too).
absl::Status CompressedEqualsCpu(SimRuntime* sim, int rank, Engine& engine) {
  TERSE_ASSIGN_OR_RETURN(RankDevice d, MakeDevice(sim, engine));
  for (const std::string spec :
       {"fp16", "bf16", "topk:10", "dgc:10", "efsignsgd", "powersgd:2",
        "threshold:10", "accordion"}) {
    for (int step = 0; step < 3; ++step) {
      std::vector<double> dev;
      std::vector<float> cpu;
      TERSE_RETURN_IF_ERROR(StepBoth(d, engine, spec, "dev." + spec,
                                     "cpu." + spec, Gradient(rank, step, 3000),
                                     &dev, &cpu));
      TERSE_RETURN_IF_ERROR(
          ExpectSame(dev, cpu, absl::StrCat(spec, " step ", step)));
    }
  }
  // Both paths really compressed (equal results of two dense sends would
  // prove nothing): every bucket sent something other than "none".
  int compressed = 0;
  for (const BucketReport& r : engine.compression().Reports()) {
    if (r.compressor != "none") ++compressed;
  }
  return Expect(compressed >= 16,
                absl::StrCat(compressed, " of 16 buckets compressed"));
}

absl::Status CheckpointAcrossDeviceKinds(SimRuntime* sim, int rank,
                                         Engine& engine) {
  TERSE_RETURN_IF_ERROR(CheckpointAcross(sim, engine, "topk:10", rank, {2000}));
  TERSE_RETURN_IF_ERROR(
      CheckpointAcross(sim, engine, "powersgd:2", rank, {40, 50}));
  // An adaptive policy's bucket: accordion (PowerSGD at its critical
  // rank; the default switch period keeps it there): the pending decision
  // and norms, the accumulator and the warm starts of that rank.
  TERSE_RETURN_IF_ERROR(
      CheckpointAcross(sim, engine, "accordion", rank, {40, 50}));
  // gravac's portfolio (the default candidates, window gain): its first
  // step sends PowerSGD rank 4, the second dense (the first trial), the
  // checkpoint is taken, and the third starts PowerSGD's trial (a new gain
  // window) from the restored policy, pending decision and warm starts.
  TERSE_RETURN_IF_ERROR(
      CheckpointAcross(sim, engine, "gravac", rank, {40, 50}));
  // It ran on the device, not staged through the reducer: after the last
  // step (PowerSGD) the device tensor's residual is in device memory, the
  // CPU tensor's in the reducer's store.
  auto nonzero = [&](const std::string& name) {
    for (float v : engine.compression().Residual(name, 2000)) {
      if (v != 0.0f) return true;
    }
    return false;
  };
  return Expect(!nonzero("b.gravac") && nonzero("a.gravac"),
                "the portfolio's device bucket kept its residual on the "
                "device");
}

// TERSE_MOMENTUM_CORRECTION (this scenario's configuration) on gradients
// ("grad." names): the device path equals the CPU path (momentum, then
// top-k with the sent entries masked out of residual and velocity), and a
// checkpoint's velocities (held in device memory for the device tensor)
// load across device kinds, the next step equal to the saving engine's.
absl::Status MomentumAcrossDeviceKinds(SimRuntime* sim, int rank,
                                       Engine& engine) {
  TERSE_ASSIGN_OR_RETURN(RankDevice d, MakeDevice(sim, engine));
  for (int step = 0; step < 3; ++step) {
    std::vector<double> dev;
    std::vector<float> cpu;
    TERSE_RETURN_IF_ERROR(StepBoth(d, engine, "none", "grad.dev.none",
                                   "grad.cpu.none", Gradient(rank, step, 500),
                                   &dev, &cpu));
    TERSE_RETURN_IF_ERROR(
        ExpectSame(dev, cpu, absl::StrCat("momentum dense step ", step)));
  }
  return CheckpointAcross(sim, engine, "topk:10", rank, {2000}, "grad.");
}

// gravac's portfolio with the paper's step gain, a survey at every decision
// (this scenario's configuration): the checkpoint is taken with a pending
// decision that carries gain probes (their norms in the pending norms) and
// loads across device kinds; the next step equals the saving engine's.
absl::Status PortfolioProbesAcrossDeviceKinds(SimRuntime* sim, int rank,
                                              Engine& engine) {
  return CheckpointAcross(sim, engine, "gravac", rank, {40, 50});
}

// The values of residual `name` in a checkpoint of the engine's
// compression state (a device tensor's exported from device memory), or
// none.
absl::StatusOr<std::vector<float>> SavedResidual(Engine& engine,
                                                 const std::string& name) {
  TERSE_ASSIGN_OR_RETURN(const std::string bytes,
                         engine.compression().SaveState());
  checkpoint::StringSource source(bytes);
  TERSE_ASSIGN_OR_RETURN(checkpoint::Checkpoint saved,
                         checkpoint::ReadCheckpoint(&source));
  for (int i = 0; i < saved.header.tensors_size(); ++i) {
    const proto::CheckpointTensor& t = saved.header.tensors(i);
    if (t.name() == name && t.kind() == proto::CheckpointTensor::RESIDUAL) {
      return std::move(saved.values[i]);
    }
  }
  return std::vector<float>();
}

// gravac's portfolio with a qsgd candidate (this scenario's configuration)
// runs on the device (it was once staged through the reducer on a host
// copy). Until QSGD is first sent (its trial follows top-k's) the device
// tensor's results equal the CPU tensor's bit for bit. On that step both
// send QSGD; its draws are seeded by the tensor's name, so the two sums
// differ by their rounding only (a loose bound: within 30% in L2 at 8
// bits); the device tensor's residual is in device memory (a checkpoint
// exports it, non-zero), not in the reducer's store, where the CPU
// tensor's is.
absl::Status QsgdPortfolioOnDevice(SimRuntime* sim, int rank, Engine& engine) {
  TERSE_ASSIGN_OR_RETURN(RankDevice d, MakeDevice(sim, engine));
  auto nonzero = [](const std::vector<float>& v) {
    for (float x : v) {
      if (x != 0.0f) return true;
    }
    return false;
  };
  for (int step = 0; step < 12; ++step) {
    std::vector<double> dev;
    std::vector<float> cpu;
    TERSE_RETURN_IF_ERROR(StepBoth(d, engine, "gravac", "dev.qsgd", "cpu.qsgd",
                                   Gradient(rank, step, 3000), &dev, &cpu));
    const std::vector<BucketReport> reports = engine.compression().Reports();
    int sent = 0;
    for (const BucketReport& r : reports) sent += r.compressor == "qsgd";
    if (sent == 0) {
      TERSE_RETURN_IF_ERROR(
          ExpectSame(dev, cpu, absl::StrCat("qsgd portfolio step ", step)));
      continue;
    }
    TERSE_RETURN_IF_ERROR(
        Expect(sent == 2, absl::StrCat("step ", step, ": ", sent, " of ",
                                       reports.size(), " buckets sent qsgd")));
    double diff = 0, norm = 0;
    for (size_t i = 0; i < cpu.size(); ++i) {
      diff += (dev[i] - cpu[i]) * (dev[i] - cpu[i]);
      norm += double{cpu[i]} * cpu[i];
    }
    TERSE_RETURN_IF_ERROR(
        Expect(diff <= 0.09 * norm,
               absl::StrCat("step ", step, ": the device's QSGD sum is off by ",
                            std::sqrt(diff), " in L2, the CPU's is ",
                            std::sqrt(norm))));
    TERSE_ASSIGN_OR_RETURN(const std::vector<float> on_device,
                           SavedResidual(engine, "dev.qsgd"));
    return Expect(
        nonzero(on_device) &&
            !nonzero(engine.compression().Residual("dev.qsgd", 3000)) &&
            nonzero(engine.compression().Residual("cpu.qsgd", 3000)),
        absl::StrCat("step ", step,
                     ": want the device tensor's residual on the device "
                     "(checkpointed), the CPU tensor's in the store"));
  }
  return absl::InternalError("the portfolio never sent qsgd");
}

}  // namespace device_scenarios_internal
}  // namespace testing
}  // namespace terse
