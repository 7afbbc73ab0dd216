// _efcp: the Python extension module over the EFCP preconditioners
// (efcp/: DenseMfac, SparseMfac, Ggt, SparseGgt, GradientMomentum,
// PreconditionedOptimizer). It links nothing of the engine; the public face
// is terse.optim (MFAC, SparseMFAC, GGT, SparseGGT).
//
//   * Vectors arrive as (data pointer, element count) of contiguous host
//     float32 memory, never as framework objects, so this file compiles
//     without libtorch. The caller keeps that memory alive and unaliased for
//     the duration of the call (terse.optim passes its own flat buffers).
//   * Every step/apply/save/restore runs with the GIL released. Each object
//     serialises its calls with its own mutex, so two Python threads cannot
//     race inside one preconditioner.
//   * A Status error becomes ValueError (InvalidArgument: a bad option,
//     a NaN/Inf gradient, a corrupt state blob) or RuntimeError (anything
//     else), carrying the library's message. On error nothing has changed.
//     Exceptions exist only at this boundary, as pybind11's way of raising
//     Python errors; the C++ below it uses Status.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "efcp/dense_mfac.h"
#include "efcp/ggt.h"
#include "efcp/gradient_momentum.h"
#include "efcp/optimizer_step.h"
#include "efcp/preconditioner.h"
#include "efcp/sparse_mfac.h"
#include "efcp/sparse_window.h"

namespace py = pybind11;

namespace terse {
namespace efcp {
namespace {

void ThrowIfError(const absl::Status& status) {
  if (status.ok()) return;
  std::string message(status.message());
  if (status.code() == absl::StatusCode::kInvalidArgument) {
    throw py::value_error(message);
  }
  throw std::runtime_error(message);
}

template <typename T>
T ValueOrThrow(absl::StatusOr<T> value) {
  ThrowIfError(value.status());
  return *std::move(value);
}

// "u32_fp32" (or "index32_fp32") and "block16_bf16".
WindowStorage ParseStorage(const std::string& name) {
  if (name == "u32_fp32" || name == "index32_fp32") {
    return WindowStorage::kIndex32Fp32;
  }
  if (name == "block16_bf16") return WindowStorage::kBlock16Bf16;
  throw py::value_error(absl::StrCat(
      "storage = '", name, "' (accepted: 'u32_fp32', 'block16_bf16')"));
}

WeightDecayMode ParseWeightDecayMode(const std::string& name) {
  if (name == "lr") return WeightDecayMode::kLrScaled;
  if (name == "plain") return WeightDecayMode::kUnscaled;
  throw py::value_error(
      absl::StrCat("wd_mode = '", name, "' (accepted: 'lr', 'plain')"));
}

const char* WeightDecayModeName(WeightDecayMode mode) {
  return mode == WeightDecayMode::kLrScaled ? "lr" : "plain";
}

absl::Span<const float> InSpan(uintptr_t data, int64_t count) {
  return {reinterpret_cast<const float*>(data), static_cast<size_t>(count)};
}

absl::Span<float> OutSpan(uintptr_t data, int64_t count) {
  return {reinterpret_cast<float*>(data), static_cast<size_t>(count)};
}

void CheckPointer(uintptr_t data, int64_t count, const char* what) {
  if (count < 0 || (count > 0 && data == 0)) {
    throw py::value_error(
        absl::StrCat(what, ": null pointer or negative count ", count));
  }
}

py::dict MemoryDict(const MemoryUsage& usage) {
  py::dict out;
  out["window"] = usage.window;
  out["error"] = usage.error;
  out["small"] = usage.small;
  out["scratch"] = usage.scratch;
  out["total"] = usage.total();
  return out;
}

// A Preconditioner owned by Python until an Optimizer takes it.
class PyPreconditioner {
 public:
  explicit PyPreconditioner(std::unique_ptr<Preconditioner> p)
      : p_(std::move(p)) {}

