// _terse: the Python extension module over the engine's C ABI
// (bindings/c/terse_c.h, libterse.so, linked dynamically so the TensorFlow
// op library and this module drive the same engine). The `terse` package
// (terse/torch, terse/tensorflow, ...) is the public face; this module only
// moves integers across:
//
//   * tensors arrive as (data pointer, element count, dtype code, device,
//     CUDA stream), never as framework objects, so this file compiles without
//     libtorch or TensorFlow;
//   * every engine call runs with the GIL released (enqueueing takes the
//     engine's mutex; wait/join/barrier/shutdown block);
//   * an error of the C ABI becomes a Python `TerseError` (a RuntimeError)
//     carrying the engine's message. Exceptions exist only at this boundary,
//     as pybind11's way of raising Python errors; the C++ below it uses Status.
//
// Lifetime: the engine reads and writes the tensors' memory until the handle
// completes. The Python caller keeps the tensors alive until wait() returned
// (terse/torch keeps them in its handle table).
#include <mpi.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "bindings/c/terse_c.h"
#include "bindings/python/build_info.h"
#include "common/config.h"
#include "common/cuda_probe.h"
#include "common/data_type.h"
#include "common/status.h"
#include "common/version.h"

namespace py = pybind11;

namespace terse {
namespace {

// Thrown only to be translated into the Python exception `TerseError`.
class StatusError : public std::runtime_error {
 public:
  explicit StatusError(const std::string& message)
      : std::runtime_error(message) {}
  explicit StatusError(const absl::Status& status)
      : std::runtime_error(std::string(status.message())) {}
};

// Takes ownership of `error` (NULL: success).
void ThrowIfError(terse_error* error) {
  if (error == nullptr) return;
  std::string message = terse_error_message(error);
  terse_error_free(error);
  throw StatusError(message);
}

template <typename T>
T ValueOrThrow(absl::StatusOr<T> value) {
  if (!value.ok()) throw StatusError(value.status());
  return *std::move(value);
}

// One of the C ABI's int queries (terse_rank, ...).
int QueryOrThrow(terse_error* (*query)(int*)) {
  int value = -1;
  ThrowIfError(query(&value));
  return value;
}

// The producer stream to pass to the C API for a tensor on `device` (-1:
// host memory, else the CUDA ordinal) written on `stream` (a cudaStream_t;
// 0 is the legacy default stream, which the C API names cudaStreamLegacy,
// 0x1, since NULL there means "ready now"). The engine's stream waits for
// an event recorded there: the autograd hook never blocks the host.
void* ProducerStream(int device, uintptr_t stream) {
  if (device < 0) return nullptr;
  return stream == 0 ? reinterpret_cast<void*>(uintptr_t{1})
                     : reinterpret_cast<void*>(stream);
}

int64_t EnqueueAllreduce(const std::string& name, uintptr_t in_data,
                         uintptr_t out_data, int64_t count, int32_t dtype,
                         int device, const std::vector<int64_t>& shape,
                         int32_t op, double prescale, double postscale,
                         uintptr_t stream, const std::string& compression,
                         int process_set) {
  // `compression`: this op's spec ("fp16", "topk:100"); empty: the engine's
  // policy (TERSE_COMPRESSION / TERSE_COMPRESSION_RULES). `process_set`:
  // the set's id (0: every rank).
  int64_t handle = 0;
  ThrowIfError(terse_allreduce_set_async(
      name.c_str(), reinterpret_cast<const void*>(in_data),
      reinterpret_cast<void*>(out_data), count, dtype, device, shape.data(),
      static_cast<int>(shape.size()), op, prescale, postscale,
      compression.c_str(), process_set, ProducerStream(device, stream), nullptr,
      nullptr, &handle));
  return handle;
}

int64_t EnqueueAllgather(const std::string& name, uintptr_t data, int64_t count,
                         int32_t dtype, int device,
                         const std::vector<int64_t>& shape, uintptr_t stream,
                         int process_set) {
  int64_t handle = 0;
  ThrowIfError(terse_allgather_set_async(
      name.c_str(), reinterpret_cast<const void*>(data), count, dtype, device,
      shape.data(), static_cast<int>(shape.size()), process_set,
      ProducerStream(device, stream), nullptr, nullptr, &handle));
  return handle;
}

int64_t EnqueueAlltoall(const std::string& name, uintptr_t data, int64_t count,
                        int32_t dtype, int device,
                        const std::vector<int64_t>& shape,
                        const std::vector<int64_t>& splits, int process_set) {
  int64_t handle = 0;
  ThrowIfError(terse_alltoall_set_async(
      name.c_str(), reinterpret_cast<const void*>(data), count, dtype, device,
      shape.data(), static_cast<int>(shape.size()), splits.data(),
      static_cast<int>(splits.size()), process_set, nullptr, nullptr, &handle));
  return handle;
}

int64_t EnqueueReducescatter(const std::string& name, uintptr_t data,
                             int64_t count, int32_t dtype, int device,
                             const std::vector<int64_t>& shape, int op,
                             double prescale, double postscale,
                             int process_set) {
  int64_t handle = 0;
  ThrowIfError(terse_reducescatter_set_async(
      name.c_str(), reinterpret_cast<const void*>(data), count, dtype, device,
      shape.data(), static_cast<int>(shape.size()), op, prescale, postscale,
      process_set, nullptr, nullptr, &handle));
  return handle;
}

int64_t EnqueueBroadcast(const std::string& name, uintptr_t data, int64_t count,
                         int32_t dtype, int device,
                         const std::vector<int64_t>& shape, int root_rank,
                         uintptr_t stream, int process_set) {
  int64_t handle = 0;
  ThrowIfError(terse_broadcast_set_async(
      name.c_str(), reinterpret_cast<void*>(data), count, dtype, device,
      shape.data(), static_cast<int>(shape.size()), root_rank, process_set,
      ProducerStream(device, stream), nullptr, nullptr, &handle));
  return handle;
}

absl::StatusOr<Config> ConfigFromMap(
    const std::map<std::string, std::string>& variables) {
  return Config::FromMap(variables);
}

// world_ranks and mpi_comm: terse_init_with_comm's (mpi_comm is the
// address of an MPI_Comm handle, mpi4py's MPI._addressof; 0 for
// MPI_COMM_WORLD).
void Init(const std::map<std::string, std::string>& variables,
          const std::vector<std::vector<int>>& process_sets,
          const std::vector<int>& world_ranks, uintptr_t mpi_comm) {
  // Parsed here too, so a bad value fails before anything starts.
  ValueOrThrow(ConfigFromMap(variables));
  std::vector<const char*> names;
  std::vector<const char*> values;
  for (const auto& [name, value] : variables) {
    names.push_back(name.c_str());
    values.push_back(value.c_str());
  }
  // Static process sets: flattened, with their sizes.
  std::vector<int> ranks;
  std::vector<int> sizes;
  for (const std::vector<int>& set : process_sets) {
    ranks.insert(ranks.end(), set.begin(), set.end());
    sizes.push_back(static_cast<int>(set.size()));
  }
  ThrowIfError(terse_init_with_comm(
      names.data(), values.data(), names.size(), ranks.data(), sizes.data(),
      static_cast<int>(sizes.size()), world_ranks.data(),
      static_cast<int>(world_ranks.size()),
      reinterpret_cast<const void*>(mpi_comm)));
}

// The world ranks of registered process set `id` (0: every rank).
std::vector<int> ProcessSetRanks(int id) {
  int size = 0;
  ThrowIfError(terse_process_set_size(id, &size));
  std::vector<int> ranks(size);
  ThrowIfError(terse_process_set_ranks(id, ranks.data(), size));
  return ranks;
}

// An allgather's result, owned by Python once taken.
class GatheredTensor {
 public:
  explicit GatheredTensor(terse_allgather_result* result) : result_(result) {}

