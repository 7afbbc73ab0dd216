// _terse: the Python extension module over the engine's C++ API
// (engine/api.h). The `terse` package (terse/torch, ...) is the public face;
// this module only moves integers across:
//
//   * tensors arrive as (data pointer, element count, dtype code, device,
//     CUDA stream), never as framework objects, so this file compiles without
//     libtorch or TensorFlow;
//   * every engine call runs with the GIL released (enqueueing takes the
//     engine's mutex; wait/join/barrier/shutdown block);
//   * an error absl::Status becomes a Python `TerseError` (a RuntimeError)
//     carrying the engine's message. Exceptions exist only at this boundary,
//     as pybind11's way of raising Python errors; the C++ below it uses Status.
//
// Lifetime: the engine reads and writes the tensors' memory until the handle
// completes. The Python caller keeps the tensors alive until wait() returned
// (terse/torch keeps them in its handle table).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "bindings/python/build_info.h"
#include "bindings/python/cuda_stream.h"
#include "collectives/communicator.h"
#include "common/config.h"
#include "common/data_type.h"
#include "common/status.h"
#include "common/tensor_view.h"
#include "common/version.h"
#include "engine/api.h"

namespace py = pybind11;

namespace terse {
namespace {

// Thrown only to be translated into the Python exception `TerseError`.
class StatusError : public std::runtime_error {
 public:
  explicit StatusError(const absl::Status& status)
      : std::runtime_error(std::string(status.message())) {}
};

void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) throw StatusError(status);
}

template <typename T>
T ValueOrThrow(absl::StatusOr<T> value) {
  if (!value.ok()) throw StatusError(value.status());
  return *std::move(value);
}

// `device` is -1 for host memory, else the CUDA ordinal.
absl::StatusOr<TensorView> MakeView(uintptr_t data, int64_t count,
                                    int32_t dtype, int device) {
  if (!IsValidDataType(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported dtype code ", dtype));
  }
  if (count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("negative element count ", count));
  }
  if (device < -1) {
    return absl::InvalidArgumentError(absl::StrCat("bad device ", device));
  }
  if (data == 0 && count > 0) {
    return absl::InvalidArgumentError("null data pointer");
  }
  return TensorView(reinterpret_cast<void*>(data), count,
                    static_cast<DataType>(dtype),
                    device < 0 ? Device::Cpu() : Device::Cuda(device));
}

absl::StatusOr<ReduceOp> MakeOp(int32_t op) {
  switch (op) {
    case static_cast<int32_t>(ReduceOp::kSum):
    case static_cast<int32_t>(ReduceOp::kAverage):
    case static_cast<int32_t>(ReduceOp::kMin):
    case static_cast<int32_t>(ReduceOp::kMax):
      return static_cast<ReduceOp>(op);
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown reduce op code ", op));
  }
}

// The producer of a CUDA tensor may still be running on `stream`.
absl::Status OrderStream(const TensorView& view, uintptr_t stream) {
  if (!view.device.is_cuda()) return absl::OkStatus();
  return SynchronizeStream(view.device.ordinal, stream);
}

absl::StatusOr<Handle> EnqueueAllreduce(
    const std::string& name, uintptr_t in_data, uintptr_t out_data,
    int64_t count, int32_t dtype, int device, const std::vector<int64_t>& shape,
    int32_t op, double prescale, double postscale, uintptr_t stream,
    const std::string& compression) {
  TERSE_ASSIGN_OR_RETURN(TensorView in,
                         MakeView(in_data, count, dtype, device));
  TERSE_ASSIGN_OR_RETURN(TensorView out,
                         MakeView(out_data, count, dtype, device));
  TERSE_ASSIGN_OR_RETURN(ReduceOp reduce_op, MakeOp(op));
  // Seam for per-tensor compression: an empty string means "the engine's
  // policy" (TERSE_COMPRESSION / TERSE_COMPRESSION_RULES). The engine API does
  // not take a per-operation choice yet, so a different one is refused rather
  // than silently ignored.
  if (!compression.empty()) {
    return absl::UnimplementedError(absl::StrCat(
        "tensor '", name, "': per-tensor compression '", compression,
        "' is not wired into the engine yet; select it for the whole process "
        "with TERSE_COMPRESSION=",
        compression, " (or init(compression=...))"));
  }
  TERSE_RETURN_IF_ERROR(OrderStream(in, stream));
  return AllreduceAsync(name, in, out, shape, reduce_op, prescale, postscale);
}

absl::StatusOr<Handle> EnqueueAllgather(const std::string& name, uintptr_t data,
                                        int64_t count, int32_t dtype,
                                        int device,
                                        const std::vector<int64_t>& shape,
                                        uintptr_t stream) {
  TERSE_ASSIGN_OR_RETURN(TensorView in, MakeView(data, count, dtype, device));
  TERSE_RETURN_IF_ERROR(OrderStream(in, stream));
  return AllgatherAsync(name, in, shape);
}