  void Step(uintptr_t grad, uintptr_t update, int64_t count) {
    CheckPointer(grad, count, "gradient");
    CheckPointer(update, count, "update");
    absl::Status status;
    {
      py::gil_scoped_release release;
      absl::MutexLock lock(&mu_);
      status = Get()->Step(InSpan(grad, count), OutSpan(update, count));
    }
    ThrowIfError(status);
  }

  void Apply(uintptr_t x, uintptr_t out, int64_t count) {
    CheckPointer(x, count, "x");
    CheckPointer(out, count, "out");
    absl::Status status;
    {
      py::gil_scoped_release release;
      absl::MutexLock lock(&mu_);
      status = Get()->Apply(InSpan(x, count), OutSpan(out, count));
    }
    ThrowIfError(status);
  }

  py::bytes SaveState() {
    std::string blob;
    {
      py::gil_scoped_release release;
      absl::MutexLock lock(&mu_);
      blob = Get()->SaveState();
    }
    return py::bytes(blob);
  }

  void RestoreState(const py::bytes& data) {
    std::string blob = data;
    absl::Status status;
    {
      py::gil_scoped_release release;
      absl::MutexLock lock(&mu_);
      status = Get()->RestoreState(blob);
    }
    ThrowIfError(status);
  }

  int64_t dim() {
    absl::MutexLock lock(&mu_);
    return Get()->dim();
  }
  int64_t steps() {
    absl::MutexLock lock(&mu_);
    return Get()->steps();
  }
  std::string name() {
    absl::MutexLock lock(&mu_);
    return std::string(Get()->name());
  }
  py::dict Memory() {
    MemoryUsage usage;
    {
      absl::MutexLock lock(&mu_);
      usage = Get()->memory();
    }
    return MemoryDict(usage);
  }

  // Hands the preconditioner to an Optimizer; this object is empty after.
  std::unique_ptr<Preconditioner> Take() {
    absl::MutexLock lock(&mu_);
    Get();
    return std::move(p_);
  }

 private:
  Preconditioner* Get() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (p_ == nullptr) {
      throw std::runtime_error(
          "this preconditioner was moved into an Optimizer");
    }
    return p_.get();
  }

  absl::Mutex mu_;
  std::unique_ptr<Preconditioner> p_ ABSL_GUARDED_BY(mu_);
};

OptimizerStepOptions MakeStepOptions(double lr, double momentum,
                                     double dampening, bool nesterov,
                                     double weight_decay,
                                     const std::string& wd_mode) {
  OptimizerStepOptions options;
  options.lr = lr;
  options.momentum = momentum;
  options.dampening = dampening;
  options.nesterov = nesterov;
  options.weight_decay = weight_decay;
  options.weight_decay_mode = ParseWeightDecayMode(wd_mode);
  return options;
}

class PyOptimizer {
 public:
  PyOptimizer(PyPreconditioner& preconditioner, double lr, double momentum,
              double dampening, bool nesterov, double weight_decay,
              const std::string& wd_mode) {
    const OptimizerStepOptions options = MakeStepOptions(
        lr, momentum, dampening, nesterov, weight_decay, wd_mode);
    // Validate first, so a bad option leaves the preconditioner with Python.
    ThrowIfError(ValidateOptimizerStepOptions(options));
    optimizer_ = ValueOrThrow(
        PreconditionedOptimizer::Create(preconditioner.Take(), options));
  }

  void Step(uintptr_t params, uintptr_t grad, int64_t count) {
    CheckPointer(params, count, "params");
    CheckPointer(grad, count, "gradient");
    absl::Status status;
    {
      py::gil_scoped_release release;
      absl::MutexLock lock(&mu_);
      status = optimizer_->Step(OutSpan(params, count), InSpan(grad, count));
    }
    ThrowIfError(status);
  }

  void SetOptions(double lr, double momentum, double dampening, bool nesterov,
                  double weight_decay, const std::string& wd_mode) {
    const OptimizerStepOptions options = MakeStepOptions(
        lr, momentum, dampening, nesterov, weight_decay, wd_mode);
    absl::MutexLock lock(&mu_);
    ThrowIfError(optimizer_->SetOptions(options));
  }