  std::vector<int64_t> shape() const {
    const int64_t* dims = terse_allgather_result_shape(result_.get());
    return std::vector<int64_t>(
        dims, dims + terse_allgather_result_ndim(result_.get()));
  }
  std::vector<int64_t> first_dims() const {
    const int64_t* dims = terse_allgather_result_first_dims(result_.get());
    return std::vector<int64_t>(
        dims, dims + terse_allgather_result_num_ranks(result_.get()));
  }
  int dtype() const { return terse_allgather_result_dtype(result_.get()); }
  int64_t nbytes() const {
    return terse_allgather_result_nbytes(result_.get());
  }

  // Copies the packed result into memory the caller allocated.
  void CopyTo(uintptr_t dest, int64_t dest_bytes) const {
    if (dest_bytes != nbytes()) {
      throw StatusError(absl::StrCat("allgather result is ", nbytes(),
                                     " bytes, destination ", dest_bytes));
    }
    if (dest_bytes > 0) {
      std::memcpy(reinterpret_cast<void*>(dest),
                  terse_allgather_result_data(result_.get()), dest_bytes);
    }
  }

 private:
  struct Free {
    void operator()(terse_allgather_result* r) const {
      terse_allgather_result_free(r);
    }
  };
  std::unique_ptr<terse_allgather_result, Free> result_;
};

GatheredTensor TakeAllgather(int64_t handle) {
  terse_allgather_result* result = nullptr;
  ThrowIfError(terse_take_allgather(handle, &result));
  return GatheredTensor(result);
}

GatheredTensor TakeAlltoall(int64_t handle) {
  terse_allgather_result* result = nullptr;
  ThrowIfError(terse_take_alltoall(handle, &result));
  return GatheredTensor(result);
}

GatheredTensor TakeReducescatter(int64_t handle) {
  terse_allgather_result* result = nullptr;
  ThrowIfError(terse_take_reducescatter(handle, &result));
  return GatheredTensor(result);
}

}  // namespace
}  // namespace terse