absl::StatusOr<Handle> EnqueueBroadcast(const std::string& name, uintptr_t data,
                                        int64_t count, int32_t dtype,
                                        int device,
                                        const std::vector<int64_t>& shape,
                                        int root_rank, uintptr_t stream) {
  TERSE_ASSIGN_OR_RETURN(TensorView buffer,
                         MakeView(data, count, dtype, device));
  TERSE_RETURN_IF_ERROR(OrderStream(buffer, stream));
  return BroadcastAsync(name, buffer, shape, root_rank);
}

absl::StatusOr<Config> ConfigFromMap(
    const std::map<std::string, std::string>& variables) {
  return Config::FromMap(variables);
}

// Copies an allgather result into memory the caller allocated.
void CopyResult(const AllgatherResult& result, uintptr_t dest,
                int64_t dest_bytes) {
  if (dest_bytes != static_cast<int64_t>(result.data.size())) {
    throw StatusError(absl::InvalidArgumentError(
        absl::StrCat("allgather result is ", result.data.size(),
                     " bytes, destination ", dest_bytes)));
  }
  if (dest_bytes > 0) {
    std::memcpy(reinterpret_cast<void*>(dest), result.data.data(),
                result.data.size());
  }
}

}  // namespace
}  // namespace terse

PYBIND11_MODULE(_terse, m) {
  using terse::ThrowIfError;
  using terse::ValueOrThrow;
  using Release = py::call_guard<py::gil_scoped_release>;

  m.doc() =
      "terse's native module. Use the `terse` package (terse.torch); these "
      "functions take raw pointers and integer codes.";
  m.attr("__version__") = terse::kVersion;
  py::register_exception<terse::StatusError>(m, "TerseError",
                                             PyExc_RuntimeError);
  // Shown as terse.TerseError in tracebacks: the package re-exports it.
  m.attr("TerseError").attr("__module__") = "terse";

  // Codes shared with the Python package (values of the C++ enums).
  py::dict dtypes;
  for (int code = 0; code < terse::kNumDataTypes; ++code) {
    std::string name(terse::DataTypeName(static_cast<terse::DataType>(code)));
    dtypes[py::str(name)] = code;
  }
  m.attr("DTYPES") = dtypes;
  m.attr("OP_SUM") = static_cast<int>(terse::ReduceOp::kSum);
  m.attr("OP_AVERAGE") = static_cast<int>(terse::ReduceOp::kAverage);
  m.attr("OP_MIN") = static_cast<int>(terse::ReduceOp::kMin);
  m.attr("OP_MAX") = static_cast<int>(terse::ReduceOp::kMax);

  m.def(
      "init",
      [](const std::map<std::string, std::string>& variables) {
        terse::Config config = ValueOrThrow(terse::ConfigFromMap(variables));
        py::gil_scoped_release release;
        ThrowIfError(terse::Init(config));
      },
      py::arg("variables"),
      "Starts the engine with the configuration parsed from `variables` "
      "(TERSE_* name -> value, e.g. the environment's).");
  m.def(
      "shutdown", [] { ThrowIfError(terse::Shutdown()); }, Release(),
      "Stops the engine; pending handles fail. Idempotent.");
  m.def("is_initialized", &terse::IsInitialized);
  m.def(
      "rank", [] { return ValueOrThrow(terse::Rank()); }, Release());
  m.def(
      "size", [] { return ValueOrThrow(terse::Size()); }, Release());
  m.def(
      "local_rank", [] { return ValueOrThrow(terse::LocalRank()); }, Release());
  m.def(
      "local_size", [] { return ValueOrThrow(terse::LocalSize()); }, Release());

  m.def(
      "allreduce_async",
      [](const std::string& name, uintptr_t in_data, uintptr_t out_data,
         int64_t count, int32_t dtype, int device,
         const std::vector<int64_t>& shape, int32_t op, double prescale,
         double postscale, uintptr_t stream, const std::string& compression) {
        return ValueOrThrow(terse::EnqueueAllreduce(
            name, in_data, out_data, count, dtype, device, shape, op, prescale,
            postscale, stream, compression));
      },
      Release(), py::arg("name"), py::arg("in_data"), py::arg("out_data"),
      py::arg("count"), py::arg("dtype"), py::arg("device"), py::arg("shape"),
      py::arg("op"), py::arg("prescale") = 1.0, py::arg("postscale") = 1.0,
      py::arg("stream") = 0, py::arg("compression") = "",
      "Enqueues an allreduce of `count` elements from in_data into out_data "
      "(may be equal); returns the handle.");
  m.def(
      "allgather_async",
      [](const std::string& name, uintptr_t data, int64_t count, int32_t dtype,
         int device, const std::vector<int64_t>& shape, uintptr_t stream) {
        return ValueOrThrow(terse::EnqueueAllgather(name, data, count, dtype,
                                                    device, shape, stream));
      },
      Release(), py::arg("name"), py::arg("data"), py::arg("count"),
      py::arg("dtype"), py::arg("device"), py::arg("shape"),
      py::arg("stream") = 0);
  m.def(
      "broadcast_async",
      [](const std::string& name, uintptr_t data, int64_t count, int32_t dtype,
         int device, const std::vector<int64_t>& shape, int root_rank,
         uintptr_t stream) {
        return ValueOrThrow(terse::EnqueueBroadcast(
            name, data, count, dtype, device, shape, root_rank, stream));
      },
      Release(), py::arg("name"), py::arg("data"), py::arg("count"),
      py::arg("dtype"), py::arg("device"), py::arg("shape"),
      py::arg("root_rank"), py::arg("stream") = 0);

  m.def(
      "poll", [](int64_t handle) { return ValueOrThrow(terse::Poll(handle)); },
      Release(), py::arg("handle"));
  m.def(
      "wait", [](int64_t handle) { ThrowIfError(terse::Wait(handle)); },
      Release(), py::arg("handle"),
      "Blocks (without the GIL) until the op completes; raises its error.");

  py::class_<terse::AllgatherResult>(m, "AllgatherResult")
      .def_readonly("shape", &terse::AllgatherResult::shape)
      .def_readonly("first_dims", &terse::AllgatherResult::first_dims)
      .def_property_readonly("dtype",
                             [](const terse::AllgatherResult& r) {
                               return static_cast<int>(r.dtype);
                             })
      .def_property_readonly("nbytes",
                             [](const terse::AllgatherResult& r) {
                               return static_cast<int64_t>(r.data.size());
                             })
      .def("copy_to", &terse::CopyResult, py::arg("dest"),
           py::arg("dest_bytes"),
           "Copies the packed rank-major result into dest (host memory).");
  m.def(
      "take_allgather",
      [](int64_t handle) {
        return ValueOrThrow(terse::TakeAllgatherResult(handle));
      },
      Release(), py::arg("handle"),
      "After wait(handle): the allgather's result; releases the handle.");

  m.def(
      "barrier", [] { ThrowIfError(terse::Barrier()); }, Release());
  m.def(
      "join", [] { return ValueOrThrow(terse::Join()); }, Release(),
      "Contributes zeros until every rank joined; returns the last rank.");

  m.def(
      "bucket_reports",
      [] {
        std::vector<terse::BucketReport> reports;
        {
          py::gil_scoped_release release;
          reports = ValueOrThrow(terse::BucketReports());
        }
        py::list out;
        for (const terse::BucketReport& r : reports) {
          py::dict d;
          d["bucket"] = r.bucket;
          d["tensors"] = r.tensors;
          d["bytes"] = r.bytes;
          d["policy"] = r.policy;
          d["compressor"] = r.compressor;
          d["cf"] = r.cf;
          d["bytes_sent"] = r.bytes_sent;
          d["steps"] = r.steps;
          out.append(d);
        }
        return out;
      },
      "What every bucket did on its last step: a list of dicts (bucket, "
      "tensors, bytes, policy, compressor, cf, bytes_sent, steps).");
  m.def(
      "bytes_sent", [] { return ValueOrThrow(terse::BytesSent()); }, Release(),
      "Bytes this rank has sent for reductions since init().");
  m.def(
      "notify_learning_rate_drop",
      [] { ThrowIfError(terse::NotifyLearningRateDrop()); }, Release(),
      "The learning rate was just lowered (Accordion's signal).");
  m.def(
      "save_compression_state",
      [] {
        std::string state;
        {
          py::gil_scoped_release release;
          state = ValueOrThrow(terse::SaveCompressionState());
        }
        return py::bytes(state);
      },
      "This rank's compression state (policies, error-feedback residuals).");
  m.def(
      "load_compression_state",
      [](const std::string& state) {
        py::gil_scoped_release release;
        ThrowIfError(terse::LoadCompressionState(state));
      },
      py::arg("state"), "Restores what save_compression_state() returned.");

  m.def(
      "build_info",
      [](const std::map<std::string, std::string>& variables) {
        terse::Config config = ValueOrThrow(terse::ConfigFromMap(variables));
        return terse::BuildInfo(config);
      },
      py::arg("variables"),
      "What `terse_info` prints: version, backends, GPU, effective config.");
}