  py::dict Options() {
    OptimizerStepOptions options;
    {
      absl::MutexLock lock(&mu_);
      options = optimizer_->options();
    }
    py::dict out;
    out["lr"] = options.lr;
    out["momentum"] = options.momentum;
    out["dampening"] = options.dampening;
    out["nesterov"] = options.nesterov;
    out["weight_decay"] = options.weight_decay;
    out["wd_mode"] = WeightDecayModeName(options.weight_decay_mode);
    return out;
  }

  py::bytes SaveState() {
    std::string blob;
    {
      py::gil_scoped_release release;
      absl::MutexLock lock(&mu_);
      blob = optimizer_->SaveState();
    }
    return py::bytes(blob);
  }

  void RestoreState(const py::bytes& data) {
    std::string blob = data;
    absl::Status status;
    {
      py::gil_scoped_release release;
      absl::MutexLock lock(&mu_);
      status = optimizer_->RestoreState(blob);
    }
    ThrowIfError(status);
  }

  int64_t dim() {
    absl::MutexLock lock(&mu_);
    return optimizer_->preconditioner().dim();
  }
  int64_t steps() {
    absl::MutexLock lock(&mu_);
    return optimizer_->steps();
  }
  std::string name() {
    absl::MutexLock lock(&mu_);
    return std::string(optimizer_->preconditioner().name());
  }
  py::dict Memory() {
    MemoryUsage usage;
    {
      absl::MutexLock lock(&mu_);
      usage = optimizer_->memory();
    }
    return MemoryDict(usage);
  }

 private:
  absl::Mutex mu_;
  std::unique_ptr<PreconditionedOptimizer> optimizer_ ABSL_GUARDED_BY(mu_);
};

template <typename T>
std::unique_ptr<PyPreconditioner> Wrap(absl::StatusOr<std::unique_ptr<T>> p) {
  std::unique_ptr<Preconditioner> base = ValueOrThrow(std::move(p));
  return std::make_unique<PyPreconditioner>(std::move(base));
}

// GGT's beta1: the preconditioned direction is a moving average of the
// gradients (gradient_momentum.h); 0 leaves `p` as it is.
std::unique_ptr<PyPreconditioner> WithBeta1(std::unique_ptr<Preconditioner> p,
                                            double beta1) {
  if (beta1 == 0.0) return std::make_unique<PyPreconditioner>(std::move(p));
  return Wrap(GradientMomentum::Create(std::move(p), beta1));
}

std::unique_ptr<PyPreconditioner> MakeDenseMfac(int64_t dim, int64_t m,
                                                double damp,
                                                int64_t refresh_interval,
                                                int num_threads) {
  DenseMfacOptions options;
  options.dim = dim;
  options.window = m;
  options.damp = damp;
  options.refresh_interval = refresh_interval;
  options.num_threads = num_threads;
  return Wrap(DenseMfac::Create(options));
}

std::unique_ptr<PyPreconditioner> MakeSparseMfac(int64_t dim, int64_t m,
                                                 double damp, double density,
                                                 const std::string& storage,
                                                 int64_t refresh_interval,
                                                 int num_threads) {
  SparseMfacOptions options;
  options.dim = dim;
  options.window = m;
  options.damp = damp;
  options.density = density;
  options.storage = ParseStorage(storage);
  options.refresh_interval = refresh_interval;
  options.num_threads = num_threads;
  return Wrap(SparseMfac::Create(options));
}

std::unique_ptr<PyPreconditioner> MakeGgt(int64_t dim, int64_t window,
                                          double eps, double beta1,
                                          double beta2, int num_threads) {
  GgtOptions options;
  options.dim = dim;
  options.window = window;
  options.epsilon = eps;
  options.beta2 = beta2;
  options.num_threads = num_threads;
  return WithBeta1(ValueOrThrow(Ggt::Create(options)), beta1);
}

std::unique_ptr<PyPreconditioner> MakeSparseGgt(int64_t dim, int64_t window,
                                                double eps, double density,
                                                const std::string& storage,
                                                double beta1, double beta2,
                                                int num_threads) {
  SparseGgtOptions options;
  options.dim = dim;
  options.window = window;
  options.epsilon = eps;
  options.density = density;
  options.storage = ParseStorage(storage);
  options.beta2 = beta2;
  options.num_threads = num_threads;
  return WithBeta1(ValueOrThrow(SparseGgt::Create(options)), beta1);
}

}  // namespace
}  // namespace efcp
}  // namespace terse