PYBIND11_MODULE(_terse, m) {
  using terse::ThrowIfError;
  using terse::ValueOrThrow;
  using Release = py::call_guard<py::gil_scoped_release>;

  m.doc() =
      "terse's native module. Use the `terse` package (terse.torch, "
      "terse.tensorflow); these functions take raw pointers and integer "
      "codes.";
  m.attr("__version__") = terse::kVersion;
  py::register_exception<terse::StatusError>(m, "TerseError",
                                             PyExc_RuntimeError);
  // Shown as terse.TerseError in tracebacks: the package re-exports it.
  m.attr("TerseError").attr("__module__") = "terse";

  // Codes shared with the Python package (the C ABI's values).
  py::dict dtypes;
  for (int code = 0; code < terse::kNumDataTypes; ++code) {
    std::string name(terse::DataTypeName(static_cast<terse::DataType>(code)));
    dtypes[py::str(name)] = code;
  }
  m.attr("DTYPES") = dtypes;
  m.attr("OP_SUM") = static_cast<int>(TERSE_OP_SUM);
  m.attr("OP_AVERAGE") = static_cast<int>(TERSE_OP_AVERAGE);
  m.attr("OP_MIN") = static_cast<int>(TERSE_OP_MIN);
  m.attr("OP_MAX") = static_cast<int>(TERSE_OP_MAX);
  m.attr("OP_PRODUCT") = static_cast<int>(TERSE_OP_PRODUCT);
  m.attr("OP_ADASUM") = static_cast<int>(TERSE_OP_ADASUM);

  m.def("init", &terse::Init, Release(), py::arg("variables"),
        py::arg("process_sets") = std::vector<std::vector<int>>(),
        py::arg("world_ranks") = std::vector<int>(),
        py::arg("mpi_comm") = uintptr_t{0},
        "Starts the engine with the configuration parsed from `variables` "
        "(TERSE_* name -> value, e.g. the environment's) and the static "
        "process sets (sorted rank lists; ids 1, 2, ...), on the processes "
        "`world_ranks` lists (ranks of the communicator; empty: all) of "
        "the communicator whose MPI_Comm handle lies at address `mpi_comm` "
        "(mpi4py's MPI._addressof(comm); 0: MPI_COMM_WORLD).");
  m.def(
      "shutdown", [] { ThrowIfError(terse_shutdown()); }, Release(),
      "Stops the engine; pending handles fail. Idempotent.");
  m.def("is_initialized", [] { return terse_is_initialized() != 0; });
  m.def(
      "fatal_status",
      []() -> py::object {
        terse_error* error = terse_fatal_status();
        if (error == nullptr) return py::none();
        std::string message = terse_error_message(error);
        terse_error_free(error);
        return py::str(message);
      },
      "The error the engine stopped with (None while it runs).");
  m.def(
      "rank", [] { return terse::QueryOrThrow(&terse_rank); }, Release());
  m.def(
      "size", [] { return terse::QueryOrThrow(&terse_size); }, Release());
  m.def(
      "local_rank", [] { return terse::QueryOrThrow(&terse_local_rank); },
      Release());
  m.def(
      "local_size", [] { return terse::QueryOrThrow(&terse_local_size); },
      Release());

  m.def("allreduce_async", &terse::EnqueueAllreduce, Release(), py::arg("name"),
        py::arg("in_data"), py::arg("out_data"), py::arg("count"),
        py::arg("dtype"), py::arg("device"), py::arg("shape"), py::arg("op"),
        py::arg("prescale") = 1.0, py::arg("postscale") = 1.0,
        py::arg("stream") = 0, py::arg("compression") = "",
        py::arg("process_set") = 0,
        "Enqueues an allreduce of `count` elements from in_data into out_data "
        "(may be equal); returns the handle.");
  m.def("allgather_async", &terse::EnqueueAllgather, Release(), py::arg("name"),
        py::arg("data"), py::arg("count"), py::arg("dtype"), py::arg("device"),
        py::arg("shape"), py::arg("stream") = 0, py::arg("process_set") = 0);
  m.def("alltoall_async", &terse::EnqueueAlltoall, Release(), py::arg("name"),
        py::arg("data"), py::arg("count"), py::arg("dtype"), py::arg("device"),
        py::arg("shape"), py::arg("splits"), py::arg("process_set") = 0,
        "Enqueues an alltoall of a CPU tensor: splits[j] rows to set rank j "
        "(empty: equal parts); returns the handle.");
  m.def("reducescatter_async", &terse::EnqueueReducescatter, Release(),
        py::arg("name"), py::arg("data"), py::arg("count"), py::arg("dtype"),
        py::arg("device"), py::arg("shape"), py::arg("op"),
        py::arg("prescale") = 1.0, py::arg("postscale") = 1.0,
        py::arg("process_set") = 0,
        "Enqueues a reducescatter of a CPU tensor along dim 0 (Horovod's "
        "split); returns the handle.");
  m.def("broadcast_async", &terse::EnqueueBroadcast, Release(), py::arg("name"),
        py::arg("data"), py::arg("count"), py::arg("dtype"), py::arg("device"),
        py::arg("shape"), py::arg("root_rank"), py::arg("stream") = 0,
        py::arg("process_set") = 0,
        "root_rank is a world rank in the process set.");

  m.def(
      "poll",
      [](int64_t handle) {
        int done = 0;
        ThrowIfError(terse_poll(handle, &done));
        return done != 0;
      },
      Release(), py::arg("handle"));
  m.def(
      "wait", [](int64_t handle) { ThrowIfError(terse_wait(handle)); },
      Release(), py::arg("handle"),
      "Blocks (without the GIL) until the op completes; raises its error.");

  py::class_<terse::GatheredTensor>(m, "AllgatherResult")
      .def_property_readonly("shape", &terse::GatheredTensor::shape)
      .def_property_readonly("first_dims", &terse::GatheredTensor::first_dims)
      .def_property_readonly("dtype", &terse::GatheredTensor::dtype)
      .def_property_readonly("nbytes", &terse::GatheredTensor::nbytes)
      .def("copy_to", &terse::GatheredTensor::CopyTo, py::arg("dest"),
           py::arg("dest_bytes"),
           "Copies the packed rank-major result into dest (host memory).");
  m.def("take_allgather", &terse::TakeAllgather, Release(), py::arg("handle"),
        "After wait(handle): the allgather's result; releases the handle.");
  m.def("take_alltoall", &terse::TakeAlltoall, Release(), py::arg("handle"),
        "After wait(handle): the alltoall's result (first_dims: the rows "
        "received from each rank); releases the handle.");
  m.def("take_reducescatter", &terse::TakeReducescatter, Release(),
        py::arg("handle"),
        "After wait(handle): this rank's part of the reducescatter "
        "(first_dims: every rank's rows); releases the handle.");

  m.def(
      "barrier",
      [](int process_set) { ThrowIfError(terse_barrier_set(process_set)); },
      Release(), py::arg("process_set") = 0);
  m.def(
      "group_start",
      [](const std::string& name) {
        ThrowIfError(terse_group_start(name.c_str()));
      },
      Release(), py::arg("name"),
      "Ops this thread enqueues until group_end() form one group named "
      "`name`: answered in one negotiation cycle, fused only together, "
      "failing as one (terse_c.h terse_group_start).");
  m.def(
      "group_end", [] { ThrowIfError(terse_group_end()); }, Release(),
      "Queues the ops of this thread's open group together.");
  m.def(
      "add_process_set",
      [](const std::vector<int>& ranks) {
        int id = -1;
        ThrowIfError(terse_add_process_set(
            ranks.data(), static_cast<int>(ranks.size()), &id));
        return id;
      },
      Release(), py::arg("ranks"),
      "Collective over every rank: registers a process set; its id.");
  m.def(
      "remove_process_set",
      [](int id) { ThrowIfError(terse_remove_process_set(id)); }, Release(),
      py::arg("id"), "Collective over every rank: unregisters set `id`.");
  m.def("process_set_ranks", &terse::ProcessSetRanks, Release(), py::arg("id"),
        "The world ranks of registered set `id`.");
  m.def(
      "join",
      [] {
        int last = -1;
        ThrowIfError(terse_join(&last));
        return last;
      },
      Release(),
      "Contributes zeros until every rank joined; returns the last rank.");

  m.def(
      "bucket_reports",
      [] {
        terse_bucket_reports* reports = nullptr;
        {
          py::gil_scoped_release release;
          ThrowIfError(terse_bucket_reports_get(&reports));
        }
        std::unique_ptr<terse_bucket_reports,
                        decltype(&terse_bucket_reports_free)>
            owned(reports, &terse_bucket_reports_free);
        py::list out;
        for (int i = 0; i < terse_bucket_reports_count(reports); ++i) {
          py::dict d;
          d["bucket"] = terse_bucket_report_bucket(reports, i);
          d["tensors"] = terse_bucket_report_tensors(reports, i);
          d["bytes"] = terse_bucket_report_bytes(reports, i);
          d["policy"] = terse_bucket_report_policy(reports, i);
          d["compressor"] = terse_bucket_report_compressor(reports, i);
          d["cf"] = terse_bucket_report_cf(reports, i);
          d["bytes_sent"] = terse_bucket_report_bytes_sent(reports, i);
          d["steps"] = terse_bucket_report_steps(reports, i);
          d["process_set"] = terse_bucket_report_process_set(reports, i);
          out.append(d);
        }
        return out;
      },
      "What every bucket did on its last step: a list of dicts (bucket, "
      "tensors, bytes, policy, compressor, cf, bytes_sent, steps, "
      "process_set).");
  m.def(
      "bytes_sent",
      [] {
        int64_t bytes = 0;
        ThrowIfError(terse_bytes_sent(&bytes));
        return bytes;
      },
      Release(), "Bytes this rank has sent for reductions since init().");
  m.def(
      "notify_learning_rate_drop",
      [] { ThrowIfError(terse_notify_learning_rate_drop()); }, Release(),
      "The learning rate was just lowered (Accordion's signal).");
  m.def(
      "start_timeline",
      [](const std::string& path) {
        ThrowIfError(terse_start_timeline(path.c_str()));
      },
      Release(), py::arg("path"),
      "Starts writing a timeline to `path` (rank 0, or {rank} per rank).");
  m.def(
      "stop_timeline", [] { ThrowIfError(terse_stop_timeline()); }, Release(),
      "Completes the timeline being written (if any).");
  m.def(
      "save_compression_state",
      [] {
        char* data = nullptr;
        size_t size = 0;
        {
          py::gil_scoped_release release;
          ThrowIfError(terse_save_compression_state(&data, &size));
        }
        std::unique_ptr<char, decltype(&terse_free)> owned(data, &terse_free);
        return py::bytes(data, size);
      },
      "This rank's compression state (policies, error-feedback residuals).");
  m.def(
      "load_compression_state",
      [](const std::string& state) {
        py::gil_scoped_release release;
        ThrowIfError(terse_load_compression_state(state.data(), state.size()));
      },
      py::arg("state"), "Restores what save_compression_state() returned.");
  m.def(
      "save_compression_state_to_file",
      [](const std::string& path) {
        ThrowIfError(terse_save_compression_state_to_file(path.c_str()));
      },
      Release(), py::arg("path"),
      "Streams this rank's compression state to `path` (through path.tmp).");
  m.def(
      "load_compression_state_from_file",
      [](const std::string& path) {
        ThrowIfError(terse_load_compression_state_from_file(path.c_str()));
      },
      Release(), py::arg("path"),
      "Restores what save_compression_state_to_file() wrote.");

  m.def(
      "build_flags",
      [] {
        // What this binary was built with (Horovod's *_built queries). The
        // build always compiles the MPI, NCCL and CUDA paths in; the probe
        // reads the linked libraries' versions (0 when none loads).
        terse::CudaInfo cuda = terse::ProbeCuda();
        py::dict d;
        d["mpi"] = true;
        d["nccl_version"] = cuda.nccl_version;
        d["cuda_runtime_version"] = cuda.runtime_version;
        d["gpu_count"] = cuda.device_count;
        return d;
      },
      "Backends compiled in: mpi, nccl_version, cuda_runtime_version, "
      "gpu_count.");
  m.def(
      "mpi_thread_level",
      [] {
        // MPI_Query_thread of the MPI terse initialised (or the application
        // did); -1 when MPI is not initialised.
        int initialized = 0, finalized = 0;
        MPI_Initialized(&initialized);
        MPI_Finalized(&finalized);
        if (!initialized || finalized) return -1;
        int provided = MPI_THREAD_SINGLE;
        MPI_Query_thread(&provided);
        return provided;
      },
      "MPI's provided thread level (MPI_Query_thread), -1 before MPI_Init.");
  m.attr("MPI_THREAD_MULTIPLE") = static_cast<int>(MPI_THREAD_MULTIPLE);
  m.def(
      "build_info",
      [](const std::map<std::string, std::string>& variables) {
        terse::Config config = ValueOrThrow(terse::ConfigFromMap(variables));
        return terse::BuildInfo(config);
      },
      py::arg("variables"),
      "What `terse_info` prints: version, backends, GPU, effective config.");
}