PYBIND11_MODULE(_efcp, m) {
  using terse::efcp::PyOptimizer;
  using terse::efcp::PyPreconditioner;
  m.doc() =
      "terse's EFCP preconditioners (M-FAC, EFCP, GGT). Use terse.optim; "
      "these take raw pointers of contiguous float32 host memory.";

  py::class_<PyPreconditioner>(m, "Preconditioner")
      .def("step", &PyPreconditioner::Step, py::arg("grad"), py::arg("update"),
           py::arg("count"),
           "Adds the gradient to the history; writes the direction.")
      .def("apply", &PyPreconditioner::Apply, py::arg("x"), py::arg("out"),
           py::arg("count"),
           "Applies the current preconditioner to x (history unchanged).")
      .def("save_state", &PyPreconditioner::SaveState)
      .def("restore_state", &PyPreconditioner::RestoreState, py::arg("blob"))
      .def("memory", &PyPreconditioner::Memory,
           "Bytes held: window, error, small, scratch, total.")
      .def_property_readonly("dim", &PyPreconditioner::dim)
      .def_property_readonly("steps", &PyPreconditioner::steps)
      .def_property_readonly("name", &PyPreconditioner::name);

  py::class_<PyOptimizer>(m, "Optimizer")
      .def(py::init<PyPreconditioner&, double, double, double, bool, double,
                    const std::string&>(),
           py::arg("preconditioner"), py::arg("lr"), py::arg("momentum"),
           py::arg("dampening"), py::arg("nesterov"), py::arg("weight_decay"),
           py::arg("wd_mode"),
           "Takes the preconditioner (it is empty afterwards).")
      .def("step", &PyOptimizer::Step, py::arg("params"), py::arg("grad"),
           py::arg("count"),
           "params <- decay * params - lr * (momentum of) P(grad).")
      .def("set_options", &PyOptimizer::SetOptions, py::arg("lr"),
           py::arg("momentum"), py::arg("dampening"), py::arg("nesterov"),
           py::arg("weight_decay"), py::arg("wd_mode"))
      .def("options", &PyOptimizer::Options)
      .def("save_state", &PyOptimizer::SaveState)
      .def("restore_state", &PyOptimizer::RestoreState, py::arg("blob"))
      .def("memory", &PyOptimizer::Memory)
      .def_property_readonly("dim", &PyOptimizer::dim)
      .def_property_readonly("steps", &PyOptimizer::steps)
      .def_property_readonly("name", &PyOptimizer::name);

  m.def("dense_mfac", &terse::efcp::MakeDenseMfac, py::arg("dim"), py::arg("m"),
        py::arg("damp"), py::arg("refresh_interval") = -1,
        py::arg("num_threads") = 0);
  m.def("sparse_mfac", &terse::efcp::MakeSparseMfac, py::arg("dim"),
        py::arg("m"), py::arg("damp"), py::arg("density"),
        py::arg("storage") = "u32_fp32", py::arg("refresh_interval") = -1,
        py::arg("num_threads") = 0);
  m.def("ggt", &terse::efcp::MakeGgt, py::arg("dim"), py::arg("window"),
        py::arg("eps"), py::arg("beta1") = 0.0, py::arg("beta2") = 1.0,
        py::arg("num_threads") = 0);
  m.def("sparse_ggt", &terse::efcp::MakeSparseGgt, py::arg("dim"),
        py::arg("window"), py::arg("eps"), py::arg("density"),
        py::arg("storage") = "u32_fp32", py::arg("beta1") = 0.0,
        py::arg("beta2") = 1.0, py::arg("num_threads") = 0);
}
